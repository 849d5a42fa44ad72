// Rational: an exact rational number on GMP (mpq), the reference exact scalar of accumcheck.
//
// It wraps GMP instead of exposing mpq_class, because gmpxx's expression templates do not mix with Eigen's own
// (Eigen expects `a * b` to have the scalar type). Every operation returns a canonical Rational (lowest terms,
// positive denominator), so equality is structural and exact. Its arithmetic is slow and obvious on purpose:
// every + - * / is GMP's mpq operation. The fast exact path is FastRational, which is checked against this type.
//
// Storage (detail::InlineOrMpq, shared with FastRational): a value whose canonical numerator and denominator both
// fit an int64 is held as those two words, any other as one read-only heap block (detail::PackedMpq: an mpq's header
// and its limbs). The representation is canonical (inline exactly when it fits), so equality of two inline values
// is equality of their words. Why: scenarios, results and reports hold hundreds of small values per trial, and an
// mpq costs two heap blocks to create, copy and free (65% of a campaign's allocations were GMP's). Arithmetic reads
// an inline operand through a read-only mpq view of its words (mpz_roinit_n), so it allocates only the result.
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <gmpxx.h>

#include "models/inline_or_mpq.h"

namespace accumcheck::models {

class FastRational;

class Rational : private detail::InlineOrMpq {
 public:
  Rational() noexcept = default;
  // Implicit from integers so that Eigen's Scalar(0) and Scalar(1) work.
  Rational(int value) noexcept : InlineOrMpq(value, 1) {}        // NOLINT(google-explicit-constructor)
  Rational(long value) noexcept : InlineOrMpq(value, 1) {}       // NOLINT(google-explicit-constructor)
  Rational(long long value) noexcept : InlineOrMpq(value, 1) {}  // NOLINT(google-explicit-constructor)
  // numerator / denominator, canonicalised; denominator must not be zero.
  Rational(long long numerator, long long denominator);
  explicit Rational(const mpq_class& value);  // canonicalised
  explicit Rational(const mpz_class& value);
  // Takes a value already in lowest terms with a positive denominator (as FastRational and GMP's own
  // operations leave theirs) without canonicalising it again.
  // Both copy the value (a promoted one is packed, detail::PackedMpq).
  static Rational from_canonical(mpq_class&& value);
  static Rational from_canonical(mpq_srcptr value);
  static Rational from_canonical(std::int64_t numerator, std::int64_t denominator) noexcept {
    return Rational(CanonicalTag{}, numerator, denominator);
  }
  // The exact value of a finite double (every finite double is a dyadic rational). Non-finite: throws.
  static Rational from_double(double value);
  // Parses "n", "-n/d" or a decimal "1.25" exactly. Throws std::invalid_argument naming the text.
  static Rational parse(std::string_view text);

  // Copies share a promoted value's read-only block; a moved-from value is zero (detail::InlineOrMpq).
  Rational(const Rational&) = default;
  Rational(Rational&&) noexcept = default;
  Rational& operator=(const Rational&) = default;
  Rational& operator=(Rational&&) noexcept = default;
  ~Rational() = default;

  // The value as a GMP rational (a copy).
  mpq_class mpq() const;
  mpz_class numerator() const;
  mpz_class denominator() const;
  // True, with the canonical numerator and denominator, when both fit an int64.
  bool fits_int64(std::int64_t& numerator, std::int64_t& denominator) const noexcept {
    if (!is_inline()) return false;
    numerator = num_;
    denominator = den_;
    return true;
  }
  // The nearest double, ties to even (mpq_get_d alone truncates).
  double to_double() const;
  // "n" or "n/d".
  std::string to_string() const;

  int sign() const noexcept { return is_inline() ? (num_ > 0) - (num_ < 0) : mpq_sgn(promoted()); }
  bool is_zero() const noexcept { return is_inline() && num_ == 0; }  // zero always fits
  bool is_integer() const noexcept;

  Rational& operator+=(const Rational& other);
  Rational& operator-=(const Rational& other);
  Rational& operator*=(const Rational& other);
  Rational& operator/=(const Rational& other);  // throws std::domain_error on division by zero

