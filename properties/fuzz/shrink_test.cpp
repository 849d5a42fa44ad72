// fuzz/shrink.h: shrinking reaches the catalogue's minimum for the DeepSpeed band-B offload drop (G = 3, one
// rank, one scalar parameter, one step or two) from whatever failing trial a campaign meets first, and never
// returns a scenario that passes.
#include <memory>

#include <gtest/gtest.h>

#include "fuzz/campaign.h"
#include "fuzz/generator.h"
#include "fuzz/shrink.h"
#include "sim/examples/naive_ddp_engine.h"

namespace accumcheck::fuzz {
namespace {

std::size_t trainable_values(const sim::Scenario& s) { return models::trainable_value_count(s.training.model); }

TEST(Shrink, band_b_offload_drop_shrinks_to_the_catalogue_minimum_from_every_seed) {
  const auto target = sim::make_target("deepspeed@0.16.0");
  const auto* property = properties::find_property("accumulated_update_equals_full_batch_update");
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CampaignConfig config;
    config.targets = {"deepspeed@0.16.0"};
    config.properties = {std::string(property->name())};
    config.seed = seed;
    config.trials = 1000;
    config.generator.ordinary_only = true;  // the other DeepSpeed behaviours have minima of their own
    const CampaignReport report = run_campaign(config);
    ASSERT_EQ(report.findings(), 1u) << "seed " << seed;
    const sim::Scenario& s = report.pairs[0].finding->scenario;
    EXPECT_EQ(s.engine.accumulation_steps, 3) << "seed " << seed;
    EXPECT_EQ(s.engine.rank_count, 1) << "seed " << seed;
    EXPECT_EQ(trainable_values(s), 1u) << "seed " << seed;
    EXPECT_LE(s.steps.size(), 2u) << "seed " << seed;
    EXPECT_EQ(s.engine.zero_stage, 2) << "seed " << seed;
    EXPECT_TRUE(s.engine.offload) << "seed " << seed;
    EXPECT_EQ(check_pair(*target, *property, s, sim::ScalarKind::fast_rational).outcome, properties::Outcome::fail);
  }
}

// Outside ordinary loops the first failure may be another behaviour of the same release; each still
// shrinks to one scalar parameter, one rank and at most two steps.
TEST(Shrink, every_first_failure_of_band_b_shrinks_to_one_scalar_parameter) {
  const auto target = sim::make_target("deepspeed@0.16.0");
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CampaignConfig config;
    config.targets = {"deepspeed@0.16.0"};
    config.properties = {"accumulated_update_equals_full_batch_update"};
    config.seed = seed;
    config.trials = 1000;
    const CampaignReport report = run_campaign(config);
    ASSERT_EQ(report.findings(), 1u) << "seed " << seed;
    const sim::Scenario& s = report.pairs[0].finding->scenario;
    EXPECT_EQ(s.engine.rank_count, 1) << "seed " << seed;
    EXPECT_LE(s.steps.size(), 2u) << "seed " << seed;
    EXPECT_LE(trainable_values(s), 2u) << "seed " << seed;
  }
}

TEST(Shrink, keeps_only_candidates_that_still_fail_and_stops_at_the_budget) {
  const sim::Scenario start = generate_scenario(trial_seed(11, 0), GeneratorOptions{});
  // A predicate that fails only while the scenario has at least two steps: shrinking keeps two.
  const auto result = shrink(start, [](const sim::Scenario& s) { return s.steps.size() >= 2; });
  if (start.steps.size() >= 2) {
    EXPECT_EQ(result.scenario.steps.size(), 2u);
  }
  const auto limited = shrink(start, [](const sim::Scenario&) { return true; }, 3);
  EXPECT_LE(limited.attempts, 3u);
  EXPECT_TRUE(limited.budget_exhausted);
  EXPECT_LE(scenario_size(limited.scenario), scenario_size(start));
}

// Minimality on every generated axis: for a failure that needs only one feature, the minimum keeps that feature
// and nothing the shrinker could make smaller. Each predicate stands for a bug that needs exactly that.
sim::Scenario first_generated(const std::function<bool(const sim::Scenario&)>& wanted) {
  for (std::uint64_t i = 0; i < 5000; ++i) {
    const sim::Scenario s = generate_scenario(trial_seed(99, i), GeneratorOptions{});
    if (wanted(s)) return s;
  }
  ADD_FAILURE() << "no generated scenario has the feature";
  return {};
}

