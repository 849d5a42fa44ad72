// Fixed<F>'s bodies, included at the end of fixed_point.h and nowhere else.
//
// Method: adds and subtracts use the compiler's overflow builtins on the raw int64s. Products and quotients
// are formed exactly in __int128 and rounded once, to nearest with ties to even, before the range check, so
// the check sees the value that would be stored. The overflow paths are cold, out-of-line functions that
// build their message with GMP; the hot paths never touch it.
#pragma once

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include <gmpxx.h>

#include "models/assert.h"

namespace accumcheck::models {

namespace detail {

__extension__ using FixedInt128 = __int128;
__extension__ using FixedUInt128 = unsigned __int128;

inline constexpr std::int64_t kFixedRawMin = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kFixedRawMax = std::numeric_limits<std::int64_t>::max();

// raw / 2^F, exactly, as Rational::to_string writes it.
inline mpq_class fixed_exact(std::int64_t raw, int fraction_bits) {
  mpz_class den;
  mpz_ui_pow_ui(den.get_mpz_t(), 2, static_cast<unsigned long>(fraction_bits));
  mpq_class q(mpz_class(static_cast<long>(raw)), den);
  q.canonicalize();
  return q;
}

inline std::string fixed_width_text(int fraction_bits) {
  return "fixed<" + std::to_string(fraction_bits) + ">";
}

inline std::string fixed_range_text(int fraction_bits) {
  const std::string top = "2^" + std::to_string(63 - fraction_bits);
  return "[-" + top + ", " + top + " - 2^-" + std::to_string(fraction_bits) + "]";
}

// One message shape for every overflow: what was computed, from what, the exact result, and the range.
// `rounds` says whether the result is rounded to a multiple of 2^-F before the range check (mul, div,
// from_rational), so the message does not claim an exact result is out of range when only its rounding is.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_fixed_overflow(std::string_view operation,
                                                                         const std::string& expression,
                                                                         const std::string& exact_result,
                                                                         bool rounds, int fraction_bits) {
  const std::string bits = std::to_string(fraction_bits);
  throw FixedPointOverflow(fixed_width_text(fraction_bits) + " " + std::string(operation) + " overflow: " +
                           expression + " = " + exact_result + ", which" +
                           (rounds ? " rounded to a multiple of 2^-" + bits : std::string()) +
                           " is outside the range " + fixed_range_text(fraction_bits) + " of " + bits +
                           " fraction bits");
}

// a (op) b for raws a and b; the exact result is recomputed here with GMP, off the hot path.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_fixed_binary_overflow(char op, std::int64_t a, std::int64_t b,
                                                                                int fraction_bits) {
  const mpq_class qa = fixed_exact(a, fraction_bits), qb = fixed_exact(b, fraction_bits);
  mpq_class exact;
  std::string_view operation;
  switch (op) {
    case '+': exact = qa + qb; operation = "add"; break;
    case '-': exact = qa - qb; operation = "sub"; break;
    case '*': exact = qa * qb; operation = "mul"; break;
    default: exact = qa / qb; operation = "div"; break;  // b != 0: division by zero is checked first
  }
  throw_fixed_overflow(operation, qa.get_str() + " " + op + " " + qb.get_str(), exact.get_str(), op == '*' || op == '/',
                       fraction_bits);
}

// floor(x / 2^shift) rounded to nearest, ties to even, for shift in [0, 62].
inline FixedInt128 shift_right_round_half_even(FixedInt128 x, int shift) {
  if (shift == 0) return x;
  FixedInt128 q = x >> shift;  // arithmetic shift (defined in C++20): floor
  // x mod 2^shift, in [0, 2^shift): the low bits of the two's complement form.
  const FixedUInt128 remainder = static_cast<FixedUInt128>(x) & ((FixedUInt128{1} << shift) - 1);
  const FixedUInt128 half = FixedUInt128{1} << (shift - 1);
  if (remainder > half || (remainder == half && (q & 1) != 0)) ++q;
  return q;
}

inline bool fits_int64(FixedInt128 x) { return x >= kFixedRawMin && x <= kFixedRawMax; }

}  // namespace detail

template <int F>
Fixed<F>::Fixed(long long value) {
  // value * 2^F fits exactly when value lies in [INT64_MIN >> F, INT64_MAX >> F] (arithmetic shifts: floors).
  if (value < (detail::kFixedRawMin >> F) || value > (detail::kFixedRawMax >> F)) [[unlikely]] {
    detail::throw_fixed_overflow("conversion from integer", std::to_string(value), std::to_string(value), false, F);
  }
  raw_ = value * (std::int64_t{1} << F);
}

template <int F>
Fixed<F> Fixed<F>::from_rational(const Rational& value) {
  const mpq_class& q = value.mpq();
  // value * 2^F = num * 2^F / den; floor and remainder, then round half to even.
  mpz_class scaled = q.get_num();
  mpz_mul_2exp(scaled.get_mpz_t(), scaled.get_mpz_t(), F);
  mpz_class floor_part, remainder;
  mpz_fdiv_qr(floor_part.get_mpz_t(), remainder.get_mpz_t(), scaled.get_mpz_t(), q.get_den_mpz_t());
  mpz_class twice_remainder = remainder * 2;
  const int c = cmp(twice_remainder, q.get_den());
  if (c > 0 || (c == 0 && mpz_odd_p(floor_part.get_mpz_t()))) ++floor_part;
  if (!mpz_fits_slong_p(floor_part.get_mpz_t())) [[unlikely]] {
    detail::throw_fixed_overflow("from_rational", value.to_string(), value.to_string(), true, F);
  }
  return from_raw(mpz_get_si(floor_part.get_mpz_t()));
}

