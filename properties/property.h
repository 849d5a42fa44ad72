// Property: a named metamorphic relation over targets, and its verdict.
//
// A property runs a target on a scenario (and on transformed scenarios, or asks the oracle) and relates the
// results. With exact scalars the relation is equality; a property never compares exact values with a
// tolerance. A property that cannot run on a scenario or target (an unsupported configuration, a float
// scalar where it needs exact values, a scenario without the feature it transforms) says so with
// Outcome::cannot_run and the reason, never a silent pass. A target that raises where its upstream raises
// (sim::EngineCrash) fails the property with the crash as its message.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/rational.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::properties {

class TrialOracle;

// target_fault: the target misbehaved instead of answering (an external adapter that crashed, hung or broke
// the protocol, sim::TargetFault): neither a pass nor a failure of the property.
enum class Outcome { pass, fail, cannot_run, target_fault };
std::string_view to_string(Outcome outcome);

// One place where two results differ: what (a path such as "step 0 / gradient / weight[0,0]"), the expected
// exact value and the actual one.
struct Mismatch {
  std::string where;
  models::Rational expected;
  models::Rational actual;
  // For float targets, the derived rounding bound that |actual - expected| exceeds (properties/rounding_bounds.h);
  // 0 for exact comparisons.
  models::Rational tolerance = models::Rational(0);
};

// For float targets: the largest difference that stayed within its rounding bound, reported apart from any
// defect (a correct float target has some; zero means every value matched exactly).
struct RoundingGap {
  models::Rational gap = models::Rational(0);
  models::Rational bound = models::Rational(0);
  std::string where;
  void add(const std::string& at, const models::Rational& g, const models::Rational& b) {
    if (g > gap) {
      gap = g;
      bound = b;
      where = at;
    }
  }
};

// Membership analysis (property 5): for each optimizer step, how many times each micro-batch's gradient was
// applied. Micro-batches are named (step, micro-batch, rank).
struct MicroBatchId {
  int step = 0, micro_batch = 0, rank = 0;
  friend bool operator==(const MicroBatchId&, const MicroBatchId&) = default;
};
struct MembershipEntry {
  int applied_in_step = 0;  // the optimizer step whose applied gradient was decoded
  MicroBatchId micro_batch;
  models::Rational multiplicity;  // 1 expected for its own step, 0 for other steps
};
struct MembershipReport {
  std::vector<MembershipEntry> wrong;  // every entry whose multiplicity is not the expected one
  std::string summary;                 // "step 0: micro-batch 1 (rank 0) dropped"
};

struct Verdict {
  Outcome outcome = Outcome::pass;
  std::string message;                  // one line: why it failed or could not run
  std::vector<Mismatch> mismatches;     // the first differences, most telling first
  std::optional<MembershipReport> membership;
  RoundingGap rounding;  // float targets only

  static Verdict pass() { return {}; }
  static Verdict cannot_run(std::string why) { return {Outcome::cannot_run, std::move(why), {}, std::nullopt, {}}; }
  static Verdict target_fault(std::string why) { return {Outcome::target_fault, std::move(why), {}, std::nullopt, {}}; }
  static Verdict fail(std::string why, std::vector<Mismatch> mismatches = {}) {
    return {Outcome::fail, std::move(why), std::move(mismatches), std::nullopt, {}};
  }
};

class Property {
 public:
  virtual ~Property() = default;
  virtual std::string_view name() const = 0;         // a sentence in snake_case
  virtual std::string_view description() const = 0;  // one line for `accumcheck list properties`
  // Exact scalars compare by equality; fp32 and fp64 within the derived rounding bound (rounding_bounds.h);
  // anything else is cannot_run. A property that reads the oracle takes it from `oracle` when given (a campaign's
  // trial shares one among such properties: trial_oracle.h) and computes its own otherwise.
  virtual Verdict check(const sim::Target& target, const sim::Scenario& scenario, const sim::RunOptions& options,
                        TrialOracle* oracle = nullptr) const = 0;
  // True for a property that compares with the oracle (properties 1 and 9).
  virtual bool reads_oracle() const { return false; }
};

// The nine built-in properties, in the order of docs/fuzzing.md: a campaign's default.
const std::vector<std::unique_ptr<Property>>& all_properties();

// Property 10, the differential check, which a campaign runs only when asked (--differential): the target and
// its behavioural model (Target::behavioural_model, e.g. the real DeepSpeed 0.16.4 and deepspeed@0.16.4) run the
// same scenario; with exact scalars the results must be equal, with float ones within the bound of the model's
// own computation (Target::run_bounded). A difference is a finding against the model, or a target that is not
// deterministic.
inline constexpr std::string_view kDifferentialProperty = "target_agrees_with_its_behavioural_model";
const Property& differential_property();

// Any of the ten by name; nullptr if unknown.
const Property* find_property(std::string_view name);

}  // namespace accumcheck::properties
