// The offload pipeline as a target (cuda/offload_engine.h), on the CPU: its twin of the pipeline, the engine around
// it under every property of a campaign, and the device variants without a device. The same engine on a device is
// checked by offload_engine_device_test.cpp.
#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/twin_sums.h"
#include "cuda/offload_engine.h"
#include "cuda/random_linear_batch.h"
#include "fuzz/campaign.h"
#include "properties/cuda/offload_campaign.h"
#include "sim/target.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

std::vector<ExactLinearBatch> random_window(std::mt19937_64& rng, int micro_batches) {
  models::ModelSpec spec;
  spec.input_size = 3;
  spec.output_size = 2;
  spec.expert_count = 2;
  std::vector<ExactLinearBatch> window;
  for (int j = 0; j < micro_batches; ++j) {
    const RandomBatch r = random_batch(rng, spec, 3, 4);
    const std::vector<int> group = {0, 1, 2};
    window.push_back(lay_out(r.spec, r.params, r.sequences, group, 3));
  }
  return window;
}

// What each read saw, copied out of the buffer the pipeline reuses.
std::vector<std::vector<Int128>> reads_of(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& s) {
  std::vector<std::vector<Int128>> seen(window.size());
  run_host_pipeline(window, s, [&](std::size_t j, const Int128* sums) {
    seen[j].assign(sums, sums + window[j].sum_count());
  });
  return seen;
}

TEST(OffloadHostPipeline, synchronised_reads_every_micro_batch_once_in_order) {
  std::mt19937_64 rng(11);
  const auto window = random_window(rng, 6);
  PipelineSchedule s = draw_schedule(3, 6, true);
  s.delay_ns = {0, 5000, 0, 7000, 1000, 0};
  const auto seen = reads_of(window, s);
  for (std::size_t j = 0; j < window.size(); ++j) EXPECT_EQ(seen[j], host_sums(window[j])) << "micro-batch " << j;
}

TEST(OffloadHostPipeline, unsynchronised_reads_a_late_copy_from_the_older_micro_batch) {
  std::mt19937_64 rng(12);
  const auto window = random_window(rng, 5);
  PipelineSchedule s = draw_schedule(3, 5, false);
  s.delay_ns = {2000, 0, 0, 3000, 0};
  const auto seen = reads_of(window, s);
  EXPECT_EQ(seen[0], std::vector<Int128>(window[0].sum_count(), 0));  // nothing landed in its buffer yet
  EXPECT_EQ(seen[1], host_sums(window[1]));
  EXPECT_EQ(seen[2], host_sums(window[2]));
  EXPECT_EQ(seen[3], host_sums(window[1]));  // the buffer it shares with micro-batch 1
  EXPECT_EQ(seen[4], host_sums(window[4]));
  EXPECT_THROW(run_host_pipeline(window, draw_schedule(3, 4, true), [](std::size_t, const Int128*) {}),
               std::invalid_argument);
}

