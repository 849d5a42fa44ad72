// One trial's runs of its scenario, shared among the properties checked on it.
//
// Six of the nine properties start by running the target on the trial's scenario as generated (property 1, the
// split, offload, order, norm and trajectory properties), and the behavioural-model property runs it once more.
// A deterministic target (sim::Target::deterministic) gives the same result every time, so a campaign runs it once
// per trial and hands the one result to each property: the properties relate the same results as before, for a fraction
// of the work. What is shared and what is not:
//   - Only the trial's own scenario object. A property's variant (micro-batches rotated, offload toggled, a
//     scenario fitted to the target) is another object and runs as before. Identity is sound here: the campaign
//     keeps the scenario alive and unchanged until every check of the trial has returned.
//   - Only a deterministic target's runs: an external program or a device is sampled afresh by every property.
//   - Per target name and run options: the same target name is the same target (sim::make_target).
//   - A run that throws is kept as its exception and rethrown to each property that asks, so that every property
//     sees the same crash, refusal or size limit.
//   - Below whole runs, every run of the trial (shared or a variant) hands its exact backward calls and optimizer
//     updates on through one sim::ExactMemos, which answers only from a stored call with equal inputs, compared in
//     full.
// Thread-safe without waiting (properties/trial_memo.h).
#pragma once

#include <string>

#include "properties/trial_memo.h"
#include "sim/exact_memos.h"
#include "sim/target.h"

namespace accumcheck::fuzz {

class TrialRuns {
 public:
  explicit TrialRuns(const sim::Scenario& scenario) : scenario_(scenario) {}

  // target.run(scenario, options), run at most once per trial for the trial's scenario and a deterministic target;
  // anything else is run every time.
  std::shared_ptr<const sim::RunResult> run(const sim::Target& target, const sim::Scenario& scenario,
                                            const sim::RunOptions& options);

  // A run is stored per target name and run options.
  struct Key {
    std::string target;
    sim::RunOptions options;
    friend bool operator==(const Key&, const Key&) = default;
  };
  using Memo = properties::TrialMemo<Key, sim::RunResult>;
  // How many runs were answered from a stored one, and how many were run: for tests and the bench.
  Memo::Counts counts() const { return memo_.counts(); }
  // How many of the runs' exact backward calls and element updates were answered from an equal one.
  sim::BackwardMemo::Counts backward_counts() const { return exact_.backward.counts(); }
  sim::UpdateMemo::Counts update_counts() const { return exact_.update.counts(); }

 private:
  const sim::Scenario& scenario_;
  Memo memo_;
  // Every run this trial makes, shared or not, hands its exact backward calls and updates on through these memos: a
  // property's variant gives most of them the same inputs as the trial's own run.
  sim::ExactMemos exact_;
};

// `target`, with its runs of the trial's scenario shared through `runs`; every other question forwarded.
class SharedRunsTarget final : public sim::Target {
 public:
  SharedRunsTarget(const sim::Target& target, TrialRuns& runs) : target_(target), runs_(runs) {}
  std::string name() const override { return target_.name(); }
  std::string description() const override { return target_.description(); }
  std::string unsupported(const sim::Scenario& scenario) const override { return target_.unsupported(scenario); }
  bool optimizer_steps_missing_gradients_as_zero() const override { return target_.optimizer_steps_missing_gradients_as_zero(); }
  sim::Scenario as_run(const sim::Scenario& scenario) const override { return target_.as_run(scenario); }
  std::optional<sim::ScalarKind> fixed_scalar() const override { return target_.fixed_scalar(); }
  // A shared run serves every property, so it is a whole run: a property that reads only the applied gradients
  // gets one too, and shares it.
  sim::RunResult run(const sim::Scenario& scenario, const sim::RunOptions& options) const override {
    return *run_shared(scenario, options);
  }
  std::shared_ptr<const sim::RunResult> run_shared(const sim::Scenario& scenario, const sim::RunOptions& options) const override {
    sim::RunOptions whole = options;
    whole.applied_gradients_only = false;
    return runs_.run(target_, scenario, whole);
  }
  std::optional<sim::BoundedRunResult> run_bounded(const sim::Scenario& scenario, sim::ScalarKind format) const override {
    return target_.run_bounded(scenario, format);
  }
  std::optional<std::string> behavioural_model() const override { return target_.behavioural_model(); }
  bool deterministic() const override { return target_.deterministic(); }

 private:
  const sim::Target& target_;
  TrialRuns& runs_;
};

}  // namespace accumcheck::fuzz
