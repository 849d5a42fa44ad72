// FastRational: the exact scalar of the fuzzer's hot loop; same values and results as Rational, but most of them
// without touching the heap.
//
// Method: a value whose canonical form (lowest terms, denominator > 0) has an int64 numerator and an int64
// denominator is stored inline, as those two words. Any other value holds a read-only heap mpq packed with its
// limbs in one block ("promoted", detail::PackedMpq). Each operation on two inline operands runs in __int128
// with gcd reduction and fast paths for integers and for equal denominators. It leaves for GMP only when the
// result does not fit, and a GMP result that fits is demoted again. The representation is therefore canonical:
// a value is inline exactly when it fits, so two inline values are equal iff their int64 pairs are equal, and an
// inline value never equals a promoted one.
// The __int128 paths are in fast_rational-inl.h, the rare GMP paths in fast_rational.cpp. Rational is the
// reference: properties/models/fast_rational_test.cpp checks every operation against it.
//
// Differences from Rational: there is no `mpq()` accessor, because an inline value has no mpq to refer to;
// use to_rational(). numerator() and denominator() return mpz_class by value, as Rational's do.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <Eigen/Core>
#include <gmpxx.h>

#include "models/inline_or_mpq.h"
#include "models/rational.h"
#include "models/scalar.h"

namespace accumcheck::models {

namespace detail {
// __extension__ keeps -Wpedantic quiet: __int128 is a GCC/Clang extension, and we rely on it on purpose.
__extension__ using Int128 = __int128;
__extension__ using UInt128 = unsigned __int128;
}  // namespace detail

class FastRational : private detail::InlineOrMpq {
 public:
  FastRational() noexcept = default;
  // Implicit from integers so that Eigen's Scalar(0) and Scalar(1) work, and `x + 1` reads as it should.
  FastRational(int value) noexcept : InlineOrMpq(value, 1) {}         // NOLINT(google-explicit-constructor)
  FastRational(long value) noexcept : InlineOrMpq(value, 1) {}        // NOLINT(google-explicit-constructor)
  FastRational(long long value) noexcept : InlineOrMpq(value, 1) {}   // NOLINT(google-explicit-constructor)
  // Deleted so that `x * 0.5` does not compile as `x * 0` through the int constructor; say from_double.
  FastRational(double) = delete;
  // numerator / denominator, canonicalised; throws std::domain_error when the denominator is zero.
  FastRational(long long numerator, long long denominator);
  // The same value; inline when it fits.
  explicit FastRational(const Rational& value);
  // As Rational::from_double and Rational::parse (and with their exceptions).
  static FastRational from_double(double value);
  static FastRational parse(std::string_view text);

  // Copies share a promoted value's read-only block. A moved-from value is valid but unspecified: an inline
  // source keeps its value (moving two words is copying them), a promoted one is left as zero.
  FastRational(const FastRational&) = default;
  FastRational(FastRational&&) noexcept = default;
  FastRational& operator=(const FastRational&) = default;
  FastRational& operator=(FastRational&&) noexcept = default;
  ~FastRational() = default;

  // True when the value is held as two int64 words; by the canonical invariant, exactly when it fits there.
  using InlineOrMpq::is_inline;

  Rational to_rational() const;
  mpz_class numerator() const;
  mpz_class denominator() const;
  // Nearest double, as Rational::to_double (which it calls unless the quotient of two doubles is exact).
  double to_double() const;
  // "n" or "n/d", the same text as Rational::to_string.
  std::string to_string() const;

