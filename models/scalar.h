// ScalarTraits<S>: what the models, optimizers and oracle need to know about a number type, and nothing more.
//
// Every model is templated on its scalar S. S supports + - * / with itself, construction from int (S(0),
// S(1)), and comparisons. ScalarTraits<S> adds:
//   exact          true when + - * / never round (Rational, FastRational). Fixed point adds and subtracts
//                  exactly but rounds products, so it is not `exact`; it is `checked` (overflow throws).
//   name           a short stable name used in benchmarks, findings and reports ("rational", "fp32", ...).
//   from_rational  the value of a Rational in S: exact for exact types, else the documented rounding.
//   to_rational    the exact value of an S (every finite value of every type here is rational).
//   sqrt           the one documented square root of the type (see sqrt_rounded for the exact types).
//   round_update   the one documented rounding of Adam's update (the quotient lr m / denom) and of the clip
//                  coefficient (models/clipping.h): truncation to 2^-64 for the exact types (truncate_to_bits),
//                  nothing for the types whose arithmetic rounds.
//   is_finite      false for inf/NaN in float types; always true for exact and checked types.
// and may add
//   round_update_quotient(x, y, z)   round_update(x / (y + z)), the same value, computed without forming the
//                  sum or the quotient (models::round_update_quotient below calls it where a type has it).
// Specialisations for Fixed and FastRational live beside those types.
#pragma once

#include <cmath>
#include <string_view>

#include <Eigen/Core>

#include "models/rational.h"

namespace accumcheck::models {

// Fraction bits kept by the square root of the exact types: far below any float rounding, and fixed so that
// the result is a pure function of the exact input.
inline constexpr int kExactSqrtFractionBits = 64;
// Fraction bits kept of Adam's update on the exact path, for the same reasons. Without it the parameters' exact
// values grow by the quotient's digits every step (some 64 bits, each one dividing by a rounded root), and
// every later product pays for them; with it, an update adds at most 64 fraction bits to a parameter.
inline constexpr int kExactUpdateFractionBits = 64;

template <class S>
struct ScalarTraits;

template <>
struct ScalarTraits<Rational> {
  static constexpr bool exact = true;
  static constexpr bool checked = true;
  static constexpr std::string_view name = "rational";
  static Rational from_rational(const Rational& q) { return q; }
  static Rational to_rational(const Rational& x) { return x; }
  static Rational sqrt(const Rational& x) { return sqrt_rounded(x, kExactSqrtFractionBits); }
  static Rational round_update(const Rational& x) { return truncate_to_bits(x, kExactUpdateFractionBits); }
  static bool is_finite(const Rational&) { return true; }
};

// round_update(x / (y + z)), the form of both of round_update's uses (Adam's exact update, below, and the clip
// coefficient max_norm / (norm + eps)): a type's round_update_quotient where it has one (FastRational's takes one
// integer division instead of a sum and a quotient in lowest terms), else the operations as written.
template <class S>
S round_update_quotient(const S& x, const S& y, const S& z) {
  if constexpr (requires { ScalarTraits<S>::round_update_quotient(x, y, z); })
    return ScalarTraits<S>::round_update_quotient(x, y, z);
  else
    return ScalarTraits<S>::round_update(x / (y + z));
}

namespace detail {
// Float types: from_rational goes through the nearest double, then the nearest S (for float, bf16 and fp16 this
// is the rounding PyTorch applies to a Python float literal). sqrt is the type's own: std::sqrt in double or
// float, and for the 16-bit types sqrt in float rounded back, as PyTorch's CPU kernels do.
template <class S, class Compute>
struct FloatTraits {
  static constexpr bool exact = false;
  static constexpr bool checked = false;
  static S from_rational(const Rational& q) { return static_cast<S>(q.to_double()); }
  static Rational to_rational(const S& x) { return Rational::from_double(static_cast<double>(x)); }
  static S sqrt(const S& x) { return static_cast<S>(std::sqrt(static_cast<Compute>(x))); }
  static S round_update(const S& x) { return x; }
  static bool is_finite(const S& x) { return std::isfinite(static_cast<double>(x)); }
};
}  // namespace detail

template <>
struct ScalarTraits<double> : detail::FloatTraits<double, double> {
  static constexpr std::string_view name = "fp64";
};
template <>
struct ScalarTraits<float> : detail::FloatTraits<float, float> {
  static constexpr std::string_view name = "fp32";
};
template <>
struct ScalarTraits<Eigen::bfloat16> : detail::FloatTraits<Eigen::bfloat16, float> {
  static constexpr std::string_view name = "bf16";
};
template <>
struct ScalarTraits<Eigen::half> : detail::FloatTraits<Eigen::half, float> {
  static constexpr std::string_view name = "fp16";
};

template <class S>
concept Scalar = requires(const S& a, const S& b) {
  { a + b };
  { a * b };
  { a / b };
  { ScalarTraits<S>::to_rational(a) };
  { ScalarTraits<S>::from_rational(Rational(0)) };
};

template <class S>
S from_rational(const Rational& q) {
  return ScalarTraits<S>::from_rational(q);
}
template <class S>
Rational to_rational(const S& x) {
  return ScalarTraits<S>::to_rational(x);
}

}  // namespace accumcheck::models

// Rational as an Eigen scalar: Eigen needs NumTraits for its reductions, products and printing.
namespace Eigen {
template <>
struct NumTraits<accumcheck::models::Rational> : GenericNumTraits<accumcheck::models::Rational> {
  using Real = accumcheck::models::Rational;
  using NonInteger = accumcheck::models::Rational;
  using Nested = accumcheck::models::Rational;
  using Literal = accumcheck::models::Rational;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 4,
    AddCost = 16,
    MulCost = 32
  };
  static inline int digits10() { return 0; }
  static inline Real epsilon() { return Real(0); }
  static inline Real dummy_precision() { return Real(0); }
};
}  // namespace Eigen
