// One trial's shared runs: the trial's memo, keyed by target name and run options.
#include "fuzz/trial_runs.h"

namespace accumcheck::fuzz {

std::shared_ptr<const sim::RunResult> TrialRuns::run(const sim::Target& target, const sim::Scenario& scenario,
                                                     const sim::RunOptions& options) {
  const sim::ExactMemoScope exact_scope(&exact_);
  if (&scenario != &scenario_ || !target.deterministic()) {
    memo_.count_unshared();
    return target.run_shared(scenario, options);
  }
  return memo_.get(Key{target.name(), options}, [&] { return target.run(scenario, options); });
}

}  // namespace accumcheck::fuzz