  int sign() const noexcept;
  // The exact root of an inline value n/d >= 0 whose n and d are both perfect squares (the case in which
  // sqrt_rounded is exact too), else nothing.
  std::optional<FastRational> exact_square_root() const noexcept;
  // Zero is always inline (it fits), so a promoted value is never zero.
  bool is_zero() const noexcept { return is_inline() && num_ == 0; }
  bool is_integer() const noexcept;
  // truncate_to_bits(to_rational(), b) as a FastRational; a promoted value is truncated on its own mpq, uncopied.
  FastRational truncated_to_bits(int fraction_bits) const;
  // (x / (y + z)).truncated_to_bits(b) without forming y + z or the quotient: trunc(x yd zd 2^b / (xd (yn zd + zn yd)))
  // / 2^b is one integer division, where the sum and the quotient in lowest terms take GMP gcds before the
  // truncation (Adam's update and the clip coefficient are such quotients, on promoted values). Where the unreduced
  // parts could pass the exact size limit, it is (x / (y + z)).truncated_to_bits(b) itself, so that it throws where
  // that does. Throws std::domain_error when y + z is zero.
  static FastRational truncated_quotient(const FastRational& x, const FastRational& y, const FastRational& z,
                                         int fraction_bits);
  // sqrt_rounded(to_rational(), b) as a FastRational, for b in [0, 64] (else, and for a negative value, it is
  // sqrt_rounded itself, with its errors). An inline value's root is taken in GMP's limb functions on the stack,
  // a promoted value's on its own mpq: no copy, and a heap allocation only for a result that does not fit inline.
  FastRational rounded_square_root(int fraction_bits) const;

  // The two words of an inline value, numerator and denominator (> 0, lowest terms), for integer kernels that
  // read many values at once (models/linear_model_exact.h); nothing for a promoted value.
  std::optional<std::pair<std::int64_t, std::int64_t>> inline_parts() const noexcept {
    if (!is_inline()) return std::nullopt;
    return std::pair{num_, den_};
  }
  // n / 2^exponent for exponent >= 0, in lowest terms (trailing zero bits cancelled): inline when it fits.
  static FastRational from_dyadic(detail::Int128 n, int exponent);
  // The held mpq of a promoted value, read in place; nullptr for an inline value (inline_parts has its words).
  mpq_srcptr promoted_value() const noexcept { return is_inline() ? nullptr : promoted(); }
  // q, which must be in lowest terms with a positive denominator (mpq_canonicalize), checked against the exact
  // size limit (ExactSizeExceeded, as every GMP result is): inline when it fits.
  static FastRational from_canonical_mpq(mpq_class&& q);

  FastRational& operator+=(const FastRational& other) { return *this = *this + other; }
  FastRational& operator-=(const FastRational& other) { return *this = *this - other; }
  FastRational& operator*=(const FastRational& other) { return *this = *this * other; }
  FastRational& operator/=(const FastRational& other) { return *this = *this / other; }

  friend FastRational operator+(const FastRational& a, const FastRational& b);
  friend FastRational operator-(const FastRational& a, const FastRational& b);
  friend FastRational operator*(const FastRational& a, const FastRational& b);
  // Throws std::domain_error on division by zero.
  friend FastRational operator/(const FastRational& a, const FastRational& b);
  friend FastRational operator-(const FastRational& a);
  friend FastRational operator+(const FastRational& a) { return a; }

  friend bool operator==(const FastRational& a, const FastRational& b) noexcept;
  friend std::strong_ordering operator<=>(const FastRational& a, const FastRational& b) noexcept;
  // a[i] == b[i] for every i < n: one comparison of the storage first (models::matrices_equal's, found by ADL).
  friend bool values_equal(const FastRational* a, const FastRational* b, std::size_t n) noexcept;
  // Whether this is the value `other` holds, read without converting either: the two types keep one canonical
  // storage (a value that fits is inline in both), so equal words are equal values and an inline value equals only
  // the same words. For comparing the oracle's values with a result's (properties/comparison.h).
  bool equals(const Rational& other) const noexcept;

 private:
  struct InlineTag {};
  // The caller guarantees den > 0 and gcd(|num|, den) == 1.
  FastRational(InlineTag, std::int64_t num, std::int64_t den) noexcept : InlineOrMpq(num, den) {}

  // The value n/d, already in lowest terms with d > 0: inline when it fits, else promoted.
  static FastRational from_canonical(detail::Int128 n, detail::UInt128 d);
  template <bool Subtract>
  static FastRational add_inline(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d);
  static FastRational mul_inline(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d);
  static FastRational div_inline(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d);

