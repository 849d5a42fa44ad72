// FloatBound<F>'s bodies, included at the end of float_bound.h and nowhere else.
//
// Method: every operation computes the exact result in FastRational, closes the operands' pending sums (a few
// long double operations, nothing is cached: a closure is a pure function of the sum's four fields), and then
// either merges dyadic certificates (the result is exact in every evaluation) or applies the rule of the file
// comment of float_bound.h. Magnitudes |exact| are read through FastRational::to_double, which is correctly
// rounded, and widened by 2^-50 relative in the safe direction; values outside the normal double range go
// through GMP. All bound arithmetic is long double (64-bit significand), and every new bound is multiplied by
// kBoundSlack = 1 + 2^-40, which dominates the relative rounding of the few long double operations behind it and
// the 2^-50 widening of the magnitudes.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include <gmpxx.h>

#include "models/assert.h"

namespace accumcheck::models {

namespace detail {

// 2^exponent, at compile time (std::ldexp is not constexpr before C++23). Exact: long double reaches 2^-16382.
constexpr long double float_bound_pow2(int exponent) {
  long double x = 1.0L;
  for (; exponent > 0; --exponent) x *= 2.0L;
  for (; exponent < 0; ++exponent) x *= 0.5L;
  return x;
}

// The format's constants as the rules use them.
struct FloatBoundConstants {
  int significand_bits;               // p
  int exponent_max;                   // emax
  int subnormal_grain_exponent;       // emin - p + 1: the exponent of the smallest subnormal
  long double rounding_unit;          // k_r u = k_r 2^-p: one charged operation
  long double underflow_allowance;    // eta = 2^(emin - p), half the smallest subnormal
  long double max_finite;             // (2 - 2^(1-p)) 2^emax
  long double certificate_range_max;  // 2^(emax - certificate_range_margin_bits)
};

constexpr FloatBoundConstants float_bound_constants(FloatFormatKind kind) {
  const FloatFormat f = float_format(kind);
  const int p = f.significand_bits;
  return {p,
          f.exponent_max,
          f.exponent_min - p + 1,
          kRoundingAllowance * float_bound_pow2(-p),
          float_bound_pow2(f.exponent_min - p),
          (2.0L - float_bound_pow2(1 - p)) * float_bound_pow2(f.exponent_max),
          float_bound_pow2(f.exponent_max - certificate_range_margin_bits(f))};
}

template <FloatFormatKind F>
inline constexpr FloatBoundConstants kFloatBoundConstants = float_bound_constants(F);

// Absorbs the bound arithmetic's own rounding: every newly computed bound is multiplied by it.
inline constexpr long double kBoundSlack = 1.0L + float_bound_pow2(-40);
// Certificate magnitudes are sums and products of dyadics of few bits, exact in long double in practice; this
// keeps them upper bounds when they are not.
inline constexpr long double kCertificateSlack = 1.0L + float_bound_pow2(-60);
// |x| read through a correctly rounded double (or a truncated GMP mantissa) is within 2^-52 relative; 2^-50 more
// than covers it.
inline constexpr long double kMagnitudeReadSlack = float_bound_pow2(-50);
// The exact oracle floors a non-square root to a multiple of 2^-64: it sits up to that far below the true root.
inline constexpr long double kExactRootFloor = float_bound_pow2(-kExactSqrtFractionBits);
// The exact oracle truncates Adam's update toward zero to a multiple of 2^-64: it moves by less than that.
inline constexpr long double kExactUpdateTruncation = float_bound_pow2(-kExactUpdateFractionBits);
// The grain exponent of zero: no constraint. Sums of grains saturate here instead of overflowing.
inline constexpr int kNoGrain = std::numeric_limits<int>::max() / 4;

inline int grain_product(int a, int b) { return (a >= kNoGrain || b >= kNoGrain) ? kNoGrain : a + b; }

inline DyadicCertificate zero_certificate() { return {kNoGrain, 0.0L, kNoGrain, 0.0L}; }

// A leaf: a multiple of 2^grain of magnitude `magnitude`, which is its own only sub-product.
inline DyadicCertificate leaf_certificate(int grain, long double magnitude) {
  return {grain, magnitude, grain, magnitude};
}

// Terms of both sums, and their partial sums in any order, are multiples of the smaller grain, of magnitude at
// most the sum of the bounds.
inline DyadicCertificate sum_certificate(const DyadicCertificate& a, const DyadicCertificate& b) {
  const long double magnitude = (a.magnitude + b.magnitude) * kCertificateSlack;
  return {std::min(a.grain_exponent, b.grain_exponent), magnitude,
          std::min(a.chain_grain_exponent_min, b.chain_grain_exponent_min),
          std::max({a.chain_magnitude_max, b.chain_magnitude_max, magnitude})};
}

// Every product of a term of x by a term of y (the distributed form), and partial sums of those, is a multiple
// of 2^(g_x + g_y) of magnitude at most B_x B_y. A sub-product of the rewritten chain is a sub-product of x's
// chain, of y's, or a product of one of each.
inline DyadicCertificate product_certificate(const DyadicCertificate& a, const DyadicCertificate& b) {
  return {grain_product(a.grain_exponent, b.grain_exponent), a.magnitude * b.magnitude * kCertificateSlack,
          std::min({a.chain_grain_exponent_min, b.chain_grain_exponent_min,
                    grain_product(a.chain_grain_exponent_min, b.chain_grain_exponent_min)}),
          std::max({a.chain_magnitude_max, b.chain_magnitude_max,
                    a.chain_magnitude_max * b.chain_magnitude_max * kCertificateSlack})};
}

// Whether a derived value's certificate proves every evaluation exact in the format: every intermediate is a
// multiple of 2^g below 2^(g + p - spare) (so it fits p significand bits with room for a small integer factor),
// no sub-product falls below the smallest subnormal's grain or comes near overflow.
inline bool certificate_holds(const DyadicCertificate& c, const FloatBoundConstants& k) {
  if (c.magnitude == 0) return true;  // every term is zero
  return c.chain_grain_exponent_min >= k.subnormal_grain_exponent && c.chain_magnitude_max <= k.certificate_range_max &&
         c.magnitude < std::ldexp(1.0L, c.grain_exponent + k.significand_bits - kExactnessSpareBits);
}

// q = odd * 2^grain, odd of `span` bits: representable iff the significand fits p bits, the lowest bit is no finer
// than the smallest subnormal, and the top bit is within emax.
inline bool leaf_representable(int grain, int span, const FloatBoundConstants& k) {
  return span <= k.significand_bits && grain >= k.subnormal_grain_exponent && grain + span - 1 <= k.exponent_max;
}

// A nonzero integer's leaf certificate, when it is representable.
inline std::optional<DyadicCertificate> integer_leaf_certificate(long long value, const FloatBoundConstants& k) {
  const unsigned long long magnitude =
      value < 0 ? 0ULL - static_cast<unsigned long long>(value) : static_cast<unsigned long long>(value);
  const int grain = __builtin_ctzll(magnitude);
  const int span = 64 - __builtin_clzll(magnitude) - grain;
  if (!leaf_representable(grain, span, k)) return std::nullopt;
  return leaf_certificate(grain, static_cast<long double>(magnitude));  // exact: 64-bit significand
}

// A nonzero rational's leaf certificate, when it is a dyadic representable in the format.
inline std::optional<DyadicCertificate> rational_leaf_certificate(const Rational& q, const FloatBoundConstants& k) {
  const mpq_class& v = q.mpq();
  const mpz_srcptr den = v.get_den_mpz_t();
  const auto den_exponent = static_cast<long>(mpz_scan1(den, 0));
  if (den_exponent != static_cast<long>(mpz_sizeinbase(den, 2)) - 1) return std::nullopt;  // not a power of two
  const mpz_srcptr num = v.get_num_mpz_t();
  const auto num_zeros = static_cast<long>(mpz_scan1(num, 0));  // the same for -n as for n
  const long span = static_cast<long>(mpz_sizeinbase(num, 2)) - num_zeros;
  const long grain = num_zeros - den_exponent;
  if (span > k.significand_bits || grain < k.subnormal_grain_exponent || grain + span - 1 > k.exponent_max)
    return std::nullopt;
  mpz_class odd;
  mpz_fdiv_q_2exp(odd.get_mpz_t(), num, static_cast<mp_bitcnt_t>(num_zeros));
  const long double magnitude = std::ldexp(std::fabs(static_cast<long double>(odd.get_d())), static_cast<int>(grain));
  return leaf_certificate(static_cast<int>(grain), magnitude);  // odd has <= 53 bits: get_d is exact
}

struct MagnitudeBounds {
  long double lower, upper;  // lower <= |x| <= upper
};

[[gnu::cold, gnu::noinline]] inline MagnitudeBounds magnitude_bounds_slow(const FastRational& x) {
  // mpz_get_d_2exp truncates to a mantissa in [0.5, 1): within 2^-52 relative of each part.
  long num_exponent = 0, den_exponent = 0;
  const mpz_class num = x.numerator(), den = x.denominator();
  const double num_mantissa = std::fabs(mpz_get_d_2exp(&num_exponent, num.get_mpz_t()));
  const double den_mantissa = mpz_get_d_2exp(&den_exponent, den.get_mpz_t());
  const long double value = std::ldexp(static_cast<long double>(num_mantissa) / den_mantissa,
                                       static_cast<int>(num_exponent - den_exponent));
  return {value * (1.0L - kMagnitudeReadSlack), value * (1.0L + kMagnitudeReadSlack)};
}

inline MagnitudeBounds magnitude_bounds(const FastRational& x) {
  if (x.is_zero()) return {0.0L, 0.0L};
  const long double d = std::fabs(static_cast<long double>(x.to_double()));
  // Normal doubles carry 53 bits; below 2^-1000 the double may be subnormal (or 0), above DBL_MAX infinite.
  if (d >= float_bound_pow2(-1000) && d <= DBL_MAX)
    return {d * (1.0L - kMagnitudeReadSlack), d * (1.0L + kMagnitudeReadSlack)};
  return magnitude_bounds_slow(x);
}

// 2^k when a certified value is exactly +-2^k. A certified value is representable in its format, hence exactly a
// double, so the correctly rounded to_double is the value itself.
inline std::optional<int> power_of_two_exponent(const FastRational& certified_value) {
  if (certified_value.is_zero()) return std::nullopt;
  int exponent = 0;
  const double mantissa = std::frexp(std::fabs(certified_value.to_double()), &exponent);
  if (mantissa != 0.5) return std::nullopt;
  return exponent - 1;
}

// gamma_k with k_r u per operation; infinite (hence poison) once k k_r u reaches 1.
inline long double rounding_gamma(long double operation_count, const FloatBoundConstants& k) {
  const long double t = operation_count * k.rounding_unit;
  return t < 1.0L ? t / (1.0L - t) : std::numeric_limits<long double>::infinity();
}

// The exact value of a finite, nonnegative long double: its 64-bit significand times a power of two.
inline Rational rational_from_long_double(long double x) {
  ACCUMCHECK_ASSERT(std::isfinite(x) && x >= 0);
  if (x == 0) return Rational(0);
  int exponent = 0;
  const long double mantissa = std::frexp(x, &exponent);  // x = mantissa 2^exponent, mantissa in [0.5, 1)
  const auto significand = static_cast<unsigned long>(std::ldexp(mantissa, 64));  // exact: 64 bits
  static_assert(sizeof(unsigned long) == 8, "the significand needs a 64-bit unsigned long (LP64)");
  return Rational(mpz_class(significand)) * pow2(exponent - 64);
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_ambiguous_comparison(std::string_view bound_name,
                                                                               const FastRational& a,
                                                                               const FastRational& b,
                                                                               long double bound, bool unbounded) {
  char bound_text[64];
  std::snprintf(bound_text, sizeof bound_text, "%.6Lg", bound);
  const std::string format(bound_name.substr(0, bound_name.find('-')));
  throw AmbiguousComparison(
      std::string(bound_name) + " comparison is undecided: exact values " + a.to_string() + " and " + b.to_string() +
      (unbounded ? std::string(", and an operand's bound is unbounded (overflow, NaN or a division by an interval "
                               "containing 0)")
                 : " differ by at most the operands' combined bound " + std::string(bound_text)) +
      ", so an " + format + " evaluation may take either branch (a ReLU at its kink, a clip coefficient at 1); "
      "this scenario cannot be checked in " + format);
}

}  // namespace detail

template <FloatFormatKind F>
FloatBound<F>::FloatBound() noexcept : certificate_(detail::zero_certificate()) {}

template <FloatFormatKind F>
FloatBound<F>::FloatBound(long long value) : exact_(value), certificate_(detail::zero_certificate()) {
  if (value == 0) return;
  constexpr const detail::FloatBoundConstants& k = detail::kFloatBoundConstants<F>;
  if (const auto certificate = detail::integer_leaf_certificate(value, k)) {
    *this = certified_value(std::move(exact_), *certificate);
    return;
  }
  const long double magnitude = std::fabs(static_cast<long double>(value));  // exact
  *this = bounded_value(std::move(exact_), (k.rounding_unit * magnitude + k.underflow_allowance) * detail::kBoundSlack,
                        magnitude);
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::from_rational(const Rational& q) {
  constexpr const detail::FloatBoundConstants& k = detail::kFloatBoundConstants<F>;
  if (q.is_zero()) return FloatBound();
  FastRational exact(q);
  if (const auto certificate = detail::rational_leaf_certificate(q, k))
    return certified_value(std::move(exact), *certificate);
  const long double magnitude = detail::magnitude_bounds(exact).upper;
  return bounded_value(std::move(exact), (k.rounding_unit * magnitude + k.underflow_allowance) * detail::kBoundSlack,
                       magnitude);
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::poisoned_value(FastRational exact) {
  FloatBound result;
  result.exact_ = std::move(exact);
  result.term_count_ = 1;
  result.certified_ = false;
  result.poisoned_ = true;
  return result;
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::certified_value(FastRational exact, const detail::DyadicCertificate& certificate) {
  FloatBound result;
  result.exact_ = std::move(exact);
  result.certificate_ = certificate;
  if (!result.exact_.is_zero()) {
    result.term_count_ = 1;
    result.term_magnitude_ = detail::magnitude_bounds(result.exact_).upper;
  }
  return result;
}

template <FloatFormatKind F>
bool FloatBound<F>::is_pure_power_of_two(const Closure& c) const {
  return c.certified && term_count_ <= 1 && detail::power_of_two_exponent(exact_).has_value();
}

template <FloatFormatKind F>
long double FloatBound<F>::distributable_term_count(const Closure& c) const {
  return c.certified ? std::max(term_count_, 1.0L) : 1.0L;
}

template <FloatFormatKind F>
long double FloatBound<F>::distributable_magnitude(const Closure& c, const detail::MagnitudeBounds& m) const {
  return c.certified ? std::max(term_magnitude_, m.upper) : m.upper + c.error;
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::bounded_value(FastRational exact, long double error, long double magnitude_upper) {
  // A float result within `error` of a value this large may round past max finite: the run would overflow.
  // Written so that a NaN bound poisons too.
  if (!(magnitude_upper + error <= detail::kFloatBoundConstants<F>.max_finite)) return poisoned_value(std::move(exact));
  FloatBound result;
  result.exact_ = std::move(exact);
  result.term_count_ = 1;
  result.term_magnitude_ = magnitude_upper + error;
  result.term_error_ = error;
  result.certified_ = false;
  return result;
}

template <FloatFormatKind F>
typename FloatBound<F>::Closure FloatBound<F>::closure() const {
  constexpr const detail::FloatBoundConstants& k = detail::kFloatBoundConstants<F>;
  if (poisoned_) return {0.0L, false, true};
  if (term_count_ <= 1) return {certified_ ? 0.0L : term_error_, certified_, false};
  // Every partial sum, in any order and any tree, is a multiple of 2^g below 2^(g + p): no addition rounds.
  if (certified_ && detail::certificate_holds(certificate_, k)) return {0.0L, true, false};
  const long double addition_count = term_count_ - 1;
  const long double rounding =
      detail::rounding_gamma(addition_count, k) * term_magnitude_ + addition_count * k.underflow_allowance;
  const long double error = (term_error_ + rounding) * detail::kBoundSlack;
  // A partial sum is at most M (1 + gamma) <= M + error; past max finite the run may overflow. NaN poisons too.
  if (!(term_magnitude_ + error <= k.max_finite)) return {0.0L, false, true};
  return {error, false, false};
}

template <FloatFormatKind F>
std::optional<long double> FloatBound<F>::error() const {
  const Closure c = closure();
  if (c.poisoned) return std::nullopt;
  return c.error;
}

template <FloatFormatKind F>
FloatBound<F>& FloatBound<F>::operator+=(const FloatBound& other) {
  // Each field reads other's before writing its own, so x += x is right too.
  exact_ += other.exact_;
  term_count_ += other.term_count_;
  term_magnitude_ += other.term_magnitude_;
  term_error_ += other.term_error_;
  if (certified_ && other.certified_) certificate_ = detail::sum_certificate(certificate_, other.certificate_);
  certified_ = certified_ && other.certified_;
  poisoned_ = poisoned_ || other.poisoned_;
  return *this;
}

template <FloatFormatKind F>
FloatBound<F>& FloatBound<F>::operator-=(const FloatBound& other) {
  exact_ -= other.exact_;
  term_count_ += other.term_count_;
  term_magnitude_ += other.term_magnitude_;
  term_error_ += other.term_error_;
  if (certified_ && other.certified_) certificate_ = detail::sum_certificate(certificate_, other.certificate_);
  certified_ = certified_ && other.certified_;
  poisoned_ = poisoned_ || other.poisoned_;
  return *this;
}

template <FloatFormatKind F>
FloatBound<F>& FloatBound<F>::negate() {
  // Negation is exact in every format, and the certificate is symmetric.
  exact_ = -exact_;
  return *this;
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::multiply(const FloatBound& a, const FloatBound& b) {
  constexpr const detail::FloatBoundConstants& k = detail::kFloatBoundConstants<F>;
  FastRational exact = a.exact_ * b.exact_;
  const Closure ca = a.closure(), cb = b.closure();
  if (ca.poisoned || cb.poisoned) return poisoned_value(std::move(exact));
  if (ca.certified && cb.certified) {
    const detail::DyadicCertificate certificate = detail::product_certificate(a.certificate_, b.certificate_);
    if (detail::certificate_holds(certificate, k))
      return certified_value(std::move(exact), certificate);
  }
  const detail::MagnitudeBounds ma = detail::magnitude_bounds(a.exact_), mb = detail::magnitude_bounds(b.exact_);
  long double error;
  if (b.is_pure_power_of_two(cb)) {
    // Scaling by a power of two that is one term is exact, in the formula and in any rewrite that distributes it
    // over the other operand's terms, unless a result is subnormal (then off by at most eta each).
    error = (mb.upper * ca.error + a.distributable_term_count(ca) * k.underflow_allowance) * detail::kBoundSlack;
  } else if (a.is_pure_power_of_two(ca)) {
    error = (ma.upper * cb.error + b.distributable_term_count(cb) * k.underflow_allowance) * detail::kBoundSlack;
  } else {
    // The product as written rounds once; a target may instead distribute either operand over the other's terms.
    // For an operand with a bound of its own that costs nothing extra (k_r covers it, see float_bound.h); over a
    // certified sum of N terms of total magnitude M it rounds N products and N - 1 additions, relative to M.
    const long double whole_a = ma.upper + ca.error, whole_b = mb.upper + cb.error;
    const auto rounding = [&](long double count, long double magnitude) {
      return k.rounding_unit * magnitude + detail::rounding_gamma(count - 1, k) * (1 + k.rounding_unit) * magnitude +
             count * k.underflow_allowance;
    };
    const long double over_a = rounding(a.distributable_term_count(ca), a.distributable_magnitude(ca, ma) * whole_b);
    const long double over_b = rounding(b.distributable_term_count(cb), b.distributable_magnitude(cb, mb) * whole_a);
    error = (ma.upper * cb.error + mb.upper * ca.error + ca.error * cb.error + std::max(over_a, over_b)) *
            detail::kBoundSlack;
  }
  return bounded_value(std::move(exact), error, ma.upper * mb.upper);
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::divide(const FloatBound& a, const FloatBound& b) {
  constexpr const detail::FloatBoundConstants& k = detail::kFloatBoundConstants<F>;
  FastRational exact = a.exact_ / b.exact_;  // throws std::domain_error for an exact zero divisor
  const Closure ca = a.closure(), cb = b.closure();
  if (ca.poisoned || cb.poisoned) return poisoned_value(std::move(exact));
  const detail::MagnitudeBounds ma = detail::magnitude_bounds(a.exact_), mb = detail::magnitude_bounds(b.exact_);
  const long double count = a.distributable_term_count(ca);
  if (cb.certified) {
    // By an exact 2^e whose reciprocal 2^-e is representable (a target may multiply by it): exact scaling. The
    // divisor is evaluated exactly before it divides anything, so its own terms do not matter here.
    const std::optional<int> e = detail::power_of_two_exponent(b.exact_);
    if (e && -*e >= k.subnormal_grain_exponent && -*e <= k.exponent_max) {
      if (ca.certified) {
        const detail::DyadicCertificate certificate = detail::product_certificate(
            a.certificate_, detail::leaf_certificate(-*e, detail::float_bound_pow2(-*e)));
        if (detail::certificate_holds(certificate, k)) return certified_value(std::move(exact), certificate);
      }
      const long double magnitude = detail::magnitude_bounds(exact).upper;
      const long double error = (ca.error / mb.lower + count * k.underflow_allowance) * detail::kBoundSlack;
      return bounded_value(std::move(exact), error, magnitude);
    }
  }
  // The float divisor lies in [|y| - E_y, |y| + E_y]; if that reaches 0 the quotient is unbounded.
  const long double divisor_lower = mb.lower - cb.error;
  if (!(divisor_lower > 0)) return poisoned_value(std::move(exact));
  const long double quotient = detail::magnitude_bounds(exact).upper;
  // x^/y^ - x/y = ((x^ - x) y - x (y^ - y)) / (y^ y), so |.| <= (E_x + |x/y| E_y) / (|y| - E_y).
  const long double propagated = (ca.error + quotient * cb.error) / divisor_lower;
  // Rounded as the distributed form when the dividend is certified (each of its terms divided, then summed).
  const long double magnitude =
      ca.certified ? std::max(a.distributable_magnitude(ca, ma) / divisor_lower, quotient) + propagated
                   : quotient + propagated;
  const long double error = (propagated + k.rounding_unit * magnitude +
                             detail::rounding_gamma(count - 1, k) * (1 + k.rounding_unit) * magnitude +
                             count * k.underflow_allowance) *
                            detail::kBoundSlack;
  return bounded_value(std::move(exact), error, quotient);
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::sqrt() const {
  constexpr const detail::FloatBoundConstants& k = detail::kFloatBoundConstants<F>;
  ACCUMCHECK_ASSERT_MSG(exact_.sign() >= 0, "FloatBound::sqrt: the exact argument is negative");
  FastRational root = ScalarTraits<FastRational>::sqrt(exact_);
  const Closure c = closure();
  if (c.poisoned) return poisoned_value(std::move(root));
  const bool root_is_exact = root * root == exact_;
  // IEEE sqrt is correctly rounded: an exact argument with a representable root gives that root.
  if (c.certified && root_is_exact) {
    if (root.is_zero()) return FloatBound();
    if (const auto certificate = detail::rational_leaf_certificate(root.to_rational(), k))
      return certified_value(std::move(root), *certificate);
  }
  const detail::MagnitudeBounds m = detail::magnitude_bounds(exact_);
  // |sqrt(x^) - sqrt(x)| <= sqrt(|x^ - x|), and = |x^ - x| / (sqrt(x^) + sqrt(x)) with x^ >= max(x - E, 0).
  long double propagated = 0;
  if (c.error > 0) {
    const long double denominator = std::sqrt(m.lower) + std::sqrt(std::max(m.lower - c.error, 0.0L));
    propagated = std::min(std::sqrt(c.error), c.error / denominator);  // x / 0 is +inf: the min takes sqrt(E)
  }
  const long double error = (propagated + k.rounding_unit * std::sqrt(m.upper + c.error) + k.underflow_allowance +
                             (root_is_exact ? 0.0L : detail::kExactRootFloor)) *
                            detail::kBoundSlack;
  const long double magnitude = detail::magnitude_bounds(root).upper;
  return bounded_value(std::move(root), error, magnitude);
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::round_update() const {
  FastRational value = ScalarTraits<FastRational>::round_update(exact_);
  if (value == exact_) return *this;  // already on the grid: nothing moved
  const Closure c = closure();
  if (c.poisoned) return poisoned_value(std::move(value));
  const long double error = (c.error + detail::kExactUpdateTruncation) * detail::kBoundSlack;
  const long double magnitude = detail::magnitude_bounds(exact_).upper;  // |trunc(x)| <= |x|
  return bounded_value(std::move(value), error, magnitude);
}

template <FloatFormatKind F>
FloatBound<F> FloatBound<F>::abs() const {
  const Closure c = closure();
  FastRational value = models::abs(exact_);
  if (c.poisoned) return poisoned_value(std::move(value));
  if (c.certified) return certified_value(std::move(value), certificate_);
  const long double magnitude = detail::magnitude_bounds(value).upper;
  return bounded_value(std::move(value), c.error, magnitude);
}

template <FloatFormatKind F>
int FloatBound<F>::compare(const FloatBound& a, const FloatBound& b) {
  const Closure ca = a.closure(), cb = b.closure();
  if (ca.poisoned || cb.poisoned)
    detail::throw_ambiguous_comparison(ScalarTraits<FloatBound>::name, a.exact_, b.exact_,
                                       std::numeric_limits<long double>::infinity(), true);
  const std::strong_ordering order = a.exact_ <=> b.exact_;
  const long double bound = ca.error + cb.error;
  // Float values within E_a and E_b of the exact ones keep the exact order iff the gap exceeds E_a + E_b.
  if (bound > 0 && detail::magnitude_bounds(a.exact_ - b.exact_).lower <= bound * detail::kBoundSlack)
    detail::throw_ambiguous_comparison(ScalarTraits<FloatBound>::name, a.exact_, b.exact_, bound, false);
  return order < 0 ? -1 : (order > 0 ? 1 : 0);
}

template <FloatFormatKind F>
std::optional<Rational> error_bound(const FloatBound<F>& x) {
  const std::optional<long double> error = x.error();
  if (!error || !std::isfinite(*error)) return std::nullopt;
  return detail::rational_from_long_double(*error);
}

template <FloatFormatKind F>
Matrix<FloatBound<F>> to_float_bound(const Matrix<Rational>& m) {
  return convert_matrix<FloatBound<F>>(m, [](const Rational& q) { return FloatBound<F>::from_rational(q); });
}

template <FloatFormatKind F>
Parameters<FloatBound<F>> to_float_bound(const Parameters<Rational>& params) {
  Parameters<FloatBound<F>> out;
  out.tensors.reserve(params.tensors.size());
  for (const auto& t : params.tensors) out.tensors.push_back(to_float_bound<F>(t));
  return out;
}

template <FloatFormatKind F>
Gradient<FloatBound<F>> to_float_bound(const Gradient<Rational>& grad) {
  Gradient<FloatBound<F>> out;
  out.tensors.reserve(grad.tensors.size());
  for (const auto& t : grad.tensors) out.tensors.push_back(to_float_bound<F>(t));
  out.present = grad.present;
  return out;
}

template <FloatFormatKind F>
Sequence<FloatBound<F>> to_float_bound(const Sequence<Rational>& seq) {
  return {to_float_bound<F>(seq.features), seq.token_ids, seq.expert_index, to_float_bound<F>(seq.targets),
          seq.loss_mask};
}

}  // namespace accumcheck::models
