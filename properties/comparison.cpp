// Exact comparisons with named mismatches.
#include "properties/comparison.h"

#include <span>

#include "models/fast_rational.h"
#include "sim/convert.h"

namespace accumcheck::properties {

models::TrainingSpec oracle_training_for(const sim::Target& target, const sim::Scenario& scenario) {
  models::TrainingSpec training = scenario.training;
  training.optimizer.missing_gradient_is_zero = target.optimizer_steps_missing_gradients_as_zero();
  return training;
}

models::OracleResult<models::Rational> run_oracle_exact(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                        models::OracleScope scope) {
  using models::FastRational;
  const auto batches = sim::oracle_batches<FastRational>(
      scenario, [](const models::Sequence<models::Rational>& seq) { return sim::to_scalar<FastRational>(seq); });
  const auto fast = models::run_oracle(training, sim::to_scalar<FastRational>(scenario.initial_parameters),
                                       std::span<const models::StepBatch<FastRational>>(batches), scope);
  models::OracleResult<models::Rational> out{{}, sim::to_exact(fast.parameters), sim::to_exact(fast.state)};
  out.steps.reserve(fast.steps.size());
  for (const auto& step : fast.steps)
    out.steps.push_back({models::to_rational(step.loss), sim::to_exact(step.gradient), models::to_rational(step.grad_norm),
                         models::to_rational(step.clip_coefficient), sim::to_exact(step.applied_gradient)});
  return out;
}

void compare_value(const std::string& where, const models::Rational& expected, const models::Rational& actual,
                   std::vector<Mismatch>& out, const models::Rational& tolerance, RoundingGap* gap) {
  if (expected == actual) return;
  const models::Rational diff = models::abs(actual - expected);
  if (diff <= tolerance) {
    if (gap) gap->add(where, diff, tolerance);
    return;
  }
  if (out.size() < kMismatchesKept) out.push_back({where, expected, actual, tolerance});
}

void compare_tensors(const std::string& where, const models::ModelSpec& spec,
                     const std::vector<models::Matrix<models::Rational>>& expected,
                     const std::vector<models::Matrix<models::Rational>>& actual, std::vector<Mismatch>& out,
                     const std::vector<models::Matrix<models::Rational>>* tolerance, RoundingGap* gap) {
  ACCUMCHECK_ASSERT(expected.size() == actual.size());
  ACCUMCHECK_ASSERT(!tolerance || tolerance->size() == expected.size());
  std::vector<std::string> names;  // built at the first difference: most comparisons find none
  const models::Rational zero(0);
  for (std::size_t p = 0; p < expected.size(); ++p)
    for (Eigen::Index c = 0; c < expected[p].cols(); ++c)
      for (Eigen::Index r = 0; r < expected[p].rows(); ++r) {
        if (expected[p](r, c) == actual[p](r, c)) continue;
        if (names.empty()) {
          names = models::parameter_names(spec);
          ACCUMCHECK_ASSERT(names.size() == expected.size());
        }
        compare_value(where + " / " + names[p] + "[" + std::to_string(r) + "," + std::to_string(c) + "]",
                      expected[p](r, c), actual[p](r, c), out, tolerance ? (*tolerance)[p](r, c) : zero, gap);
      }
}

namespace {
std::vector<models::Matrix<models::Rational>> sum_bounds(const std::vector<models::Matrix<models::Rational>>& a,
                                                         const std::vector<models::Matrix<models::Rational>>& b) {
  std::vector<models::Matrix<models::Rational>> out = a;
  for (std::size_t p = 0; p < out.size(); ++p)
    for (Eigen::Index i = 0; i < out[p].size(); ++i) out[p](i) = a[p](i) + b[p](i);
  return out;
}
}  // namespace

std::vector<Mismatch> compare_runs(const models::ModelSpec& spec, const sim::RunResult& expected, const sim::RunResult& actual,
                                   const RunBounds* eb, const RunBounds* ab, RoundingGap* gap) {
  ACCUMCHECK_ASSERT((eb == nullptr) == (ab == nullptr));
  std::vector<Mismatch> out;
  const bool gradients = expected.reported.applied_gradient && actual.reported.applied_gradient;
  const bool norms = expected.reported.grad_norm && actual.reported.grad_norm;
  const bool state = expected.reported.optimizer_state && actual.reported.optimizer_state;
  for (std::size_t s = 0; s < std::min(expected.steps.size(), actual.steps.size()); ++s) {
    const std::string step = "step " + std::to_string(s);
    if (expected.steps[s].applied != actual.steps[s].applied && out.size() < kMismatchesKept)
      out.push_back({step + " / applied", models::Rational(expected.steps[s].applied ? 1 : 0),
                     models::Rational(actual.steps[s].applied ? 1 : 0)});
    if (gradients) {
      const auto tol = eb ? std::optional(sum_bounds(eb->step_gradient[s], ab->step_gradient[s])) : std::nullopt;
      compare_tensors(step + " / gradient", spec, expected.steps[s].gradient.tensors, actual.steps[s].gradient.tensors, out,
                      tol ? &*tol : nullptr, gap);
    }
    if (norms)
      compare_value(step + " / grad_norm", expected.steps[s].grad_norm, actual.steps[s].grad_norm, out,
                    eb ? eb->step_grad_norm[s] + ab->step_grad_norm[s] : models::Rational(0), gap);
  }
  const auto tol_p = eb ? std::optional(sum_bounds(eb->parameters, ab->parameters)) : std::nullopt;
  compare_tensors("final / parameters", spec, expected.parameters.tensors, actual.parameters.tensors, out, tol_p ? &*tol_p : nullptr, gap);
  if (state) {
    const auto tol_m = eb ? std::optional(sum_bounds(eb->first_moment, ab->first_moment)) : std::nullopt;
    const auto tol_v = eb ? std::optional(sum_bounds(eb->second_moment, ab->second_moment)) : std::nullopt;
    compare_tensors("final / first_moment", spec, expected.optimizer_state.first_moment, actual.optimizer_state.first_moment, out,
                    tol_m ? &*tol_m : nullptr, gap);
    compare_tensors("final / second_moment", spec, expected.optimizer_state.second_moment, actual.optimizer_state.second_moment, out,
                    tol_v ? &*tol_v : nullptr, gap);
  }
  return out;
}

}  // namespace accumcheck::properties
