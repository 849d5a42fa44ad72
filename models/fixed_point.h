// Fixed<F>: signed, checked binary fixed point; the value is raw / 2^F with raw an int64.
//
// It models what a careful integer accumulator would do: adds and subtracts are exact, products and quotients
// round once, and nothing ever wraps. Every overflow (add, sub, mul, div, negating the most negative value,
// conversion from an integer or a Rational) throws FixedPointOverflow, whose message names the operation, the
// operands' exact values and the fraction width, so a finding can say which step left the range.
//
// Rounding: mul and div round the exact result to the nearest multiple of 2^-F, ties to even. Why: it is
// unbiased (ties go up as often as down, so long accumulations do not drift), and it equals what an exact
// rational computation rounded once would give, so the result is a pure function of the exact operands.
// Both are computed exactly in __int128 (|raw_a * raw_b| <= 2^126, |raw_a * 2^F| <= 2^125), then rounded.
// from_rational rounds the same way; to_rational is exact.
//
// The range is [-2^(63-F), 2^(63-F) - 2^-F]; Fixed32 covers [-2^31, 2^31) in steps of 2^-32.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include <Eigen/Core>

#include "models/rational.h"
#include "models/scalar.h"

namespace accumcheck::models {

// Thrown instead of wrapping. what() names the operation, the exact operands and the fraction width.
class FixedPointOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

template <int FractionBits>
class Fixed {
  // 62 keeps the value 1 (raw 2^62) representable; F = 63 could not hold 1, so products would be meaningless.
  static_assert(FractionBits >= 0 && FractionBits <= 62, "Fixed<F> needs 0 <= F <= 62");

 public:
  static constexpr int kFractionBits = FractionBits;

  constexpr Fixed() noexcept = default;
  // Implicit from integers so that Eigen's Scalar(0) and Scalar(1) work. Exact; throws FixedPointOverflow
  // when value * 2^F does not fit an int64.
  Fixed(int value) : Fixed(static_cast<long long>(value)) {}    // NOLINT(google-explicit-constructor)
  Fixed(long value) : Fixed(static_cast<long long>(value)) {}   // NOLINT(google-explicit-constructor)
  Fixed(long long value);                                        // NOLINT(google-explicit-constructor)
  // Deleted so that `x * 0.5` does not compile as `x * 0` through the int constructor; say from_rational.
  Fixed(double) = delete;

  // The value raw / 2^F.
  static constexpr Fixed from_raw(std::int64_t raw) noexcept {
    Fixed result;
    result.raw_ = raw;
    return result;
  }
  // The nearest multiple of 2^-F, ties to even; throws FixedPointOverflow when that is out of range.
  static Fixed from_rational(const Rational& value);

  constexpr std::int64_t raw() const noexcept { return raw_; }
  // Exact.
  Rational to_rational() const;
  // Nearest double: the int64 raw rounds once to a double, and scaling by 2^-F is exact.
  double to_double() const;
  // The exact value as Rational::to_string writes it: "n" or "n/d".
  std::string to_string() const;

  constexpr int sign() const noexcept { return (raw_ > 0) - (raw_ < 0); }
  constexpr bool is_zero() const noexcept { return raw_ == 0; }

  Fixed& operator+=(Fixed other) { return *this = *this + other; }
  Fixed& operator-=(Fixed other) { return *this = *this - other; }
  Fixed& operator*=(Fixed other) { return *this = *this * other; }
  Fixed& operator/=(Fixed other) { return *this = *this / other; }

  // Exact; throw FixedPointOverflow when the result is out of range.
  friend Fixed operator+(Fixed a, Fixed b) { return a.add(b); }
  friend Fixed operator-(Fixed a, Fixed b) { return a.subtract(b); }
  // Round to nearest, ties to even; throw FixedPointOverflow when the rounded result is out of range.
  friend Fixed operator*(Fixed a, Fixed b) { return a.multiply(b); }
  // As *, and throws std::domain_error on division by zero.
  friend Fixed operator/(Fixed a, Fixed b) { return a.divide(b); }
  // Throws FixedPointOverflow for the most negative value, whose negation is out of range.
  friend Fixed operator-(Fixed a) { return a.negate(); }
  friend Fixed operator+(Fixed a) { return a; }