// A window laid out once (one parameter set, every micro-batch's tokens, group ids from 0 in each) read through the
// twin micro-batch by micro-batch: each read is that micro-batch's own gradient, the same as from its own layout, for
// each model; and a range outside the window is refused.
TEST(OffloadHostPipeline, a_window_laid_out_once_reads_each_micro_batch_as_its_own_layout) {
  std::mt19937_64 rng(13);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    models::ModelSpec spec;
    if (trial % 3 == 1) spec = mlp_spec(2, 3, 2);
    else if (trial % 3 == 2) spec = tied_spec(4, 2);
    else spec.input_size = 3, spec.output_size = 2, spec.expert_count = 2;
    const RandomBatch first = random_batch(rng, spec, 3, 4);
    // Micro-batches of 0 to 3 sequences, all at the first one's parameters.
    std::vector<std::vector<models::Sequence<Rational>>> micro_batches;
    std::vector<models::Sequence<Rational>> all;
    std::vector<int> group;
    std::vector<TokenRange> ranges;
    int token = 0;
    for (int j = 0; j < 4; ++j) {
      const RandomBatch r = random_batch(rng, spec, static_cast<int>(rng() % 4), 4);
      micro_batches.push_back(r.sequences);
      const int begin = token;
      for (std::size_t i = 0; i < r.sequences.size(); ++i) {
        all.push_back(r.sequences[i]);
        group.push_back(static_cast<int>(i));
        token += r.sequences[i].token_count();
      }
      ranges.push_back({begin, token - begin});
    }
    const std::vector<Rational> c = {Rational(1LL, 3LL), Rational(2), Rational(-1LL, 5LL)};
    const auto check = [&](const auto& window, const auto& lay_out_one, const auto& gradient) {
      run_host_pipeline(window, ranges, draw_schedule(5, 4, true), [&](std::size_t j, const Int128* sums) {
        const auto own = lay_out_one(micro_batches[j]);
        const models::Gradient<Rational> got = gradient(window, std::span<const Int128>(sums, window.sum_count()));
        const models::Gradient<Rational> expected = gradient(own, twin_sums(own));
        for (std::size_t p = 0; p < got.size(); ++p)
          ASSERT_TRUE(got.tensors[p] == expected.tensors[p]) << "trial " << trial << " micro-batch " << j << " tensor " << p;
        ++compared;
      });
    };
    const auto groups = [](std::size_t n) { return one_group_per_sequence(n); };
    if (spec.kind == models::ModelKind::mlp) {
      check(lay_out_mlp(spec, first.params, all, group, 3),
            [&](const auto& seqs) { return lay_out_mlp(spec, first.params, seqs, groups(seqs.size()), 3); },
            [&](const ExactMlpBatch& b, std::span<const Int128> sums) { return to_mlp_gradient(spec, b, sums, c); });
    } else if (spec.kind == models::ModelKind::tied_embedding) {
      check(lay_out_tied(spec, first.params, all, group, 3),
            [&](const auto& seqs) { return lay_out_tied(spec, first.params, seqs, groups(seqs.size()), 3); },
            [&](const ExactTiedBatch& b, std::span<const Int128> sums) { return to_tied_gradient(spec, b, sums, c); });
    } else {
      check(lay_out(spec, first.params, all, group, 3),
            [&](const auto& seqs) { return lay_out(spec, first.params, seqs, groups(seqs.size()), 3); },
            [&](const ExactLinearBatch& b, std::span<const Int128> sums) { return to_gradient(spec, b, sums, c); });
    }
  }
  EXPECT_EQ(compared, 240);
  const auto window = random_window(rng, 1).front();
  EXPECT_THROW(run_host_pipeline(window, {TokenRange{0, window.token_count() + 1}}, draw_schedule(1, 1, true),
                                 [](std::size_t, const Int128*) {}),
               std::invalid_argument);
}

TEST(OffloadEngine, the_host_twin_is_clean_under_every_property_and_runs_most_linear_trials) {
  const fuzz::CampaignReport report = run_offload_campaign("cuda-offload-host-twin", 400, 20261205);
  for (const auto& p : report.pairs) {
    EXPECT_FALSE(p.finding.has_value()) << p.property << ": " << (p.finding ? p.finding->verdict.message : "");
    EXPECT_EQ(p.target_faults, 0u) << p.property << ": " << p.first_fault;
    if (p.property == "accumulated_update_equals_full_batch_update" ||
        p.property == "multi_step_trajectory_equals_full_batch_trajectory") {
      // 300 of 400 (models/clipping.h's 2^-64 coefficient puts a clipped step's parameters past the twin's 2^30 grid).
      EXPECT_GE(p.trials - p.cannot_run, 300u) << p.property << " ran on too few trials";
    }
  }
}

