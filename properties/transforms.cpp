// Scenario transformations.
#include "properties/transforms.h"

#include <algorithm>

namespace accumcheck::properties {

namespace {

// Every field of the scenario but its steps, which a transformation builds itself: copying them first would copy
// every sequence only to overwrite it. The structured binding names every field, so a new one fails to compile
// here until it is copied too.
sim::Scenario without_steps(const sim::Scenario& scenario) {
  const auto& [training, engine, initial_parameters, steps, checkpoint_after_step, schedule_seed] = scenario;
  sim::Scenario out;
  out.training = training;
  out.engine = engine;
  out.initial_parameters = initial_parameters;
  out.checkpoint_after_step = checkpoint_after_step;
  out.schedule_seed = schedule_seed;
  return out;
}

}  // namespace

sim::Scenario resplit(const sim::Scenario& scenario, int rank_count, int accumulation_steps) {
  sim::Scenario out = without_steps(scenario);
  out.engine.rank_count = rank_count;
  out.engine.accumulation_steps = accumulation_steps;
  out.engine.boundary = sim::BoundaryMode::automatic;
  out.engine.step_after_every_backward = true;
  const auto R = static_cast<std::size_t>(rank_count), G = static_cast<std::size_t>(accumulation_steps);
  out.steps.reserve(scenario.steps.size());
  for (const sim::StepPlan& step : scenario.steps) {
    sim::StepPlan plan;
    plan.micro_batches.assign(G, sim::MicroBatch{std::vector<std::vector<models::Sequence<models::Rational>>>(R)});
    // The step's global batch in the oracle's order (sim::oracle_batches), sequence i dealt to rank i mod R of
    // micro-batch (i / R) mod G, each copied once.
    std::size_t i = 0;
    for (const auto& micro_batch : step.micro_batches)
      for (const auto& rank : micro_batch.rank_sequences)
        for (const auto& sequence : rank) {
          plan.micro_batches[(i / R) % G].rank_sequences[i % R].push_back(sequence);
          ++i;
        }
    out.steps.push_back(std::move(plan));
  }
  return out;
}

sim::Scenario rotate_micro_batches(const sim::Scenario& scenario) {
  sim::Scenario out = scenario;
  for (auto& step : out.steps)
    if (!step.micro_batches.empty()) std::rotate(step.micro_batches.begin(), step.micro_batches.begin() + 1, step.micro_batches.end());
  return out;
}

std::optional<sim::Scenario> with_manual_boundary(const sim::Scenario& scenario) {
  for (const auto& step : scenario.steps)
    if (static_cast<int>(step.micro_batches.size()) != scenario.engine.accumulation_steps) return std::nullopt;
  sim::Scenario out = scenario;
  out.engine.boundary = sim::BoundaryMode::manual;
  out.engine.step_after_every_backward = true;
  return out;
}

std::optional<sim::Scenario> with_automatic_boundary(const sim::Scenario& scenario) {
  if (scenario.steps.empty()) return std::nullopt;
  const std::size_t size = scenario.steps[0].micro_batches.size();
  for (const auto& step : scenario.steps)
    if (step.micro_batches.size() != size || size == 0) return std::nullopt;
  sim::Scenario out = scenario;
  out.engine.accumulation_steps = static_cast<int>(size);
  out.engine.boundary = sim::BoundaryMode::automatic;
  out.engine.step_after_every_backward = true;
  return out;
}

}  // namespace accumcheck::properties
