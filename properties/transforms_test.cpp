// The scenario transformations (properties/transforms.h) against their definitions written out here: resplit, the
// one that builds its steps anew (the others copy the scenario and change its engine or its windows' order).
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/generators/scenario_generators.h"
#include "properties/transforms.h"
#include "sim/json/scenario_json.h"

namespace {

using accumcheck::models::Rational;
using accumcheck::models::Sequence;
namespace sim = accumcheck::sim;

// resplit's contract, built the plain way: the scenario copied whole, its engine set, and each step's global batch
// (sim::oracle_batches) dealt out, sequence i to micro-batch (i / R) % G, rank i % R.
sim::Scenario resplit_by_definition(const sim::Scenario& scenario, int R, int G) {
  sim::Scenario out = scenario;
  out.engine.rank_count = R;
  out.engine.accumulation_steps = G;
  out.engine.boundary = sim::BoundaryMode::automatic;
  out.engine.step_after_every_backward = true;
  const auto batches = sim::oracle_batches(scenario);
  const auto ranks = static_cast<std::size_t>(R), window = static_cast<std::size_t>(G);
  for (std::size_t s = 0; s < batches.size(); ++s) {
    sim::StepPlan plan;
    for (std::size_t k = 0; k < window; ++k)
      plan.micro_batches.push_back(sim::MicroBatch{std::vector<std::vector<Sequence<Rational>>>(ranks)});
    for (std::size_t i = 0; i < batches[s].size(); ++i)
      plan.micro_batches[(i / ranks) % window].rank_sequences[i % ranks].push_back(batches[s][i]);
    out.steps[s] = plan;
  }
  return out;
}

}  // namespace

// Every field (training, engine, parameters, checkpoint, seed, and each sequence's values and place) compared
// through the scenario's JSON form, which writes them all.
RC_GTEST_PROP(Transforms, resplit_deals_each_steps_global_batch_as_defined, ()) {
  const sim::Scenario scenario = *accumcheck::properties::gen_scenario();
  const int R = *rc::gen::inRange(1, 5);
  const int G = *rc::gen::inRange(1, 6);
  const sim::Scenario resplit = accumcheck::properties::resplit(scenario, R, G);
  RC_ASSERT(accumcheck::sim::to_json(resplit) == accumcheck::sim::to_json(resplit_by_definition(scenario, R, G)));
}
