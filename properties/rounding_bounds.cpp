// Rounding bounds from the oracle run in models::FloatBound.
#include "properties/rounding_bounds.h"

#include <algorithm>
#include <span>

#include "models/float_bound.h"
#include "sim/convert.h"

namespace accumcheck::properties {

using models::Rational;

RunBounds RunBounds::zero(const models::ModelSpec& spec, std::size_t step_count) {
  RunBounds b;
  std::vector<models::Matrix<Rational>> zeros;
  for (const auto& [rows, cols] : models::parameter_shapes(spec)) zeros.push_back(models::Matrix<Rational>::Zero(rows, cols));
  b.step_gradient.assign(step_count, zeros);
  b.step_grad_norm.assign(step_count, Rational(0));
  b.step_clip_coefficient.assign(step_count, Rational(0));
  b.parameters = b.first_moment = b.second_moment = zeros;
  return b;
}

bool compared_within_bounds(sim::ScalarKind scalar) {
  return scalar == sim::ScalarKind::fp32 || scalar == sim::ScalarKind::fp64;
}

namespace {

// Thrown inside the conversion when a value has no bound; caught below and turned into the reason.
struct Unbounded {
  std::string where;
};

template <models::FloatFormatKind F>
Rational bound_of(const models::FloatBound<F>& x, const std::string& where) {
  auto b = models::error_bound(x);
  if (!b) throw Unbounded{where};
  return *b;
}

template <models::FloatFormatKind F>
std::vector<models::Matrix<Rational>> bounds_of(const std::vector<models::Matrix<models::FloatBound<F>>>& ts, const std::string& where) {
  std::vector<models::Matrix<Rational>> out;
  for (const auto& t : ts) {
    models::Matrix<Rational> m(t.rows(), t.cols());
    for (Eigen::Index i = 0; i < t.size(); ++i) m(i) = bound_of(t(i), where);
    out.push_back(std::move(m));
  }
  return out;
}

// torch.nn.utils.clip_grad_norm_ (and DeepSpeed's norm) take the norm of the per-tensor norms, whose
// intermediates are inexact roots even when the whole norm is exactly rational: the oracle's one root of the
// total sum of squares can be certified exact where that form rounds. The grad norm's bound is the larger of
// the two forms' bounds (a correct target may take either).
template <models::FloatFormatKind F>
models::FloatBound<F> norm_of_tensor_norms(const models::Gradient<models::FloatBound<F>>& grad) {
  using B = models::FloatBound<F>;
  B total(0);
  for (std::size_t p = 0; p < grad.size(); ++p) {
    if (!grad.present[p]) continue;
    B squares(0);
    const auto& g = grad.tensors[p];
    for (Eigen::Index i = 0; i < g.size(); ++i) squares += g(i) * g(i);
    const B norm = models::ScalarTraits<B>::sqrt(squares);
    total += norm * norm;
  }
  return models::ScalarTraits<B>::sqrt(total);
}

template <models::FloatFormatKind F>
std::variant<RunBounds, std::string> bounds_in(const models::TrainingSpec& training, const sim::Scenario& scenario) {
  using B = models::FloatBound<F>;
  try {
    const auto batches = sim::convert_batches<B>(sim::oracle_batches(scenario), [](const models::Sequence<Rational>& seq) {
      return models::to_float_bound<F>(seq);
    });
    const auto oracle = models::run_oracle(training, models::to_float_bound<F>(scenario.initial_parameters),
                                           std::span<const models::StepBatch<B>>(batches));
    RunBounds b;
    for (std::size_t s = 0; s < oracle.steps.size(); ++s) {
      const std::string step = "step " + std::to_string(s);
      b.step_gradient.push_back(bounds_of<F>(oracle.steps[s].applied_gradient.tensors, step + " / gradient"));
      b.step_grad_norm.push_back(std::max(bound_of(oracle.steps[s].grad_norm, step + " / grad_norm"),
                                          bound_of(norm_of_tensor_norms<F>(oracle.steps[s].gradient), step + " / grad_norm")));
      b.step_clip_coefficient.push_back(bound_of(oracle.steps[s].clip_coefficient, step + " / clip_coefficient"));
    }
    b.parameters = bounds_of<F>(oracle.parameters.tensors, "final / parameters");
    b.first_moment = bounds_of<F>(oracle.state.first_moment, "final / first_moment");
    b.second_moment = bounds_of<F>(oracle.state.second_moment, "final / second_moment");
    return b;
  } catch (const models::AmbiguousComparison& e) {
    return std::string("no rounding bound: a comparison in the computation is within rounding of its threshold, so a "
                       "correct float run may take either branch (") + e.what() + ")";
  } catch (const Unbounded& u) {
    return "no rounding bound for " + u.where + ": rounding could make a divisor zero or a value overflow " +
           std::string(models::ScalarTraits<B>::name);
  }
}

}  // namespace

std::variant<RunBounds, std::string> rounding_bounds(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                     sim::ScalarKind scalar) {
  if (scenario.engine.loss_scaler)
    return std::string("no rounding bound: loss scaling skips steps on overflow, which the oracle does not model");
  // 16-bit storage rounds more than the run's scalar; charging every operation the 16-bit unit roundoff is an
  // over-approximation (mixed precision does some of them in fp32), so the bound stays sound.
  if (scenario.engine.precision == sim::Precision::bf16) return bounds_in<models::FloatFormatKind::bf16>(training, scenario);
  if (scenario.engine.precision == sim::Precision::fp16) return bounds_in<models::FloatFormatKind::fp16>(training, scenario);
  switch (scalar) {
    case sim::ScalarKind::fp32: return bounds_in<models::FloatFormatKind::fp32>(training, scenario);
    case sim::ScalarKind::fp64: return bounds_in<models::FloatFormatKind::fp64>(training, scenario);
    default: break;
  }
  ACCUMCHECK_ASSERT_MSG(false, "rounding_bounds needs fp32 or fp64");
  return std::string();
}

}  // namespace accumcheck::properties
