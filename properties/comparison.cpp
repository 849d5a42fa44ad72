// Exact comparisons with named mismatches.
#include "properties/comparison.h"

#include <span>

#include "models/fast_rational.h"
#include "sim/convert.h"
#include "sim/sequence_pool.h"

namespace accumcheck::properties {

models::TrainingSpec oracle_training_for(const sim::Target& target, const sim::Scenario& scenario) {
  models::TrainingSpec training = scenario.training;
  training.optimizer.missing_gradient_is_zero = target.optimizer_steps_missing_gradients_as_zero();
  return training;
}

models::OracleResult<models::FastRational> run_oracle_fast(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                           models::OracleScope scope) {
  using models::FastRational;
  // The batches in storage this thread's earlier runs gave back, and given back at the end (sim/sequence_pool.h).
  sim::SequencePool<FastRational>& pool = sim::SequencePool<FastRational>::local();
  std::vector<models::StepBatch<FastRational>> batches =
      sim::oracle_batches<FastRational>(scenario, [&](const models::Sequence<models::Rational>& seq) { return pool.convert(seq); });
  const sim::GiveBackOnExit<FastRational, decltype(batches)> give_back(pool, batches);
  return models::run_oracle(training, sim::to_scalar<FastRational>(scenario.initial_parameters),
                            std::span<const models::StepBatch<FastRational>>(batches), scope);
}

models::OracleResult<models::Rational> run_oracle_exact(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                        models::OracleScope scope) {
  const auto fast = run_oracle_fast(training, scenario, scope);
  models::OracleResult<models::Rational> out{{}, sim::to_exact(fast.parameters), sim::to_exact(fast.state)};
  out.steps.reserve(fast.steps.size());
  for (const auto& step : fast.steps)
    out.steps.push_back({models::to_rational(step.loss), sim::to_exact(step.gradient), models::to_rational(step.grad_norm),
                         models::to_rational(step.clip_coefficient), sim::to_exact(step.applied_gradient)});
  return out;
}

std::string Where::str() const {
  if (!step_) return std::string(tail_);
  std::string name = "step " + std::to_string(*step_) + " / ";
  name += tail_;
  return name;
}

void compare_value(const Where& where, const models::Rational& expected, const models::Rational& actual,
                   std::vector<Mismatch>& out, const models::Rational& tolerance, RoundingGap* gap) {
  if (expected == actual) return;
  const models::Rational diff = models::abs(actual - expected);
  if (diff <= tolerance) {
    if (gap) gap->add(where.str(), diff, tolerance);
    return;
  }
  if (out.size() < kMismatchesKept) out.push_back({where.str(), expected, actual, tolerance});
}

namespace {

using Tensors = std::vector<models::Matrix<models::Rational>>;
using FastTensors = std::vector<models::Matrix<models::FastRational>>;

template <class A, class B>
bool same_shapes(const std::vector<models::Matrix<A>>& a, const std::vector<models::Matrix<B>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t p = 0; p < a.size(); ++p)
    if (a[p].rows() != b[p].rows() || a[p].cols() != b[p].cols()) return false;
  return true;
}

// An expected value (a result's, or the oracle's in FastRational) against an actual one, neither converted.
bool same_value(const models::Rational& expected, const models::Rational& actual) { return expected == actual; }
bool same_value(const models::FastRational& expected, const models::Rational& actual) { return expected.equals(actual); }
const models::Rational& as_rational(const models::Rational& value) { return value; }
models::Rational as_rational(const models::FastRational& value) { return value.to_rational(); }

// compare_tensors with the tolerance of element (p, r, c) from `tolerance(p, r, c)`, asked only where the two
// differ: an exact run differs nowhere, so it never builds one. The expected values are converted to Rational
// only where they differ, too.
template <class Expected, class Tolerance>
void compare_each(const Where& where, const models::ModelSpec& spec, const std::vector<models::Matrix<Expected>>& expected,
                  const Tensors& actual, std::vector<Mismatch>& out, const Tolerance& tolerance, RoundingGap* gap) {
  ACCUMCHECK_ASSERT(same_shapes(expected, actual));
  std::vector<std::string> names;  // built at the first difference: most comparisons find none
  for (std::size_t p = 0; p < expected.size(); ++p)
    for (Eigen::Index c = 0; c < expected[p].cols(); ++c)
      for (Eigen::Index r = 0; r < expected[p].rows(); ++r) {
        if (same_value(expected[p](r, c), actual[p](r, c))) continue;
        if (names.empty()) {
          names = models::parameter_names(spec);
          ACCUMCHECK_ASSERT(names.size() == expected.size());
        }
        compare_value(where.str() + " / " + names[p] + "[" + std::to_string(r) + "," + std::to_string(c) + "]",
                      as_rational(expected[p](r, c)), actual[p](r, c), out, tolerance(p, r, c), gap);
      }
}

// Within the sum of two runs' bounds (both or neither given), summed element by element where the runs differ.
void compare_within_sum(const Where& where, const models::ModelSpec& spec, const Tensors& expected,
                        const Tensors& actual, std::vector<Mismatch>& out, const Tensors* a, const Tensors* b,
                        RoundingGap* gap) {
  ACCUMCHECK_ASSERT((a == nullptr) == (b == nullptr));
  ACCUMCHECK_ASSERT(!a || (same_shapes(*a, expected) && same_shapes(*b, expected)));
  compare_each(where, spec, expected, actual, out, [&](std::size_t p, Eigen::Index r, Eigen::Index c) {
    return a ? models::Rational((*a)[p](r, c) + (*b)[p](r, c)) : models::Rational(0);
  }, gap);
}

// compare_tensors, for either type of expected values.
template <class Expected>
void compare_to_tolerance(const Where& where, const models::ModelSpec& spec, const std::vector<models::Matrix<Expected>>& expected,
                          const Tensors& actual, std::vector<Mismatch>& out, const Tensors* tolerance, RoundingGap* gap) {
  ACCUMCHECK_ASSERT(!tolerance || same_shapes(*tolerance, expected));
  compare_each(where, spec, expected, actual, out, [&](std::size_t p, Eigen::Index r, Eigen::Index c) {
    return tolerance ? (*tolerance)[p](r, c) : models::Rational(0);
  }, gap);
}

}  // namespace