template <int F>
Rational Fixed<F>::to_rational() const {
  return Rational(detail::fixed_exact(raw_, F));
}

template <int F>
double Fixed<F>::to_double() const {
  return std::ldexp(static_cast<double>(raw_), -F);
}

template <int F>
std::string Fixed<F>::to_string() const {
  return detail::fixed_exact(raw_, F).get_str();
}

template <int F>
Fixed<F> Fixed<F>::add(Fixed other) const {
  std::int64_t r;
  if (__builtin_add_overflow(raw_, other.raw_, &r)) [[unlikely]] detail::throw_fixed_binary_overflow('+', raw_, other.raw_, F);
  return from_raw(r);
}

template <int F>
Fixed<F> Fixed<F>::subtract(Fixed other) const {
  std::int64_t r;
  if (__builtin_sub_overflow(raw_, other.raw_, &r)) [[unlikely]] detail::throw_fixed_binary_overflow('-', raw_, other.raw_, F);
  return from_raw(r);
}

template <int F>
Fixed<F> Fixed<F>::multiply(Fixed other) const {
  // (a / 2^F) * (b / 2^F) = (a * b / 2^F) / 2^F: the raw result is a * b / 2^F, rounded. |a * b| <= 2^126.
  const detail::FixedInt128 product = detail::FixedInt128{raw_} * other.raw_;
  const detail::FixedInt128 rounded = detail::shift_right_round_half_even(product, F);
  if (!detail::fits_int64(rounded)) [[unlikely]] detail::throw_fixed_binary_overflow('*', raw_, other.raw_, F);
  return from_raw(static_cast<std::int64_t>(rounded));
}

template <int F>
Fixed<F> Fixed<F>::divide(Fixed other) const {
  if (other.raw_ == 0) [[unlikely]] {
    throw std::domain_error(detail::fixed_width_text(F) + " div: division by zero (" + to_string() + " / 0)");
  }
  // (a / 2^F) / (b / 2^F) = (a * 2^F / b) / 2^F: the raw result is a * 2^F / b, rounded. Worked on
  // magnitudes (|a| can be 2^63); ties to even is symmetric, so the sign can be applied afterwards.
  using detail::FixedUInt128;
  const auto magnitude = [](std::int64_t x) {
    return x < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
  };
  const FixedUInt128 numerator = FixedUInt128{magnitude(raw_)} << F;  // <= 2^125
  const FixedUInt128 denominator = magnitude(other.raw_);
  FixedUInt128 quotient = numerator / denominator;
  const FixedUInt128 remainder = numerator % denominator;  // < 2^63, so 2 * remainder cannot wrap
  if (2 * remainder > denominator || (2 * remainder == denominator && (quotient & 1) != 0)) ++quotient;
  const bool negative = (raw_ < 0) != (other.raw_ < 0);
  const FixedUInt128 limit = negative ? FixedUInt128{1} << 63 : (FixedUInt128{1} << 63) - 1;
  if (quotient > limit) [[unlikely]] detail::throw_fixed_binary_overflow('/', raw_, other.raw_, F);
  const detail::FixedInt128 signed_quotient = static_cast<detail::FixedInt128>(quotient);
  return from_raw(static_cast<std::int64_t>(negative ? -signed_quotient : signed_quotient));
}

template <int F>
Fixed<F> Fixed<F>::negate() const {
  if (raw_ == detail::kFixedRawMin) [[unlikely]] {
    const std::string x = to_string();
    detail::throw_fixed_overflow("negation", "-(" + x + ")", x.substr(1), false, F);  // x is "-2^(63-F)": drop the sign
  }
  return from_raw(-raw_);
}

template <int F>
Fixed<F> ScalarTraits<Fixed<F>>::sqrt(const Fixed<F>& x) {
  if (x.sign() < 0) {
    throw std::domain_error(std::string(name) + " sqrt: negative argument " + x.to_string());
  }
  const Rational root = sqrt_rounded(x.to_rational(), F);
  // The root is a multiple of 2^-F: either floor(sqrt(x) * 2^F) / 2^F, or an exact rational root, whose
  // denominator d satisfies d^2 | 2^F, so d | 2^F too. It is at most max(x, 1), so it fits.
  mpz_class scaled = root.numerator();
  mpz_mul_2exp(scaled.get_mpz_t(), scaled.get_mpz_t(), F);
  const mpz_class den = root.denominator();
  ACCUMCHECK_ASSERT(mpz_divisible_p(scaled.get_mpz_t(), den.get_mpz_t()) != 0);
  mpz_divexact(scaled.get_mpz_t(), scaled.get_mpz_t(), den.get_mpz_t());
  ACCUMCHECK_ASSERT(mpz_fits_slong_p(scaled.get_mpz_t()) != 0);
  return Fixed<F>::from_raw(mpz_get_si(scaled.get_mpz_t()));
}

}  // namespace accumcheck::models