TEST(OffloadEngine, the_host_twin_is_clean_on_the_mlp_and_the_tied_embedding_and_its_unsynchronised_twin_is_found) {
  for (const models::ModelKind model : {models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
    const std::string kind(models::to_string(model));
    const fuzz::CampaignReport clean = run_offload_campaign("cuda-offload-host-twin", 300, 5, model);
    for (const auto& p : clean.pairs) {
      EXPECT_FALSE(p.finding.has_value()) << kind << " " << p.property << ": " << (p.finding ? p.finding->verdict.message : "");
      if (p.property == "accumulated_update_equals_full_batch_update") {
        EXPECT_GT(p.trials - p.cannot_run, 150u) << "property 1 ran on too few " << kind << " trials";
      }
    }
    const fuzz::CampaignReport found = run_offload_campaign("cuda-offload-host-twin-nosync", 300, 5, model);
    bool any = false;
    for (const auto& p : found.pairs) any = any || p.finding.has_value();
    EXPECT_TRUE(any) << kind;
  }
}

TEST(OffloadEngine, the_unsynchronised_host_twin_is_found_and_shrunk) {
  const fuzz::CampaignReport report = run_offload_campaign("cuda-offload-host-twin-nosync", 400, 20261205);
  const fuzz::PairResult* p1 = nullptr;
  for (const auto& p : report.pairs)
    if (p.property == "accumulated_update_equals_full_batch_update") p1 = &p;
  ASSERT_NE(p1, nullptr);
  ASSERT_TRUE(p1->finding.has_value());
  // A stale read needs a window of at least one delayed micro-batch: the shrunk scenario keeps one.
  EXPECT_GE(p1->finding->scenario.steps.at(0).micro_batches.size(), 1u);
}

TEST(OffloadEngine, the_schedule_comes_from_the_scenario_seed) {
  register_offload_engines();
  const auto target = sim::make_target("cuda-offload-host-twin");
  fuzz::GeneratorOptions options;
  options.model = models::ModelKind::linear;
  sim::Scenario s = fuzz::generate_scenario(9, options);
  s.engine.accumulation_steps = 4;
  s.steps.resize(1);
  s.steps[0].micro_batches.resize(4, s.steps[0].micro_batches.front());
  const auto digest = [&](std::uint64_t seed) {
    s.schedule_seed = seed;
    return target->run(s, sim::RunOptions{.scalar = sim::ScalarKind::rational}).trace_digest;
  };
  // The same seed gives the same schedule (its stream choice and delays are in the trace); other seeds others.
  EXPECT_EQ(digest(1), digest(1));
  int differ = 0;
  for (std::uint64_t seed = 2; seed < 10; ++seed) differ += digest(seed) != digest(1);
  EXPECT_GE(differ, 6);
}

TEST(OffloadEngine, refuses_float_arithmetic_and_says_why) {
  register_offload_engines();
  const auto target = sim::make_target("cuda-offload-host-twin");
  sim::Scenario s = fuzz::generate_scenario(5, fuzz::GeneratorOptions{.model = models::ModelKind::linear});
  EXPECT_THROW(target->run(s, sim::RunOptions{.scalar = sim::ScalarKind::fp32}), std::invalid_argument);
  s.engine.precision = sim::Precision::bf16;
  EXPECT_NE(target->unsupported(s).find("no 16-bit storage"), std::string::npos);
}

TEST(OffloadEngine, the_device_variants_say_they_cannot_run_without_a_device) {
  register_offload_engines();
  std::string why;
  if (device_available(&why)) GTEST_SKIP() << "a CUDA device is present: offload_engine_device_test runs them";
  const sim::Scenario s = fuzz::generate_scenario(5, fuzz::GeneratorOptions{.model = models::ModelKind::linear});
  for (const char* name : {"cuda-offload", "cuda-offload-nosync"})
    EXPECT_NE(sim::make_target(name)->unsupported(s).find("no CUDA device ("), std::string::npos) << name;
  const fuzz::CampaignReport report = run_offload_campaign("cuda-offload", 20, 1);
  for (const auto& p : report.pairs) {
    EXPECT_EQ(p.cannot_run, p.trials) << p.property;  // never a pass
    EXPECT_FALSE(p.finding.has_value());
  }
}

}  // namespace
}  // namespace accumcheck::cuda
