// ResultBounds: beside each exact value of a run result, a bound on how far ANY IEEE evaluation of the same
// computation in one float format may land from it (models/float_bound.h gives the rules).
//
// Two computations get bounds: the exact full-batch oracle (properties/rounding_bounds.h: how far a correct
// float target may be from the truth), and a simulated target's own run (Target::run_bounded: how far a float
// implementation of exactly what the model computes, defects included, may be from the model's exact values,
// which is what a differential check of a real release against its behavioural model needs).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/float_bound.h"
#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::sim {

using Rational = models::Rational;

struct ResultBounds {
  std::vector<std::vector<models::Matrix<Rational>>> step_gradient;  // [step][parameter], after clipping
  std::vector<Rational> step_grad_norm, step_clip_coefficient;       // [step]
  std::vector<models::Matrix<Rational>> parameters, first_moment, second_moment;  // after the last step

  // All zeros, for exact scalars.
  static ResultBounds zero(const models::ModelSpec& spec, std::size_t step_count);

  // Raises every bound to `other`'s where that is larger. False, and nothing changed, when the two are not
  // of the same shape (another model or step count).
  bool widen_to(const ResultBounds& other);
};

// The computation has no bound: a comparison within rounding of its threshold (a float run may take either
// branch), a divisor that rounding could make zero, an overflow. The message says which and where.
class NoRoundingBound : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The reason for a comparison that rounding could decide either way.
std::string ambiguous_comparison_reason(const models::AmbiguousComparison& e);

template <models::FloatFormatKind F>
Rational bound_of(const models::FloatBound<F>& x, const std::string& where) {
  auto b = models::error_bound(x);
  if (!b)
    throw NoRoundingBound("no rounding bound for " + where + ": rounding could make a divisor zero or a value overflow " +
                          std::string(models::ScalarTraits<models::FloatBound<F>>::name));
  return *b;
}

template <models::FloatFormatKind F>
std::vector<models::Matrix<Rational>> bounds_of(const std::vector<models::Matrix<models::FloatBound<F>>>& ts, const std::string& where) {
  std::vector<models::Matrix<Rational>> out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    models::Matrix<Rational> m(t.rows(), t.cols());
    for (Eigen::Index i = 0; i < t.size(); ++i) m(i) = bound_of(t(i), where);
    out.push_back(std::move(m));
  }
  return out;
}

// torch.nn.utils.clip_grad_norm_ and DeepSpeed take the norm of per-tensor (or per-parameter) norms, whose
// intermediates are inexact roots even when the whole norm is exactly rational: one root of the total sum of
// squares can be certified exact where that form rounds. A grad norm's bound is the larger of the two forms'.
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

// The bound of a reported grad norm: the larger of the form as computed and the norm of tensor norms.
template <models::FloatFormatKind F>
Rational grad_norm_bound(const models::FloatBound<F>& norm, const models::Gradient<models::FloatBound<F>>& gradient,
                         const std::string& where) {
  return std::max(bound_of(norm, where), bound_of(norm_of_tensor_norms<F>(gradient), where));
}

}  // namespace accumcheck::sim
