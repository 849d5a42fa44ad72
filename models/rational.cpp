// Rational on mpq_class: canonical after every operation.
#include "models/rational.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <stdexcept>

namespace accumcheck::models {

// Through mpz_set_si, not text: long is 64 bits wherever this builds (checked), and the text round trip was 2 % of a
// campaign's instructions.
static_assert(sizeof(long) == sizeof(long long), "Rational(long long, long long) passes long long through mpz_set_si");
Rational::Rational(long long numerator, long long denominator)
    : value_(mpz_class(static_cast<long>(numerator)), mpz_class(static_cast<long>(denominator))) {
  if (denominator == 0) throw std::domain_error("Rational: zero denominator");
  value_.canonicalize();
}

Rational::Rational(const mpq_class& value) : value_(value) { value_.canonicalize(); }
Rational::Rational(const mpz_class& value) : value_(value) {}

Rational Rational::from_double(double value) {
  if (!std::isfinite(value)) throw std::domain_error("Rational::from_double: value is not finite");
  mpq_class q;
  mpq_set_d(q.get_mpq_t(), value);  // exact: a double is a dyadic rational
  return Rational(q);
}

Rational Rational::parse(std::string_view text) {
  const std::string s(text);
  auto fail = [&]() -> Rational {
    throw std::invalid_argument("cannot parse '" + s + "' as a rational (expected n, n/d or a decimal)");
  };
  if (s.empty()) return fail();
  const auto dot = s.find('.');
  if (dot != std::string::npos) {
    // Decimal: digits before and after the point, exact as integer / 10^k.
    std::string digits = s.substr(0, dot) + s.substr(dot + 1);
    const std::size_t frac = s.size() - dot - 1;
    std::size_t start = (digits[0] == '-' || digits[0] == '+') ? 1 : 0;
    if (digits.size() == start) return fail();
    for (std::size_t i = start; i < digits.size(); ++i)
      if (digits[i] < '0' || digits[i] > '9') return fail();
    if (digits[0] == '+') digits.erase(0, 1);
    mpz_class num(digits, 10);
    mpz_class den;
    mpz_ui_pow_ui(den.get_mpz_t(), 10, frac);
    return Rational(mpq_class(num, den));
  }
  mpq_class q;
  const std::string body = (s[0] == '+') ? s.substr(1) : s;
  if (body.empty() || q.set_str(body, 10) != 0) return fail();
  if (q.get_den() == 0) return fail();
  return Rational(q);
}

double Rational::to_double() const {
  // mpq_get_d truncates toward zero; round to nearest, ties to even, by comparing exact distances to the
  // truncated value and its neighbour away from zero.
  const double t = value_.get_d();
  const double up = std::nextafter(t, sgn(value_) >= 0 ? INFINITY : -INFINITY);
  if (!std::isfinite(up)) return t;
  mpq_class dt, du;
  mpq_set_d(dt.get_mpq_t(), t);
  mpq_set_d(du.get_mpq_t(), up);
  const mpq_class et = abs(value_ - dt), eu = abs(value_ - du);
  if (eu < et) return up;
  if (et < eu) return t;
  // A tie: the one whose last significand bit is 0.
  return (std::bit_cast<std::uint64_t>(t) & 1U) == 0 ? t : up;
}

std::string Rational::to_string() const { return value_.get_str(10); }

Rational& Rational::operator+=(const Rational& other) {
  value_ += other.value_;
  return *this;
}
Rational& Rational::operator-=(const Rational& other) {
  value_ -= other.value_;
  return *this;
}
Rational& Rational::operator*=(const Rational& other) {
  value_ *= other.value_;
  return *this;
}
Rational& Rational::operator/=(const Rational& other) {
  if (other.is_zero()) throw std::domain_error("Rational: division by zero");
  value_ /= other.value_;
  return *this;
}

std::ostream& operator<<(std::ostream& out, const Rational& value) { return out << value.to_string(); }

Rational abs(const Rational& value) { return Rational(mpq_class(abs(value.mpq()))); }

Rational pow2(int exponent) {
  mpz_class p;
  mpz_ui_pow_ui(p.get_mpz_t(), 2, static_cast<unsigned long>(exponent < 0 ? -exponent : exponent));
  return exponent >= 0 ? Rational(p) : Rational(mpq_class(mpz_class(1), p));
}

Rational sqrt_rounded(const Rational& x, int fraction_bits) {
  if (x.sign() < 0) throw std::domain_error("sqrt_rounded: negative argument " + x.to_string());
  if (fraction_bits < 0 || fraction_bits > 4096) throw std::domain_error("sqrt_rounded: bad precision");
  const mpz_class num = x.numerator(), den = x.denominator();
  if (mpz_perfect_square_p(num.get_mpz_t()) && mpz_perfect_square_p(den.get_mpz_t())) {
    mpz_class rn, rd;
    mpz_sqrt(rn.get_mpz_t(), num.get_mpz_t());
    mpz_sqrt(rd.get_mpz_t(), den.get_mpz_t());
    return Rational(mpq_class(rn, rd));
  }
  // floor(sqrt(x) * 2^b) = floor(sqrt(floor(x * 4^b))), since floor(sqrt(floor(y))) = floor(sqrt(y)) for y >= 0.
  mpz_class scaled = num << (2 * fraction_bits);
  mpz_fdiv_q(scaled.get_mpz_t(), scaled.get_mpz_t(), den.get_mpz_t());
  mpz_class root;
  mpz_sqrt(root.get_mpz_t(), scaled.get_mpz_t());
  mpz_class one_shifted = mpz_class(1) << fraction_bits;
  return Rational(mpq_class(root, one_shifted));
}

}  // namespace accumcheck::models
