// fuzz/trial_runs.h: a deterministic target runs the trial's scenario once per target and options, every caller
// gets the same result or the same exception; anything else (another scenario object, a target that is not
// deterministic) runs every time.
#include <atomic>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "fuzz/generator.h"
#include "fuzz/trial_runs.h"
#include "properties/transforms.h"
#include "sim/deepspeed_zero.h"

namespace accumcheck::fuzz {
namespace {

// The reference target, counting its runs; deterministic or not, and raising on demand.
class Counting final : public sim::Target {
 public:
  explicit Counting(bool deterministic, bool raises = false)
      : inner_(sim::make_target("reference")), deterministic_(deterministic), raises_(raises) {}
  std::string name() const override { return "counting"; }
  std::string description() const override { return "the reference target, counting its runs"; }
  std::string unsupported(const sim::Scenario& s) const override { return inner_->unsupported(s); }
  sim::RunResult run(const sim::Scenario& s, const sim::RunOptions& o) const override {
    runs += 1;
    if (raises_) throw sim::EngineCrash("raised on run " + std::to_string(runs.load()));
    return inner_->run(s, o);
  }
  bool deterministic() const override { return deterministic_; }
  mutable std::atomic<int> runs = 0;

 private:
  std::unique_ptr<sim::Target> inner_;
  bool deterministic_, raises_;
};

sim::Scenario trial_scenario() { return generate_scenario(7, GeneratorOptions{}); }

// One trial: its scenario, a counting target and the target with the trial's runs shared.
struct Trial {
  explicit Trial(bool deterministic, bool raises = false) : target(deterministic, raises) {}
  const sim::Scenario scenario = trial_scenario();
  const Counting target;
  TrialRuns runs{scenario};
  const SharedRunsTarget shared{target, runs};
};

void expect_same(const sim::RunResult& a, const sim::RunResult& b) {
  EXPECT_EQ(a.trace_digest, b.trace_digest);
  EXPECT_EQ(a.trace_event_count, b.trace_event_count);
  ASSERT_EQ(a.parameters.tensors.size(), b.parameters.tensors.size());
  for (std::size_t i = 0; i < a.parameters.tensors.size(); ++i) EXPECT_TRUE(a.parameters.tensors[i] == b.parameters.tensors[i]);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm);
}

TEST(TrialRuns, a_deterministic_target_runs_the_trials_scenario_once_per_options) {
  Trial trial(true);
  const auto& [s, target, runs, shared] = std::tie(trial.scenario, trial.target, trial.runs, trial.shared);
  const sim::RunResult direct = sim::make_target("reference")->run(s, {});
  for (int i = 0; i < 3; ++i) expect_same(shared.run(s, {}), direct);
  EXPECT_EQ(target.runs, 1);
  shared.run(s, sim::RunOptions{.scalar = sim::ScalarKind::rational});
  shared.run(s, sim::RunOptions{.keep_trace_lines = true});
  EXPECT_EQ(target.runs, 3);
  EXPECT_EQ(runs.counts().shared, 2u);
  EXPECT_EQ(runs.counts().computed, 3u);
}

// Every property of a trial is handed the one stored result, not a copy; another scenario gets its own.
TEST(TrialRuns, a_shared_run_is_handed_on_without_a_copy) {
  Trial trial(true);
  const auto first = trial.shared.run_shared(trial.scenario, {});
  const auto again = trial.shared.run_shared(trial.scenario, sim::RunOptions{.applied_gradients_only = true});
  EXPECT_EQ(first.get(), again.get());
  const sim::Scenario copy = trial.scenario;
  EXPECT_NE(trial.shared.run_shared(copy, {}).get(), first.get());
  EXPECT_EQ(trial.target.runs, 2);
}

TEST(TrialRuns, another_scenario_object_runs_every_time_even_when_equal) {
  Trial trial(true);
  const auto& [s, target, runs, shared] = std::tie(trial.scenario, trial.target, trial.runs, trial.shared);
  const sim::Scenario copy = s;
  shared.run(copy, {});
  shared.run(copy, {});
  EXPECT_EQ(target.runs, 2);
  EXPECT_EQ(runs.counts().shared, 0u);
}

TEST(TrialRuns, a_target_that_is_not_deterministic_runs_every_time) {
  Trial trial(false);
  const auto& [s, target, runs, shared] = std::tie(trial.scenario, trial.target, trial.runs, trial.shared);
  EXPECT_FALSE(shared.deterministic());
  for (int i = 0; i < 3; ++i) shared.run(s, {});
  EXPECT_EQ(target.runs, 3);
}

TEST(TrialRuns, a_run_that_raises_raises_the_same_for_every_caller) {
  Trial trial(true, /*raises=*/true);
  const auto& [s, target, runs, shared] = std::tie(trial.scenario, trial.target, trial.runs, trial.shared);
  for (int i = 0; i < 3; ++i) {
    try {
      shared.run(s, {});
      ADD_FAILURE() << "no exception";
    } catch (const sim::EngineCrash& e) {
      EXPECT_STREQ(e.what(), "raised on run 1");
    }
  }
  EXPECT_EQ(target.runs, 1);
}

TEST(TrialRuns, callers_on_several_threads_get_one_result) {
  Trial trial(true);
  const auto& [s, target, runs, shared] = std::tie(trial.scenario, trial.target, trial.runs, trial.shared);
  const sim::RunResult direct = sim::make_target("reference")->run(s, {});
  std::vector<sim::RunResult> results(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) threads.emplace_back([&, i] { results[i] = shared.run(s, {}); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) expect_same(r, direct);
  // Callers that missed together each ran it; every later caller shared.
  EXPECT_GE(target.runs, 1);
  EXPECT_EQ(runs.counts().computed + runs.counts().shared, results.size());
  EXPECT_EQ(runs.counts().computed, static_cast<std::size_t>(target.runs.load()));
}

// A run for the applied gradients alone (property 1's) may skip the last window's update: every step it
// reports is the whole run's, with the same schedule (trace), and it carries no parameters or state to misread.
// Where it leaves the last norm untaken (the reference engine, no clipping) it says so instead of reporting one.
TEST(TrialRuns, a_gradients_only_run_reports_the_steps_of_the_whole_run) {
  int compared = 0, norms_untaken = 0;
  for (const char* name : {"reference", "deepspeed@0.16.0", "openrlhf@0.10.2+reference"}) {
    const auto target = sim::make_target(name);
    for (std::uint64_t seed = 0; seed < 150; ++seed) {
      const sim::Scenario s = generate_scenario(seed, GeneratorOptions{});
      if (!target->unsupported(s).empty()) continue;
      std::optional<sim::RunResult> whole;
      try {
        whole = target->run(s, {});
      } catch (const std::exception&) {
        continue;  // an engine crash or the exact size limit: nothing to compare
      }
      const sim::RunResult part = target->run(s, sim::RunOptions{.applied_gradients_only = true});
      ASSERT_EQ(part.steps.size(), whole->steps.size()) << name << " seed " << seed;
      for (std::size_t i = 0; i < part.steps.size(); ++i) {
        EXPECT_EQ(part.steps[i].applied, whole->steps[i].applied) << name << " seed " << seed << " step " << i;
        EXPECT_TRUE(part.steps[i].gradient == whole->steps[i].gradient) << name << " seed " << seed << " step " << i;
        if (part.reported.grad_norm) {
          EXPECT_EQ(part.steps[i].grad_norm, whole->steps[i].grad_norm) << name << " seed " << seed << " step " << i;
        }
        EXPECT_EQ(part.steps[i].clip_coefficient, whole->steps[i].clip_coefficient) << name << " seed " << seed;
      }
      EXPECT_EQ(part.trace_digest, whole->trace_digest) << name << " seed " << seed;
      EXPECT_TRUE(part.parameters.tensors.empty()) << name << " seed " << seed;
      EXPECT_TRUE(part.optimizer_state.first_moment.empty()) << name << " seed " << seed;
      EXPECT_TRUE(whole->reported.grad_norm) << name << " seed " << seed;
      // Untaken only by the reference engine, and only where the last window applied a step without clipping.
      const bool untaken_expected = std::string_view(name).ends_with("reference") && !s.training.max_grad_norm &&
                                    part.steps.back().applied;
      EXPECT_EQ(part.reported.grad_norm, !untaken_expected) << name << " seed " << seed;
      norms_untaken += !part.reported.grad_norm;
      compared += 1;
    }
  }
  EXPECT_GT(compared, 200);
  EXPECT_GT(norms_untaken, 50);
}

TEST(TrialRuns, a_shared_run_is_a_whole_run_whoever_asks) {
  Trial trial(true);
  const sim::RunResult part = trial.shared.run(trial.scenario, sim::RunOptions{.applied_gradients_only = true});
  const sim::RunResult whole = trial.shared.run(trial.scenario, {});
  EXPECT_EQ(trial.target.runs, 1);
  EXPECT_FALSE(part.parameters.tensors.empty());
  expect_same(part, whole);
}

// Every run of a trial, the trial's own and its variants', hands its exact backward calls and element updates on
// (sim/exact_memos.h):
// a variant that changes only how the engine accumulates (offload toggled, micro-batches rotated) reuses them, and
// every result is the one a run without the memo gives, step by step and in the whole trace.
TEST(TrialRuns, a_variants_backward_reuses_the_trials_and_gives_the_same_result) {
  std::uint64_t hits = 0, update_hits = 0, compared = 0;
  for (const char* name : {"reference", "deepspeed@0.16.0"}) {
    const auto target = sim::make_target(name);
    for (std::uint64_t seed = 0; seed < 60; ++seed) {
      const sim::Scenario s = generate_scenario(seed, GeneratorOptions{});
      if (!target->unsupported(s).empty()) continue;
      sim::Scenario offload = s;
      offload.engine.offload = !offload.engine.offload;
      std::vector<sim::Scenario> variants{offload};
      if (s.steps.front().micro_batches.size() > 1) variants.push_back(properties::rotate_micro_batches(s));
      TrialRuns runs(s);
      const SharedRunsTarget shared(*target, runs);
      std::vector<const sim::Scenario*> order{&s};
      for (const auto& v : variants) order.push_back(&v);
      for (const sim::Scenario* scenario : order) {
        if (!target->unsupported(*scenario).empty()) continue;
        std::optional<sim::RunResult> without;
        try {
          without = target->run(*scenario, {});
        } catch (const std::exception&) {
          continue;  // an engine crash or the exact size limit: nothing to compare
        }
        const sim::RunResult with = shared.run(*scenario, {});
        expect_same(with, *without);
        ASSERT_EQ(with.steps.size(), without->steps.size());
        for (std::size_t i = 0; i < with.steps.size(); ++i)
          EXPECT_TRUE(with.steps[i].gradient == without->steps[i].gradient) << name << " seed " << seed << " step " << i;
        compared += 1;
      }
      hits += runs.backward_counts().hits;
      update_hits += runs.update_counts().hits;
    }
  }
  EXPECT_GT(compared, 200u);
  EXPECT_GT(hits, 200u);
  EXPECT_GT(update_hits, 200u);
}

TEST(TrialRuns, simulated_targets_are_deterministic_and_forward_their_answers) {
  const auto reference = sim::make_target("reference");
  EXPECT_TRUE(reference->deterministic());
  const sim::Scenario s = trial_scenario();
  TrialRuns runs(s);
  const SharedRunsTarget shared(*reference, runs);
  EXPECT_EQ(shared.name(), reference->name());
  EXPECT_EQ(shared.unsupported(s), reference->unsupported(s));
  EXPECT_EQ(shared.behavioural_model(), reference->behavioural_model());
  EXPECT_TRUE(shared.deterministic());
}

}  // namespace
}  // namespace accumcheck::fuzz