  friend constexpr bool operator==(const Fixed&, const Fixed&) = default;
  friend constexpr std::strong_ordering operator<=>(const Fixed&, const Fixed&) = default;

 private:
  Fixed add(Fixed other) const;
  Fixed subtract(Fixed other) const;
  Fixed multiply(Fixed other) const;
  Fixed divide(Fixed other) const;
  Fixed negate() const;

  std::int64_t raw_ = 0;
};

using Fixed32 = Fixed<32>;

// |x|; throws FixedPointOverflow for the most negative value.
template <int F>
Fixed<F> abs(Fixed<F> x) {
  return x.sign() < 0 ? -x : x;
}

namespace detail {
// "fixed<F>" built at compile time, so ScalarTraits<Fixed<F>>::name is a constexpr string_view like the rest.
template <int F>
constexpr auto fixed_name_chars() {
  constexpr std::size_t digit_count = F >= 10 ? 2 : 1;
  std::array<char, 7 + digit_count> chars{'f', 'i', 'x', 'e', 'd', '<'};
  if constexpr (F >= 10) {
    chars[6] = static_cast<char>('0' + F / 10);
    chars[7] = static_cast<char>('0' + F % 10);
  } else {
    chars[6] = static_cast<char>('0' + F);
  }
  chars[6 + digit_count] = '>';
  return chars;
}
template <int F>
inline constexpr auto kFixedNameChars = fixed_name_chars<F>();
}  // namespace detail

template <int F>
struct ScalarTraits<Fixed<F>> {
  static constexpr bool exact = false;  // products and quotients round
  static constexpr bool checked = true;  // overflow throws
  static constexpr std::string_view name{detail::kFixedNameChars<F>.data(), detail::kFixedNameChars<F>.size()};
  static Fixed<F> from_rational(const Rational& q) { return Fixed<F>::from_rational(q); }
  static Rational to_rational(const Fixed<F>& x) { return x.to_rational(); }
  // floor(sqrt(x) * 2^F) / 2^F, via sqrt_rounded(x, F); it never overflows (sqrt shrinks anything >= 1).
  // Throws std::domain_error for negative x.
  static Fixed<F> sqrt(const Fixed<F>& x);
  // Nothing: the quotient that makes Adam's update is already rounded to 2^-F by the division.
  static Fixed<F> round_update(const Fixed<F>& x) { return x; }
  static bool is_finite(const Fixed<F>&) { return true; }
};

}  // namespace accumcheck::models

// Fixed<F> as an Eigen scalar. epsilon is the spacing 2^-F; dummy_precision is 0, as for Rational, so that
// isApprox means equality and no test passes on a tolerance by accident.
namespace Eigen {
template <int F>
struct NumTraits<accumcheck::models::Fixed<F>> : GenericNumTraits<accumcheck::models::Fixed<F>> {
  using Real = accumcheck::models::Fixed<F>;
  using NonInteger = accumcheck::models::Fixed<F>;
  using Nested = accumcheck::models::Fixed<F>;
  using Literal = accumcheck::models::Fixed<F>;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 1,
    AddCost = 1,
    MulCost = 4
  };
  static inline int digits10() { return 0; }
  static inline Real epsilon() { return Real::from_raw(1); }
  static inline Real dummy_precision() { return Real(0); }
  static inline Real highest() { return Real::from_raw(std::numeric_limits<std::int64_t>::max()); }
  static inline Real lowest() { return Real::from_raw(std::numeric_limits<std::int64_t>::min()); }
};
}  // namespace Eigen

#include "models/fixed_point-inl.h"
