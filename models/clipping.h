// Global-norm gradient clipping as torch.nn.utils.clip_grad_norm_ defines it, with the norm taken once over
// all present gradients:
//   total_norm = sqrt(sum_p sum_j g_pj^2)               (ScalarTraits<S>::sqrt: the documented root)
//   coef       = max_norm / (total_norm + eps)          (eps = 1e-6 by default, exactly 1/10^6), rounded as
//                the exact types round Adam's update: truncated toward zero to a multiple of 2^-64
//                (ScalarTraits<S>::round_update; nothing for the float types, whose division rounds)
//   if coef < 1: g *= coef                              (torch multiplies by min(coef, 1); by 1 is identity)
// PyTorch takes the norm of per-tensor norms; in exact arithmetic with a rounded root that would round twice,
// so the exact path takes one root of the exact sum of squares. Float runs differ from PyTorch only by that
// rounding, which the float tolerance accounts for.
#pragma once

#include <span>
#include <type_traits>

#include "models/fast_rational.h"
#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::models {

inline const Rational kClipEpsilon = Rational(1LL, 1000000LL);

template <class S>
struct ClipResult {
  S total_norm;        // norm before clipping (what frameworks log as grad_norm)
  S clip_coefficient;  // the factor applied: 1 when not clipped
  bool clipped = false;
};

// total += v * v for every value, in order. FastRational's exact sum is the same value taken in one sum
// (sum_of_squares); every other scalar adds one square at a time, in the order given, as it always did.
template <class S>
void add_squares(S& total, std::span<const S> values) {
  if constexpr (std::is_same_v<S, FastRational>) {
    total += sum_of_squares(values);
  } else {
    for (const S& v : values) total += v * v;
  }
}

// sum_p sum_j g_pj^2 over present gradients, each tensor in its storage order (column-major).
template <class S>
S squared_grad_norm(const Gradient<S>& grad) {
  S total(0);
  for (std::size_t p = 0; p < grad.size(); ++p) {
    if (!grad.present[p]) continue;
    const Matrix<S>& g = grad.tensors[p];
    add_squares(total, std::span<const S>(g.data(), static_cast<std::size_t>(g.size())));
  }
  return total;
}

template <class S>
S grad_norm(const Gradient<S>& grad) {
  return ScalarTraits<S>::sqrt(squared_grad_norm(grad));
}

// The clip coefficient of a gradient whose global norm is total_norm, as every engine and the oracle compute it.
// An exact coefficient is truncated because the exact quotient's denominator is the root's 2^64 times 10^6 plus
// its numerator: about 85 odd bits, which every clipped value and every sum of them would carry through GMP. On the
// 2^-64 grid the clipped gradient stays dyadic wherever it was. The truncation moves the coefficient down by less
// than 2^-64, so a clipped norm never exceeds max_norm; a coefficient of 1 or more is not moved (1 is on the grid),
// so whether a step clips does not change. FloatBound widens its bound by the 2^-64 it may have moved.
template <class S>
S clip_coefficient(const S& total_norm, const Rational& max_norm, const Rational& eps = kClipEpsilon) {
  return round_update_quotient(from_rational<S>(max_norm), total_norm, from_rational<S>(eps));
}

// Clips grad in place. max_norm must be positive (throws std::invalid_argument otherwise).
template <class S>
ClipResult<S> clip_grad_norm(Gradient<S>& grad, const Rational& max_norm, const Rational& eps = kClipEpsilon) {
  if (max_norm.sign() <= 0)
    throw std::invalid_argument("clip_grad_norm: max_norm = " + max_norm.to_string() + " must be positive");
  ClipResult<S> result{grad_norm(grad), S(1), false};
  const S coef = clip_coefficient(result.total_norm, max_norm, eps);
  if (coef < S(1)) {
    result.clip_coefficient = coef;
    result.clipped = true;
    // Element by element: Eigen's tensor *= scalar reads the scalar through a constant expression that copies it
    // for every element, and a promoted coefficient's copy is a heap allocation.
    for (std::size_t p = 0; p < grad.size(); ++p)
      if (grad.present[p])
        for (S& g : std::span<S>(grad.tensors[p].data(), static_cast<std::size_t>(grad.tensors[p].size()))) g *= coef;
  }
  return result;
}

}  // namespace accumcheck::models
