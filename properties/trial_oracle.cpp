// One trial's oracles: the trial's memo, keyed by training spec.
#include "properties/trial_oracle.h"

#include "properties/comparison.h"

namespace accumcheck::properties {

std::shared_ptr<const TrialOracle::Result> TrialOracle::get(const models::TrainingSpec& training, const sim::Scenario& scenario) {
  if (&scenario != &scenario_) {
    memo_.count_unshared();
    return std::make_shared<const Result>(run_oracle_fast(training, scenario, models::OracleScope::trajectory));
  }
  return memo_.get(training, [&] { return run_oracle_fast(training, scenario, models::OracleScope::trajectory); });
}

}  // namespace accumcheck::properties
