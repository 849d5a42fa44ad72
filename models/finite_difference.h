// Exact finite differences for checking hand-written backward passes.
//
// Along one coordinate every synthetic model's loss is a polynomial of degree <= 4 (quadratic for linear and
// MLP away from ReLU kinks; quartic for the tied embedding, whose parameter is used twice). The 5-point
// central stencil
//   f'(x) = (f(x - 2h) - 8 f(x - h) + 8 f(x + h) - f(x + 2h)) / (12 h)
// is exact for every polynomial of degree <= 4, so in rationals the check is equality, with no tolerance.
#pragma once

#include "models/rational.h"

namespace accumcheck::models {

template <class F>
Rational five_point_derivative(F&& f, const Rational& x, const Rational& h) {
  const Rational two_h = h + h;
  return (f(x - two_h) - Rational(8) * f(x - h) + Rational(8) * f(x + h) - f(x + two_h)) / (Rational(12) * h);
}

}  // namespace accumcheck::models
