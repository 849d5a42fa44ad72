// fuzz/shrink.h: shrinking reaches the catalogue's minimum for the DeepSpeed band-B offload drop (G = 3, one
// rank, one scalar parameter, one step or two) from whatever failing trial a campaign meets first, and never
// returns a scenario that passes.
#include <gtest/gtest.h>

#include "fuzz/campaign.h"
#include "fuzz/shrink.h"

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

}  // namespace
}  // namespace accumcheck::fuzz
