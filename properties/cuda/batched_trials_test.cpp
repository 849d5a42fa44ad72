// The batched mode on the CPU (cuda/batched_trials.h): the kernel's twin agrees with property 1's CPU path trial by
// trial, under the correct framework layer and under those that weight the loss wrongly; the campaign confirms,
// shrinks and finds the first failure where a CPU campaign does; the trials it does not cover go to the CPU path.
#include <gtest/gtest.h>

#include "cuda/batched_trials.h"
#include "fuzz/campaign.h"
#include "properties/property.h"
#include "sim/json/scenario_json.h"
#include "sim/target.h"

namespace accumcheck::cuda {
namespace {

fuzz::GeneratorOptions linear_one_step() {
  fuzz::GeneratorOptions options;
  options.model = models::ModelKind::linear;
  options.step_count_max = 1;
  return options;
}

struct Agreement {
  int batched = 0, failing = 0, clipped_equal = 0;
};

// Every trial the batched check covers, checked both ways.
Agreement agree(const std::string& framework, std::uint64_t seed, int trials) {
  const auto normaliser = sim::find_normaliser(framework);
  const auto target = sim::make_target(framework == "reference" ? "reference" : framework + "+reference");
  const auto* property = properties::find_property("accumulated_update_equals_full_batch_update");
  Agreement a;
  BatchedTrials batch;
  std::vector<bool> cpu_fails;
  for (int i = 0; i < trials; ++i) {
    sim::Scenario s = fuzz::generate_scenario(fuzz::trial_seed(seed, static_cast<std::uint64_t>(i)), linear_one_step());
    if (!fuzz::fit_to_target(s, *target) || !add_batched_trial(batch, s, *normaliser).empty()) continue;
    const properties::Verdict v = fuzz::check_pair(*target, *property, s, sim::ScalarKind::fast_rational);
    EXPECT_NE(v.outcome, properties::Outcome::cannot_run) << framework << " trial " << i << ": " << v.message;
    cpu_fails.push_back(v.outcome == properties::Outcome::fail);
  }
  const std::vector<std::uint8_t> flags = host_batched_failures(batch);
  EXPECT_EQ(flags.size(), cpu_fails.size());
  for (std::size_t j = 0; j < flags.size() && j < cpu_fails.size(); ++j) {
    // A pass is exact; a flag is exact without clipping, and with it a candidate (batched_check.h).
    if (!flags[j] || !batch.clipped[j]) {
      EXPECT_EQ(flags[j] != 0, cpu_fails[j]) << framework << ": batched trial " << j;
    }
    a.failing += cpu_fails[j];
    a.clipped_equal += flags[j] && !cpu_fails[j];
  }
  a.batched = static_cast<int>(flags.size());
  return a;
}

TEST(BatchedTrials, the_twin_agrees_with_property_1_trial_by_trial) {
  const Agreement reference = agree("reference", 1, 1500);
  EXPECT_EQ(reference.failing, 0);
  EXPECT_GT(reference.batched, 1000);
  for (const char* wrong : {"openrlhf@0.10.2", "openrlhf@0.10.3", "transformers@4.45", "transformers@4.46"}) {
    const Agreement a = agree(wrong, 2, 1500);
    EXPECT_GT(a.batched, 1000) << wrong;
    EXPECT_GT(a.failing, 10) << wrong;
    EXPECT_LT(a.failing, a.batched) << wrong;
  }
}

TEST(BatchedTrials, a_campaign_finds_the_first_failure_a_cpu_campaign_finds) {
  BatchedCampaignConfig config;
  config.framework = "openrlhf@0.10.2";
  config.seed = 3;
  config.trials = 3000;
  config.trials_per_launch = 700;  // several launches
  config.backend = BatchedBackend::host_twin;
  config.shrink_budget = 500;
  const BatchedCampaignReport report = run_batched_campaign(config);
  EXPECT_EQ(report.target, "openrlhf@0.10.2+reference");
  EXPECT_TRUE(report.disagreements.empty()) << report.disagreements.front();
  EXPECT_EQ(report.batched + report.cpu_path, 3000u);
  EXPECT_GT(report.batched, 2000u);
  EXPECT_EQ(report.could_not_run, 0u);
  ASSERT_FALSE(report.failing_trials.empty());
  ASSERT_TRUE(report.finding.has_value());
  EXPECT_EQ(report.finding->trial, static_cast<std::int64_t>(report.failing_trials.front()));

  fuzz::CampaignConfig cpu;
  cpu.targets = {"openrlhf@0.10.2+reference"};
  cpu.properties = {"accumulated_update_equals_full_batch_update"};
  cpu.seed = 3;
  cpu.trials = 3000;
  cpu.generator = linear_one_step();
  cpu.shrink_budget = 500;
  const fuzz::CampaignReport campaign = fuzz::run_campaign(cpu);
  ASSERT_TRUE(campaign.pairs.at(0).finding.has_value());
  EXPECT_EQ(campaign.pairs[0].finding->trial, report.finding->trial);
  // The same shrink on the same path.
  EXPECT_EQ(sim::to_json(campaign.pairs[0].finding->scenario), sim::to_json(report.finding->scenario));

  // Two host threads, and other launch sizes: the same results.
  config.jobs = 2;
  config.trials_per_launch = 1500;
  const BatchedCampaignReport two = run_batched_campaign(config);
  EXPECT_EQ(two.failing_trials, report.failing_trials);
  EXPECT_EQ(two.batched, report.batched);
  ASSERT_TRUE(two.finding.has_value());
  EXPECT_EQ(sim::to_json(two.finding->scenario), sim::to_json(report.finding->scenario));
}

TEST(BatchedTrials, the_correct_layer_is_clean_and_the_uncovered_trials_go_to_the_cpu_path) {
  BatchedCampaignConfig config;
  config.seed = 4;
  config.trials = 1000;
  config.backend = BatchedBackend::host_twin;
  config.generator = fuzz::GeneratorOptions{};  // every model, up to three steps
  const BatchedCampaignReport report = run_batched_campaign(config);
  EXPECT_EQ(report.target, "reference");
  EXPECT_TRUE(report.failing_trials.empty());
  EXPECT_FALSE(report.finding.has_value());
  EXPECT_GT(report.cpu_path, 600u);  // the MLP, the tied embedding, several steps
  EXPECT_GT(report.batched, 100u);
  EXPECT_EQ(report.could_not_run, 0u);
  EXPECT_EQ(report.batched + report.cpu_path, 1000u);
}

// One trial of the 1 x 1 linear model at W = 0, b = 0, D = 1, two supervised tokens x = 1 with y = -1 and y = -2
// (r = 1 and r = 2), weighted d0 and d1.
BatchedTrials two_tokens(std::int64_t d0, std::int64_t d1, std::uint64_t frozen = 0) {
  BatchedTrials t;
  t.input_size = {1};
  t.output_size = {1};
  t.expert_count = {1};
  t.denominator = {1};
  t.frozen_tensors = {frozen};
  t.weight_begin = {0};
  t.bias_begin = {0};
  t.token_begin = {0, 2};
  t.entry_begin = {0, 2};
  t.feature_begin = {0, 1};
  t.target_begin = {0, 1};
  t.weight_difference = {d0, d1};
  t.expert = {0, 0};
  t.weights = {0};
  t.biases = {0};
  t.features = {1, 1};
  t.targets = {-1, -2};
  t.entry_trial = {0, 0};
  return t;
}

TEST(BatchedTrials, the_check_weighs_each_token_by_its_difference) {
  // 2 * 1 - 1 * 2 = 0 in both entries: the two weightings give the same gradient, and property 1 holds.
  EXPECT_EQ(host_batched_failures(two_tokens(2, -1)), std::vector<std::uint8_t>{0});
  EXPECT_EQ(host_batched_failures(two_tokens(1, -1)), std::vector<std::uint8_t>{1});
  EXPECT_EQ(host_batched_failures(two_tokens(0, 0)), std::vector<std::uint8_t>{0});
  // Both tensors frozen: nothing is applied, nothing can differ.
  EXPECT_EQ(host_batched_failures(two_tokens(1, -1, 0b11)), std::vector<std::uint8_t>{0});
  EXPECT_EQ(host_batched_failures(two_tokens(1, -1, 0b01)), std::vector<std::uint8_t>{1});
}

TEST(BatchedTrials, says_why_a_trial_is_not_covered) {
  const auto reference = sim::find_normaliser("reference");
  BatchedTrials batch;
  fuzz::GeneratorOptions mlp;
  mlp.model = models::ModelKind::mlp;
  EXPECT_EQ(add_batched_trial(batch, fuzz::generate_scenario(1, mlp), *reference), "not the linear model");
  fuzz::GeneratorOptions steps = linear_one_step();
  steps.step_count_max = 3;
  sim::Scenario s = fuzz::generate_scenario(1, steps);
  s.steps.resize(2, s.steps.front());
  EXPECT_EQ(add_batched_trial(batch, s, *reference), "not one optimizer step");
  EXPECT_EQ(batch.trial_count(), 0);
  EXPECT_EQ(batch.token_begin, std::vector<std::int64_t>{0});
  s.steps.resize(1);
  s.training.max_grad_norm = models::Rational(1);
  EXPECT_EQ(add_batched_trial(batch, s, *reference), "");  // clipping: a flag is then a candidate
  EXPECT_EQ(batch.clipped, std::vector<std::uint8_t>{1});
}

}  // namespace
}  // namespace accumcheck::cuda