void compare_tensors(const Where& where, const models::ModelSpec& spec, const Tensors& expected, const Tensors& actual,
                     std::vector<Mismatch>& out, const Tensors* tolerance, RoundingGap* gap) {
  compare_to_tolerance(where, spec, expected, actual, out, tolerance, gap);
}

void compare_tensors(const Where& where, const models::ModelSpec& spec, const FastTensors& expected, const Tensors& actual,
                     std::vector<Mismatch>& out, const Tensors* tolerance, RoundingGap* gap) {
  compare_to_tolerance(where, spec, expected, actual, out, tolerance, gap);
}

std::vector<Mismatch> compare_runs(const models::ModelSpec& spec, const sim::RunResult& expected, const sim::RunResult& actual,
                                   const RunBounds* eb, const RunBounds* ab, RoundingGap* gap) {
  ACCUMCHECK_ASSERT((eb == nullptr) == (ab == nullptr));
  std::vector<Mismatch> out;
  const bool gradients = expected.reported.applied_gradient && actual.reported.applied_gradient;
  const bool norms = expected.reported.grad_norm && actual.reported.grad_norm;
  const bool state = expected.reported.optimizer_state && actual.reported.optimizer_state;
  for (std::size_t s = 0; s < std::min(expected.steps.size(), actual.steps.size()); ++s) {
    if (expected.steps[s].applied != actual.steps[s].applied && out.size() < kMismatchesKept)
      out.push_back({Where(s, "applied").str(), models::Rational(expected.steps[s].applied ? 1 : 0),
                     models::Rational(actual.steps[s].applied ? 1 : 0)});
    if (gradients) {
      compare_within_sum(Where(s, "gradient"), spec, expected.steps[s].gradient.tensors, actual.steps[s].gradient.tensors,
                         out, eb ? &eb->step_gradient[s] : nullptr, ab ? &ab->step_gradient[s] : nullptr, gap);
    }
    if (norms)
      compare_value(Where(s, "grad_norm"), expected.steps[s].grad_norm, actual.steps[s].grad_norm, out,
                    eb ? eb->step_grad_norm[s] + ab->step_grad_norm[s] : models::Rational(0), gap);
  }
  compare_within_sum("final / parameters", spec, expected.parameters.tensors, actual.parameters.tensors, out,
                     eb ? &eb->parameters : nullptr, ab ? &ab->parameters : nullptr, gap);
  if (state) {
    compare_within_sum("final / first_moment", spec, expected.optimizer_state.first_moment, actual.optimizer_state.first_moment,
                       out, eb ? &eb->first_moment : nullptr, ab ? &ab->first_moment : nullptr, gap);
    compare_within_sum("final / second_moment", spec, expected.optimizer_state.second_moment,
                       actual.optimizer_state.second_moment, out, eb ? &eb->second_moment : nullptr,
                       ab ? &ab->second_moment : nullptr, gap);
  }
  return out;
}

}  // namespace accumcheck::properties
