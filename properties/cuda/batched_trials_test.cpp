// The batched mode on the CPU (cuda/batched_trials.h): the kernel's twin agrees with property 1's CPU path trial by
// trial on each of the three models, under the correct framework layer and under those that weight the loss
// wrongly; hand-built trials of each model; the campaign confirms, shrinks and finds the first failure where a CPU
// campaign does; the trials it does not cover go to the CPU path.
#include <gtest/gtest.h>

#include <iostream>

#include "cuda/batched_trials.h"
#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "models/model.h"
#include "fuzz/campaign.h"
#include "properties/property.h"
#include "sim/json/scenario_json.h"
#include "sim/target.h"

namespace accumcheck::cuda {
namespace {

fuzz::GeneratorOptions one_step(models::ModelKind model) {
  fuzz::GeneratorOptions options;
  options.model = model;
  options.step_count_max = 1;
  return options;
}
fuzz::GeneratorOptions linear_one_step() { return one_step(models::ModelKind::linear); }

struct Agreement {
  int batched = 0, failing = 0, clipped_equal = 0;
};

// Every trial the batched check covers, checked both ways.
Agreement agree(const std::string& framework, std::uint64_t seed, int trials, models::ModelKind model) {
  const auto normaliser = sim::find_normaliser(framework);
  const auto target = sim::make_target(framework == "reference" ? "reference" : framework + "+reference");
  const auto* property = properties::find_property("accumulated_update_equals_full_batch_update");
  Agreement a;
  BatchedTrials batch;
  std::vector<bool> cpu_fails;
  for (int i = 0; i < trials; ++i) {
    sim::Scenario s = fuzz::generate_scenario(fuzz::trial_seed(seed, static_cast<std::uint64_t>(i)), one_step(model));
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

void check_agreement(models::ModelKind model, int trials) {
  const std::string name(models::to_string(model));
  const Agreement reference = agree("reference", 1, trials, model);
  std::cout << name << ", reference: " << reference.batched << " of " << trials << " trials batched\n";
  EXPECT_EQ(reference.failing, 0) << name;
  EXPECT_GT(reference.batched, trials * 2 / 3) << name;
  for (const char* wrong : {"openrlhf@0.10.2", "openrlhf@0.10.3", "transformers@4.45", "transformers@4.46"}) {
    const Agreement a = agree(wrong, 2, trials, model);
    EXPECT_GT(a.batched, trials * 2 / 3) << wrong << " " << name;
    EXPECT_GT(a.failing, trials / 150) << wrong << " " << name;
    EXPECT_LT(a.failing, a.batched) << wrong << " " << name;
    std::cout << name << ", " << wrong << ": " << a.batched << " batched, " << a.failing << " fail property 1, "
              << a.clipped_equal << " flagged but equal after clipping\n";
  }
}

TEST(BatchedTrials, the_twin_agrees_with_property_1_trial_by_trial) { check_agreement(models::ModelKind::linear, 1500); }

TEST(BatchedTrials, the_twin_agrees_with_property_1_trial_by_trial_on_the_mlp) {
  check_agreement(models::ModelKind::mlp, 1500);
}

TEST(BatchedTrials, the_twin_agrees_with_property_1_trial_by_trial_on_the_tied_embedding) {
  check_agreement(models::ModelKind::tied_embedding, 1500);
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
  cpu.generator = batched_one_step();
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
  EXPECT_GT(report.cpu_path, 400u);  // several steps
  EXPECT_GT(report.batched, 200u);
  EXPECT_EQ(report.could_not_run, 0u);
  EXPECT_EQ(report.batched + report.cpu_path, 1000u);
}

// The values behind the flags: on random trials of each model under a layer that weights wrongly, every entry of the
// twin equals sum over sequences of d times the exact kernel's per-sequence sum (exact_*_batch.h, one group per
// sequence), laid out apart from the batched builder, and 0 on a frozen tensor.
void check_entry_values(models::ModelKind model, std::uint64_t seed) {
  const auto normaliser = sim::find_normaliser("openrlhf@0.10.2");
  const auto target = sim::make_target("openrlhf@0.10.2+reference");
  int compared = 0, nonzero = 0;
  for (int i = 0; i < 150; ++i) {
    sim::Scenario s = fuzz::generate_scenario(fuzz::trial_seed(seed, static_cast<std::uint64_t>(i)), one_step(model));
    BatchedTrials batch;
    if (!fuzz::fit_to_target(s, *target) || !add_batched_trial(batch, s, *normaliser).empty()) continue;
    std::vector<models::Sequence<models::Rational>> sequences;
    for (const auto& micro_batch : s.steps.front().micro_batches)
      for (const auto& rank : micro_batch.rank_sequences) sequences.insert(sequences.end(), rank.begin(), rank.end());
    // Each sequence's d, read off its supervised tokens (the builder's; unsupervised tokens carry 0).
    std::vector<models::Rational> d(sequences.size(), models::Rational(0));
    std::size_t token = 0;
    for (std::size_t q = 0; q < sequences.size(); ++q)
      for (int t = 0; t < sequences[q].token_count(); ++t, ++token)
        if (batch.weight_difference[token] != 0)
          d[q] = models::Rational(static_cast<long long>(batch.weight_difference[token]));
    std::vector<int> group(sequences.size());
    for (std::size_t q = 0; q < group.size(); ++q) group[q] = static_cast<int>(q);
    const int groups = std::max<int>(1, static_cast<int>(group.size()));
    const models::ModelSpec& spec = s.training.model;
    std::vector<Int128> sums;
    std::vector<int> tensor;  // per entry of one group
    if (model == models::ModelKind::mlp) {
      const ExactMlpBatch b = lay_out_mlp(spec, s.initial_parameters, sequences, group, groups);
      sums = host_mlp_sums(b);
      for (std::size_t e = 0; e < b.group_entry_count(); ++e)
        tensor.push_back(mlp_sum_index(e, b.input_size, b.hidden_size, b.output_size).kind);
    } else if (model == models::ModelKind::tied_embedding) {
      const ExactTiedBatch b = lay_out_tied(spec, s.initial_parameters, sequences, group, groups);
      sums = host_tied_sums(b);
      for (std::size_t e = 0; e < b.group_entry_count(); ++e)
        tensor.push_back(tied_sum_index(e, b.vocab_size, b.embed_size).is_bias ? 1 : 0);
    } else {
      const ExactLinearBatch b = lay_out(spec, s.initial_parameters, sequences, group, groups);
      sums = host_sums(b);
      for (std::size_t e = 0; e < b.sum_count() / static_cast<std::size_t>(groups); ++e) {
        const LinearSumIndex at = linear_sum_index(e, b.input_size, b.output_size, b.expert_count);
        tensor.push_back(at.k < b.input_size ? 2 * at.e : 2 * at.e + 1);
      }
    }
    const std::vector<bool> frozen = models::frozen_mask(spec);
    const std::vector<Int128> entries = host_batched_entries(batch);
    ASSERT_EQ(entries.size(), tensor.size()) << "trial " << i;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      models::Rational expected(0);
      if (!frozen[static_cast<std::size_t>(tensor[e])])
        for (std::size_t q = 0; q < sequences.size(); ++q) expected += d[q] * to_rational(sums[q * tensor.size() + e]);
      ASSERT_EQ(to_rational(entries[e]), expected) << models::to_string(model) << " trial " << i << " entry " << e;
      ++compared;
      nonzero += expected != models::Rational(0);
    }
  }
  std::cout << models::to_string(model) << ": " << compared << " entries compared, " << nonzero << " not zero\n";
  EXPECT_GT(compared, 500) << models::to_string(model);
  EXPECT_GT(nonzero, compared / 4) << models::to_string(model);  // the layer's weighting differs on many entries
}

TEST(BatchedTrials, every_entry_is_the_weighted_sum_of_the_exact_kernels_per_sequence_sums) {
  check_entry_values(models::ModelKind::linear, 11);
  check_entry_values(models::ModelKind::mlp, 12);
  check_entry_values(models::ModelKind::tied_embedding, 13);
}

// One hand-built trial of `model` at D = 1 with two supervised tokens weighted d0 and d1, and `entries` entries: what
// the three builders below share.
BatchedTrials one_trial(BatchedModel model, int in, int out, int hidden, std::size_t entries, std::int64_t d0,
                        std::int64_t d1, std::uint64_t frozen) {
  BatchedTrials t;
  t.model = {model};
  t.input_size = {in};
  t.output_size = {out};
  t.expert_count = {1};
  t.hidden_size = {hidden};
  t.denominator = {1};
  t.frozen_tensors = {frozen};
  t.weight_begin = {0};
  t.bias_begin = {0};
  t.token_begin = {0, 2};
  t.entry_begin = {0, static_cast<std::int64_t>(entries)};
  t.weight_difference = {d0, d1};
  t.route = {0, 0};
  t.entry_trial.assign(entries, 0);
  return t;
}

// The 1 x 1 linear model at W = 0, b = 0, two tokens x = 1 with y = -1 and y = -2 (r = 1 and r = 2).
BatchedTrials two_tokens(std::int64_t d0, std::int64_t d1, std::uint64_t frozen = 0) {
  BatchedTrials t = one_trial(batched_linear, 1, 1, 0, 2, d0, d1, frozen);
  t.feature_begin = {0, 1};
  t.target_begin = {0, 1};
  t.weights = {0};
  t.biases = {0};
  t.features = {1, 1};
  t.targets = {-1, -2};
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
  s.engine.precision = sim::Precision::bf16;
  EXPECT_EQ(add_batched_trial(batch, s, *reference), "16-bit storage or loss scaling");
  // The MLP and the tied embedding are covered too, each trial saying its model.
  EXPECT_EQ(add_batched_trial(batch, fuzz::generate_scenario(1, one_step(models::ModelKind::mlp)), *reference), "");
  EXPECT_EQ(add_batched_trial(batch, fuzz::generate_scenario(1, one_step(models::ModelKind::tied_embedding)), *reference), "");
  EXPECT_EQ(batch.model, (std::vector<std::int32_t>{batched_linear, batched_mlp, batched_tied}));
  EXPECT_EQ(batch.entry_begin.size(), 4u);
}

// One trial of the 1-1-1 MLP at W1 = 1, b1 = 0, W2 = 2, b2 = 0, D = 1, two supervised tokens: x = 1, y = 1 (z = h =
// 1, r = 1: dW1 2, db1 2, dW2 1, db2 1) and x = 2, y = 3 (z = h = 2, r = 1: dW1 4, db1 2, dW2 2, db2 1), weighted d0
// and d1.
BatchedTrials mlp_two_tokens(std::int64_t d0, std::int64_t d1, std::uint64_t frozen = 0) {
  BatchedTrials t = one_trial(batched_mlp, 1, 1, 1, 4, d0, d1, frozen);
  t.feature_begin = {0, 1};
  t.target_begin = {0, 1};
  t.weights = {1, 0, 2, 0};  // W1, b1, W2, b2
  t.features = {1, 2};
  t.targets = {1, 3};
  return t;
}

TEST(BatchedTrials, the_mlp_check_weighs_each_token_by_its_difference) {
  // Entries: dW1 2 d0 + 4 d1, db1 2 d0 + 2 d1, dW2 d0 + 2 d1, db2 d0 + d1. Only d = 0 zeroes all four.
  EXPECT_EQ(host_batched_failures(mlp_two_tokens(0, 0)), std::vector<std::uint8_t>{0});
  EXPECT_EQ(host_batched_failures(mlp_two_tokens(1, -1)), std::vector<std::uint8_t>{1});
  EXPECT_EQ(host_batched_failures(mlp_two_tokens(2, -1)), std::vector<std::uint8_t>{1});
  // With every tensor frozen but b1 (bits: W1 0, b1 1, W2 2, b2 3), d = (1, -1) zeroes what is applied; with only
  // W2 trainable, d = (2, -1) does, and (1, -1) does not.
  EXPECT_EQ(host_batched_failures(mlp_two_tokens(1, -1, 0b1101)), std::vector<std::uint8_t>{0});
  EXPECT_EQ(host_batched_failures(mlp_two_tokens(2, -1, 0b1011)), std::vector<std::uint8_t>{0});
  EXPECT_EQ(host_batched_failures(mlp_two_tokens(1, -1, 0b1011)), std::vector<std::uint8_t>{1});
}

// One trial of the tied embedding with V = 2, Dm = 1, E = [1; 2], b = 0, D = 1, two supervised tokens with y = 0:
// id 0 (r = [1, 2]: dE [6, 2], db [1, 2]) and id 1 (r = [2, 4]: dE [4, 18], db [2, 4]), weighted d0 and d1.
BatchedTrials tied_two_tokens(std::int64_t d0, std::int64_t d1, std::uint64_t frozen = 0) {
  BatchedTrials t = one_trial(batched_tied, 1, 2, 0, 4, d0, d1, frozen);  // Dm = 1, V = 2
  t.feature_begin = {0, 0};
  t.target_begin = {0, 2};
  t.route = {0, 1};          // the token ids
  t.weights = {1, 2, 0, 0};  // E, b
  t.targets = {0, 0, 0, 0};
  return t;
}

TEST(BatchedTrials, the_tied_embedding_check_weighs_each_token_by_its_difference) {
  // Entries: dE[0] 6 d0 + 4 d1, dE[1] 2 d0 + 18 d1, db[0] d0 + 2 d1, db[1] 2 d0 + 4 d1. d = (2, -1) zeroes db only.
  EXPECT_EQ(host_batched_failures(tied_two_tokens(0, 0)), std::vector<std::uint8_t>{0});
  EXPECT_EQ(host_batched_failures(tied_two_tokens(2, -1)), std::vector<std::uint8_t>{1});
  EXPECT_EQ(host_batched_failures(tied_two_tokens(2, -1, 0b01)), std::vector<std::uint8_t>{0});  // E frozen
  EXPECT_EQ(host_batched_failures(tied_two_tokens(1, -1, 0b01)), std::vector<std::uint8_t>{1});
  EXPECT_EQ(host_batched_failures(tied_two_tokens(1, -1, 0b11)), std::vector<std::uint8_t>{0});
}

}  // namespace
}  // namespace accumcheck::cuda
