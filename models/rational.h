// Rational: an exact rational number on GMP (mpq), the reference exact scalar of accumcheck.
//
// It wraps mpq_class by value instead of exposing it, because gmpxx's expression templates do not mix with
// Eigen's own (Eigen expects `a * b` to have the scalar type). Every operation returns a canonical Rational
// (lowest terms, positive denominator), so equality is structural and exact. It is slow and obvious on
// purpose: the fast exact path is FastRational, which is checked against this type.
#pragma once

#include <compare>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>

#include <gmpxx.h>

namespace accumcheck::models {

class Rational {
 public:
  Rational() = default;
  // Implicit from integers so that Eigen's Scalar(0) and Scalar(1) work.
  Rational(int value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  Rational(long value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  Rational(long long value) : value_(static_cast<long>(value)) {}  // NOLINT (LP64: long is 64 bits)
  // numerator / denominator, canonicalised; denominator must not be zero.
  Rational(long long numerator, long long denominator);
  explicit Rational(const mpq_class& value);
  explicit Rational(const mpz_class& value);
  // Takes a value already in lowest terms with a positive denominator (as FastRational and GMP's own
  // operations leave theirs) without copying it or canonicalising it again.
  static Rational from_canonical(mpq_class&& value) {
    Rational out;
    out.value_ = std::move(value);
    return out;
  }
  // The exact value of a finite double (every finite double is a dyadic rational). Non-finite: throws.
  static Rational from_double(double value);
  // Parses "n", "-n/d" or a decimal "1.25" exactly. Throws std::invalid_argument naming the text.
  static Rational parse(std::string_view text);

  const mpq_class& mpq() const { return value_; }
  mpz_class numerator() const { return value_.get_num(); }
  mpz_class denominator() const { return value_.get_den(); }
  // The nearest double, ties to even (mpq_get_d alone truncates).
  double to_double() const;
  // "n" or "n/d".
  std::string to_string() const;

  int sign() const { return sgn(value_); }
  bool is_zero() const { return sgn(value_) == 0; }
  bool is_integer() const { return value_.get_den() == 1; }

  Rational& operator+=(const Rational& other);
  Rational& operator-=(const Rational& other);
  Rational& operator*=(const Rational& other);
  Rational& operator/=(const Rational& other);  // throws std::domain_error on division by zero

  friend Rational operator+(Rational a, const Rational& b) { return a += b; }
  friend Rational operator-(Rational a, const Rational& b) { return a -= b; }
  friend Rational operator*(Rational a, const Rational& b) { return a *= b; }
  friend Rational operator/(Rational a, const Rational& b) { return a /= b; }
  friend Rational operator-(const Rational& a) { return Rational(mpq_class(-a.value_)); }
  friend Rational operator+(const Rational& a) { return a; }

  friend bool operator==(const Rational& a, const Rational& b) { return a.value_ == b.value_; }
  friend std::strong_ordering operator<=>(const Rational& a, const Rational& b) {
    const int c = cmp(a.value_, b.value_);
    return c < 0 ? std::strong_ordering::less
                 : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
  }

 private:
  mpq_class value_;
};

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

}  // namespace accumcheck::models