  // The GMP paths, out of line in fast_rational.cpp: taken when an operand is promoted or a result does not
  // fit. Each demotes its result when it fits.
  // The canonical value, copied (a promoted result is packed, detail::PackedMpq).
  static FastRational from_mpq(mpq_srcptr value);
  static FastRational promote_canonical(detail::Int128 n, detail::UInt128 d);
  // n / 2^exponent, already in lowest terms (n odd or exponent 0) and too big to be inline.
  static FastRational promote_dyadic(detail::Int128 n, int exponent);
  // trunc(n 2^b / d) / 2^b in lowest terms, for truncated_quotient's unreduced n and d != 0 (n is overwritten).
  static FastRational truncated_dyadic(mpz_ptr n, mpz_srcptr d, mp_bitcnt_t bits);
  // The out-of-line halves of the conversions from and to Rational, for a value that does not fit two words: the
  // two types keep values in the same storage and the same canonical form, so each shares the other's block.
  static FastRational from_promoted(const Rational& value);
  Rational promoted_to_rational() const;
  using MpqOperation = void (*)(mpq_ptr, mpq_srcptr, mpq_srcptr);
  static FastRational slow_binary(const FastRational& a, const FastRational& b, MpqOperation operation);
  static FastRational slow_add(const FastRational& a, const FastRational& b);
  static FastRational slow_sub(const FastRational& a, const FastRational& b);
  static FastRational slow_mul(const FastRational& a, const FastRational& b);
  static FastRational slow_div(const FastRational& a, const FastRational& b);
  static FastRational slow_negate(const FastRational& a);
  static std::strong_ordering slow_compare(const FastRational& a, const FastRational& b) noexcept;
  [[noreturn]] static void throw_division_by_zero();
  // The value as an mpq: a copy for an inline value, the held one for a promoted value.
  void to_mpq(mpq_class& out) const;
};

FastRational abs(const FastRational& value);

// The exact sum of the values' squares, equal to adding v * v one value at a time, in one sum instead of a
// reduced fraction per addition: in __int128 over one power-of-two denominator where every value is an inline
// dyadic and the sum fits, else in GMP integers over the values' least common denominator D (sum (v D)^2, then
// one reduction by D^2). Values past 512 bits take the loop itself, so that a sum near the exact size limit
// throws as the loop would. A gradient's global norm is this sum (models/clipping.h, add_squares).
FastRational sum_of_squares(std::span<const FastRational> values);

// (sum of *terms) / divisor, exactly, for divisor > 0: equal to adding the terms one at a time, in any order, and
// dividing. Inline terms take those operations; with a promoted one, the terms are summed in GMP integers over
// their least common denominator and reduced once (terms past 512 bits take the operations, as above). The
// data-parallel average over ranks is this (sim/rank_gradients.h).
FastRational sum_divided_by(std::span<const FastRational* const> terms, std::int64_t divisor);

template <>
struct ScalarTraits<FastRational> {
  static constexpr bool exact = true;
  static constexpr bool checked = true;
  static constexpr std::string_view name = "fast-rational";
  static FastRational from_rational(const Rational& q) { return FastRational(q); }
  static Rational to_rational(const FastRational& x) { return x.to_rational(); }
  // The same root as ScalarTraits<Rational>::sqrt, so the two exact types agree bit for bit.
  // An inline perfect square (Adam's first step always takes the root of one: v_hat = g^2) without GMP.
  static FastRational sqrt(const FastRational& x) {
    return x.rounded_square_root(kExactSqrtFractionBits);
  }
  // The same rounding as ScalarTraits<Rational>::round_update.
  static FastRational round_update(const FastRational& x) {
    return x.truncated_to_bits(kExactUpdateFractionBits);
  }
  // round_update(x / (y + z)), the same value (models::round_update_quotient).
  static FastRational round_update_quotient(const FastRational& x, const FastRational& y, const FastRational& z) {
    return FastRational::truncated_quotient(x, y, z, kExactUpdateFractionBits);
  }
  static bool is_finite(const FastRational&) { return true; }
};

}  // namespace accumcheck::models

// FastRational as an Eigen scalar, as Rational in scalar.h; cheaper costs, since the common case is inline.
namespace Eigen {
template <>
struct NumTraits<accumcheck::models::FastRational> : GenericNumTraits<accumcheck::models::FastRational> {
  using Real = accumcheck::models::FastRational;
  using NonInteger = accumcheck::models::FastRational;
  using Nested = accumcheck::models::FastRational;
  using Literal = accumcheck::models::FastRational;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 2,
    AddCost = 8,
    MulCost = 8
  };
  static inline int digits10() { return 0; }
  static inline Real epsilon() { return Real(0); }
  static inline Real dummy_precision() { return Real(0); }
};
}  // namespace Eigen

#include "models/fast_rational-inl.h"
