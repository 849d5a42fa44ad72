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

models::OracleResult<models::Rational> run_oracle_exact(const models::TrainingSpec& training, const sim::Scenario& scenario) {
  using models::FastRational;
  std::vector<models::StepBatch<FastRational>> batches;
  for (const auto& batch : sim::oracle_batches(scenario)) {
    models::StepBatch<FastRational> converted;
    for (const auto& seq : batch) converted.push_back(sim::to_scalar<FastRational>(seq));
    batches.push_back(std::move(converted));
  }
  const auto fast = models::run_oracle(training, sim::to_scalar<FastRational>(scenario.initial_parameters),
                                       std::span<const models::StepBatch<FastRational>>(batches));
  models::OracleResult<models::Rational> out{{}, sim::to_exact(fast.parameters), sim::to_exact(fast.state)};
  for (const auto& step : fast.steps)
    out.steps.push_back({models::to_rational(step.loss), sim::to_exact(step.gradient), models::to_rational(step.grad_norm),
                         models::to_rational(step.clip_coefficient), sim::to_exact(step.applied_gradient)});
  return out;
}

void compare_value(const std::string& where, const models::Rational& expected, const models::Rational& actual,
                   std::vector<Mismatch>& out) {
  if (expected != actual && out.size() < kMismatchesKept) out.push_back({where, expected, actual});
}

void compare_tensors(const std::string& where, const models::ModelSpec& spec,
                     const std::vector<models::Matrix<models::Rational>>& expected,
                     const std::vector<models::Matrix<models::Rational>>& actual, std::vector<Mismatch>& out) {
  const auto names = models::parameter_names(spec);
  ACCUMCHECK_ASSERT(expected.size() == actual.size() && expected.size() == names.size());
  for (std::size_t p = 0; p < expected.size(); ++p)
    for (Eigen::Index c = 0; c < expected[p].cols(); ++c)
      for (Eigen::Index r = 0; r < expected[p].rows(); ++r)
        compare_value(where + " / " + names[p] + "[" + std::to_string(r) + "," + std::to_string(c) + "]",
                      expected[p](r, c), actual[p](r, c), out);
}

std::vector<Mismatch> compare_runs(const models::ModelSpec& spec, const sim::RunResult& expected, const sim::RunResult& actual) {
  std::vector<Mismatch> out;
  for (std::size_t s = 0; s < std::min(expected.steps.size(), actual.steps.size()); ++s) {
    const std::string step = "step " + std::to_string(s);
    if (expected.steps[s].applied != actual.steps[s].applied && out.size() < kMismatchesKept)
      out.push_back({step + " / applied", models::Rational(expected.steps[s].applied ? 1 : 0),
                     models::Rational(actual.steps[s].applied ? 1 : 0)});
    compare_tensors(step + " / gradient", spec, expected.steps[s].gradient.tensors, actual.steps[s].gradient.tensors, out);
    compare_value(step + " / grad_norm", expected.steps[s].grad_norm, actual.steps[s].grad_norm, out);
  }
  compare_tensors("final / parameters", spec, expected.parameters.tensors, actual.parameters.tensors, out);
  compare_tensors("final / first_moment", spec, expected.optimizer_state.first_moment, actual.optimizer_state.first_moment, out);
  compare_tensors("final / second_moment", spec, expected.optimizer_state.second_moment, actual.optimizer_state.second_moment, out);
  return out;
}

}  // namespace accumcheck::properties