  friend Rational operator+(Rational a, const Rational& b) { return a += b; }
  friend Rational operator-(Rational a, const Rational& b) { return a -= b; }
  friend Rational operator*(Rational a, const Rational& b) { return a *= b; }
  friend Rational operator/(Rational a, const Rational& b) { return a /= b; }
  friend Rational operator-(const Rational& a);
  friend Rational operator+(const Rational& a) { return a; }

  friend bool operator==(const Rational& a, const Rational& b) noexcept { return a.same_value(b); }
  // a[i] == b[i] for every i < n: one comparison of the storage first (models::matrices_equal's, found by ADL).
  friend bool values_equal(const Rational* a, const Rational* b, std::size_t n) noexcept {
    return InlineOrMpq::same_words(a, b, n) || std::equal(a, a + n, b);
  }
  friend std::strong_ordering operator<=>(const Rational& a, const Rational& b) noexcept;

 private:
  // Same storage, same canonical form: a conversion either way shares a promoted value's block
  // (FastRational::from_promoted, FastRational::promoted_to_rational).
  friend class FastRational;
  class View;  // an operand as a read-only mpq (rational.cpp)
  struct CanonicalTag {};
  Rational(CanonicalTag, std::int64_t numerator, std::int64_t denominator) noexcept : InlineOrMpq(numerator, denominator) {}
};

// The most bits an exact result's numerator or denominator may take. Exact SGD on a nonlinear model multiplies
// the parameters' digits at every step (a step's gradient is a polynomial of degree 2 or 3 in them), so a deep
// run would otherwise take minutes to hours for one trial, beyond any time budget. In 5,000 trials of the default
// generator (three steps at most, seed 1) no check reached it. Checked on every GMP result of Rational and FastRational
// arithmetic; past it the operation throws ExactSizeExceeded, and the property that needed it cannot run.
inline constexpr std::size_t kExactBitsMax = 4096;

class ExactSizeExceeded : public std::range_error {
 public:
  using std::range_error::range_error;
};

// Throws ExactSizeExceeded when q's numerator or denominator takes more than kExactBitsMax bits. Counted in
// limbs, which is the same test (kExactBitsMax is a whole number of limbs) without mpz_sizeinbase's call.
static_assert(kExactBitsMax % GMP_NUMB_BITS == 0);
inline void check_exact_size(mpq_srcptr q) {
  constexpr std::size_t kLimbsMax = kExactBitsMax / GMP_NUMB_BITS;
  if (mpz_size(mpq_numref(q)) > kLimbsMax || mpz_size(mpq_denref(q)) > kLimbsMax)
    throw ExactSizeExceeded("an exact value took more than " + std::to_string(kExactBitsMax) +
                            " bits (exact arithmetic's limit): its digits multiplied step after step");
}

// Writes to_string(): for test and RapidCheck output (and Eigen's printing).
std::ostream& operator<<(std::ostream& out, const Rational& value);

Rational abs(const Rational& value);
// 2^exponent exactly (exponent may be negative).
Rational pow2(int exponent);

// The documented square root of the exact path: sqrt(x) truncated toward zero to `fraction_bits` binary
// digits, i.e. floor(sqrt(x) * 2^b) / 2^b, unless sqrt(x) is itself rational (numerator and denominator are
// perfect squares), in which case it is exact. It is a pure function of the exact input, so two code paths
// fed the same rational get the same root. Requires x >= 0 (throws std::domain_error otherwise).
Rational sqrt_rounded(const Rational& x, int fraction_bits);

// The documented rounding of Adam's update on the exact path (docs/oracle.md, "The optimizer step"): x truncated
// toward zero to `fraction_bits` binary digits, trunc(x * 2^b) / 2^b. A value that is already a multiple of 2^-b
// is returned unchanged. Pure and odd (truncate(-x) = -truncate(x)), so two code paths fed the same rational get
// the same result. Throws std::domain_error for a precision outside [0, 4096].
Rational truncate_to_bits(const Rational& x, int fraction_bits);

namespace detail {
// truncate_to_bits' general path, on GMP's values in place: out = trunc(x * 2^b) / 2^b, canonical. FastRational
// calls it on a promoted value without copying it into a Rational. The caller checks the precision.
void truncate_mpq_to_bits(mpq_class& out, mpq_srcptr x, int fraction_bits);
}  // namespace detail

}  // namespace accumcheck::models
