// Exact comparison of run results against the oracle or against each other, naming the first differences.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/fast_rational.h"
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
// a narrower OracleScope, only what that scope fills (models/oracle.h). run_oracle_fast leaves it in FastRational,
// which compare_tensors reads as it is (the properties' oracle, properties/trial_oracle.h); run_oracle_exact
// converts it into Rational.
models::OracleResult<models::FastRational> run_oracle_fast(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                           models::OracleScope scope = models::OracleScope::everything);
models::OracleResult<models::Rational> run_oracle_exact(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                        models::OracleScope scope = models::OracleScope::everything);

// Where in a result two values are compared: "final / parameters", or "step 2 / gradient" for Where(2, "gradient").
// Its name is written only where the values differ, so that a comparison that finds nothing builds no string (in
// a passing campaign, every comparison). A parameter only: it may view a caller's temporary string.
class Where {
 public:
  Where(const char* name) : tail_(name) {}          // NOLINT(google-explicit-constructor): a place is named by text
  Where(const std::string& name) : tail_(name) {}   // NOLINT(google-explicit-constructor)
  Where(std::size_t step, std::string_view what) : step_(step), tail_(what) {}
  std::string str() const;

 private:
  std::optional<std::size_t> step_;
  std::string_view tail_;
};

// Appends a mismatch for every element where a and b differ by more than the tolerance (absent gradients count
// as zeros; no tolerance means equality), at most kMismatchesKept in total. Differences within the tolerance go
// to `gap` when given.
void compare_tensors(const Where& where, const models::ModelSpec& spec,
                     const std::vector<models::Matrix<models::Rational>>& expected,
                     const std::vector<models::Matrix<models::Rational>>& actual, std::vector<Mismatch>& out,
                     const std::vector<models::Matrix<models::Rational>>* tolerance = nullptr, RoundingGap* gap = nullptr);
// The same with the oracle's values as run_oracle_fast leaves them: neither side is converted, except an expected
// value that differs, for its mismatch.
void compare_tensors(const Where& where, const models::ModelSpec& spec,
                     const std::vector<models::Matrix<models::FastRational>>& expected,
                     const std::vector<models::Matrix<models::Rational>>& actual, std::vector<Mismatch>& out,
                     const std::vector<models::Matrix<models::Rational>>* tolerance = nullptr, RoundingGap* gap = nullptr);
void compare_value(const Where& where, const models::Rational& expected, const models::Rational& actual,
                   std::vector<Mismatch>& out, const models::Rational& tolerance = models::Rational(0),
                   RoundingGap* gap = nullptr);

// Two runs of one target on equivalent scenarios: per-step applied gradients and the final parameters and
// optimizer moments; parts a run does not report (sim::ResultCoverage) are skipped. With bounds, each value
// may differ by the sum of the two runs' rounding bounds.
std::vector<Mismatch> compare_runs(const models::ModelSpec& spec, const sim::RunResult& expected, const sim::RunResult& actual,
                                   const RunBounds* expected_bounds = nullptr, const RunBounds* actual_bounds = nullptr,
                                   RoundingGap* gap = nullptr);

}  // namespace accumcheck::properties