TEST(Shrink, a_tied_embedding_minimum_has_one_token_and_one_dimension) {
  auto tied = [](const sim::Scenario& s) { return s.training.model.kind == models::ModelKind::tied_embedding; };
  const sim::Scenario start = first_generated([&](const sim::Scenario& s) {
    return tied(s) && s.training.model.vocab_size > 1 && s.training.model.embed_size > 1;
  });
  const ShrinkResult r = shrink(start, tied);
  EXPECT_FALSE(r.budget_exhausted);
  EXPECT_EQ(r.scenario.training.model.vocab_size, 1);
  EXPECT_EQ(r.scenario.training.model.embed_size, 1);
}

TEST(Shrink, an_expert_minimum_has_two_experts_one_input_and_one_output) {
  auto experts = [](const sim::Scenario& s) { return s.training.model.expert_count >= 2; };
  const sim::Scenario start = first_generated([&](const sim::Scenario& s) {
    const auto& m = s.training.model;
    return m.expert_count > 2 && (m.input_size > 1 || m.output_size > 1);
  });
  const ShrinkResult r = shrink(start, experts);
  EXPECT_FALSE(r.budget_exhausted);
  EXPECT_EQ(r.scenario.training.model.expert_count, 2);
  EXPECT_EQ(r.scenario.training.model.input_size, 1);
  EXPECT_EQ(r.scenario.training.model.output_size, 1);
}

TEST(Shrink, a_failure_that_needs_weight_decay_keeps_no_momentum_and_no_adam) {
  auto decays = [](const sim::Scenario& s) { return s.training.optimizer.weight_decay.sign() != 0; };
  for (const bool adam : {false, true}) {
    const sim::Scenario start = first_generated([&](const sim::Scenario& s) {
      const auto& o = s.training.optimizer;
      return decays(s) && (adam ? o.kind != models::OptimizerKind::sgd : o.momentum.sign() != 0);
    });
    const ShrinkResult r = shrink(start, decays);
    const auto& o = r.scenario.training.optimizer;
    EXPECT_EQ(o.kind, models::OptimizerKind::sgd) << "from adam: " << adam;
    EXPECT_EQ(o.momentum.sign(), 0) << "from adam: " << adam;
    EXPECT_FALSE(o.nesterov);
    EXPECT_NE(o.weight_decay.sign(), 0);
  }
}

TEST(Shrink, g_shrinks_under_a_manual_boundary) {
  // A bug that needs a manual boundary and a window of two micro-batches, and no particular G.
  auto needs = [](const sim::Scenario& s) {
    return s.engine.boundary == sim::BoundaryMode::manual && !s.steps.empty() && s.steps[0].micro_batches.size() >= 2;
  };
  const sim::Scenario start = first_generated([&](const sim::Scenario& s) {
    bool uneven = false;
    for (const auto& step : s.steps) uneven = uneven || step.micro_batches.size() != s.steps[0].micro_batches.size();
    return needs(s) && s.engine.accumulation_steps > 2 && uneven;  // uneven: no automatic boundary to switch to
  });
  const ShrinkResult r = shrink(start, needs);
  EXPECT_EQ(r.scenario.engine.boundary, sim::BoundaryMode::manual);
  EXPECT_EQ(r.scenario.engine.accumulation_steps, 1) << "G stayed " << r.scenario.engine.accumulation_steps;
}

// The same on a plug-in engine's real finding: the naive-ddp loop that forgets zero_grad(), met on a tied
// embedding, shrinks to one token and one dimension (the issue found V = 4, D = 2 kept where V = D = 1 shows it).
TEST(Shrink, a_plug_in_engines_tied_embedding_finding_reaches_the_smallest_model) {
  sim::register_engine_model(std::make_shared<sim::examples::NaiveDdpEngineModel>(
      "naive-ddp-leaky-shrink", sim::examples::NaiveDdpFaults{.skip_zero_grad_after_step = true}));
  CampaignConfig config;
  config.targets = {"naive-ddp-leaky-shrink"};
  config.properties = {"multi_step_trajectory_equals_full_batch_trajectory"};
  config.seed = 5;
  config.trials = 640;
  config.generator.model = models::ModelKind::tied_embedding;
  const CampaignReport report = run_campaign(config);
  ASSERT_EQ(report.findings(), 1u);
  const sim::Scenario& s = report.pairs[0].finding->scenario;
  EXPECT_EQ(s.training.model.vocab_size, 1);
  EXPECT_EQ(s.training.model.embed_size, 1);
  EXPECT_EQ(s.training.optimizer.kind, models::OptimizerKind::sgd);
  EXPECT_EQ(s.training.optimizer.momentum.sign(), 0);
  EXPECT_EQ(s.engine.rank_count, 1);
}

}  // namespace
}  // namespace accumcheck::fuzz
