// What the float kernels' host tests share: whether a computed float keeps to its FloatSumBound (cuda/float_linear.h).
#pragma once

#include <cmath>

#include "cuda/float_linear.h"

namespace accumcheck::cuda {

// |computed - exact| <= bound, the gap in exact arithmetic (a float converts to a Rational exactly). A sum without a
// bound is never within it.
inline bool within(float computed, const FloatSumBound& b) {
  const models::Rational gap = models::Rational(mpq_class(static_cast<double>(computed))) - b.exact;
  return b.bounded && std::fabs(gap.to_double()) <= static_cast<double>(b.bound);
}

}  // namespace accumcheck::cuda
