// Exact comparison of run results against the oracle or against each other, naming the first differences.
#pragma once

#include <vector>

#include "models/oracle.h"
#include "properties/property.h"
#include "properties/rounding_bounds.h"
#include "sim/target.h"

namespace accumcheck::properties {

inline constexpr std::size_t kMismatchesKept = 8;

// The oracle's view of the scenario for this target: the target's optimizer semantics for missing gradients
// (flat-partition optimizers step them as zeros) applied to the training spec.
models::TrainingSpec oracle_training_for(const sim::Target& target, const sim::Scenario& scenario);

// The exact full-batch truth of a scenario, computed in FastRational (exact, and fast in the common case); with
// a narrower OracleScope, only what that scope fills (models/oracle.h).
models::OracleResult<models::Rational> run_oracle_exact(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                        models::OracleScope scope = models::OracleScope::everything);

// Appends a mismatch for every element where a and b differ by more than the tolerance (absent gradients count
// as zeros; no tolerance means equality), at most kMismatchesKept in total. Differences within the tolerance go
// to `gap` when given.
void compare_tensors(const std::string& where, const models::ModelSpec& spec,
                     const std::vector<models::Matrix<models::Rational>>& expected,
                     const std::vector<models::Matrix<models::Rational>>& actual, std::vector<Mismatch>& out,
                     const std::vector<models::Matrix<models::Rational>>* tolerance = nullptr, RoundingGap* gap = nullptr);
void compare_value(const std::string& where, const models::Rational& expected, const models::Rational& actual,
                   std::vector<Mismatch>& out, const models::Rational& tolerance = models::Rational(0),
                   RoundingGap* gap = nullptr);

// Two runs of one target on equivalent scenarios: per-step applied gradients and the final parameters and
// optimizer moments; parts a run does not report (sim::ResultCoverage) are skipped. With bounds, each value
// may differ by the sum of the two runs' rounding bounds.
std::vector<Mismatch> compare_runs(const models::ModelSpec& spec, const sim::RunResult& expected, const sim::RunResult& actual,
                                   const RunBounds* expected_bounds = nullptr, const RunBounds* actual_bounds = nullptr,
                                   RoundingGap* gap = nullptr);

}  // namespace accumcheck::properties
