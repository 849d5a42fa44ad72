// Scenario transformations.
#include "properties/transforms.h"

#include <algorithm>

namespace accumcheck::properties {

sim::Scenario resplit(const sim::Scenario& scenario, int rank_count, int accumulation_steps) {
  sim::Scenario out = scenario;
  out.engine.rank_count = rank_count;
  out.engine.accumulation_steps = accumulation_steps;
  out.engine.boundary = sim::BoundaryMode::automatic;
  out.engine.step_after_every_backward = true;
  const auto batches = sim::oracle_batches(scenario);
  for (std::size_t s = 0; s < batches.size(); ++s) {
    sim::StepPlan plan;
    plan.micro_batches.assign(static_cast<std::size_t>(accumulation_steps),
                              sim::MicroBatch{std::vector<std::vector<models::Sequence<models::Rational>>>(static_cast<std::size_t>(rank_count))});
    for (std::size_t i = 0; i < batches[s].size(); ++i) {
      const std::size_t r = i % static_cast<std::size_t>(rank_count);
      const std::size_t k = (i / static_cast<std::size_t>(rank_count)) % static_cast<std::size_t>(accumulation_steps);
      plan.micro_batches[k].rank_sequences[r].push_back(batches[s][i]);
    }
    out.steps[s] = std::move(plan);
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
