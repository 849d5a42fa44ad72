// One trial's full-batch truth, shared by the properties that read the oracle.
//
// Property 1 (each step's applied gradient) and property 9 (the final parameters and optimizer state) both
// compare a target's run with the oracle on the trial's scenario. The oracle is a function of the scenario and of
// the training spec the target implies (properties::oracle_training_for: its optimizer's treatment of missing
// gradients), never of the target's code: so a campaign computes it once per trial and training spec, and every
// property that asks reads the same result. What is shared and what is not:
//   - Only the trial's own scenario object, as with fuzz::TrialRuns: a scenario fitted to a target is another
//     object and is computed afresh. The campaign keeps the scenario alive and unchanged until the trial's last
//     check has returned.
//   - Per training spec (equality): two targets that step missing gradients differently get their own oracles.
//   - Always the trajectory (models::OracleScope::trajectory): every step's applied gradient (property 1's) and the
//     final parameters and state (property 9's), without the losses and pre-clip gradients no property reads. A
//     campaign makes a TrialOracle only where two or more open pairs read the oracle.
//   - An oracle that throws (the 4096-bit limit, a scenario the models reject) is kept as its exception and rethrown
//     to each property that asks.
// Thread-safe without waiting (trial_memo.h).
#pragma once

#include <memory>

#include "models/fast_rational.h"
#include "models/oracle.h"
#include "properties/trial_memo.h"
#include "sim/scenario.h"

namespace accumcheck::properties {

class TrialOracle {
 public:
  explicit TrialOracle(const sim::Scenario& scenario) : scenario_(scenario) {}

  // In FastRational, as the oracle computes it: compare_tensors reads it without converting it.
  using Result = models::OracleResult<models::FastRational>;
  // run_oracle_fast(training, scenario, trajectory), computed once per training spec for the trial's own scenario
  // object and afresh for any other scenario.
  std::shared_ptr<const Result> get(const models::TrainingSpec& training, const sim::Scenario& scenario);

  // How many answers came from a stored oracle, and how many oracles were computed: for tests.
  using Memo = TrialMemo<models::TrainingSpec, Result>;
  Memo::Counts counts() const { return memo_.counts(); }

 private:
  const sim::Scenario& scenario_;
  Memo memo_;
};

}  // namespace accumcheck::properties
