// Rational: canonical after every operation; arithmetic in GMP's mpq, small values stored inline (rational.h).
#include "models/rational.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <stdexcept>

namespace accumcheck::models {

static_assert(sizeof(long) == sizeof(std::int64_t), "GMP's signed long must be int64 (LP64)");
static_assert(GMP_LIMB_BITS == 64, "an inline word is read as one 64-bit limb");

using detail::magnitude;

// An operand as a read-only mpq: the promoted value itself, or the inline words as one-limb integers
// (mpz_roinit_n: no allocation; GMP must not write to it, and it is only ever passed as a source).
class Rational::View {
 public:
  explicit View(const Rational& r) noexcept {
    if (!r.is_inline()) {
      source_ = r.promoted();
      return;
    }
    num_limb_ = magnitude(r.num_);
    den_limb_ = static_cast<mp_limb_t>(r.den_);
    mpz_roinit_n(mpq_numref(view_), &num_limb_, r.num_ == 0 ? 0 : (r.num_ < 0 ? -1 : 1));
    mpz_roinit_n(mpq_denref(view_), &den_limb_, 1);
    source_ = view_;
  }
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  mpq_srcptr get() const noexcept { return source_; }

 private:
  mp_limb_t num_limb_ = 0, den_limb_ = 1;
  mpq_t view_;
  mpq_srcptr source_ = nullptr;
};

Rational Rational::from_canonical(mpq_class&& value) { return from_canonical(value.get_mpq_t()); }

Rational Rational::from_canonical(mpq_srcptr value) {
  Rational out;
  out.assign_canonical(value);
  return out;
}

Rational::Rational(long long numerator, long long denominator) {
  if (denominator == 0) throw std::domain_error("Rational: zero denominator");
  constexpr long long kMin = std::numeric_limits<long long>::min();
  if (numerator != kMin && denominator != kMin) {
    // The common case in int64: divide out the gcd and move the sign to the numerator.
    const std::uint64_t g = std::gcd(magnitude(numerator), magnitude(denominator));
    const long long sign = denominator < 0 ? -1 : 1;
    num_ = sign * (numerator / static_cast<long long>(g));
    den_ = sign * (denominator / static_cast<long long>(g));
    return;
  }
  mpq_class q(mpz_class(static_cast<long>(numerator)), mpz_class(static_cast<long>(denominator)));
  q.canonicalize();
  *this = from_canonical(std::move(q));
}

Rational::Rational(const mpq_class& value) {
  mpq_class q(value);
  q.canonicalize();
  *this = from_canonical(std::move(q));
}

Rational::Rational(const mpz_class& value) { *this = from_canonical(mpq_class(value)); }

mpq_class Rational::mpq() const {
  if (!is_inline()) return mpq_class(promoted());
  mpq_class q;
  mpz_set_si(q.get_num_mpz_t(), num_);  // canonical already: no canonicalize
  mpz_set_si(q.get_den_mpz_t(), den_);
  return q;
}

mpz_class Rational::numerator() const {
  if (!is_inline()) return mpz_class(mpq_numref(promoted()));
  return mpz_class(static_cast<long>(num_));
}

mpz_class Rational::denominator() const {
  if (!is_inline()) return mpz_class(mpq_denref(promoted()));
  return mpz_class(static_cast<long>(den_));
}

bool Rational::is_integer() const noexcept {
  if (is_inline()) return den_ == 1;
  return mpz_cmp_ui(mpq_denref(promoted()), 1) == 0;
}

std::strong_ordering operator<=>(const Rational& a, const Rational& b) noexcept {
  int c;
  if (a.is_inline() && b.is_inline()) {
    // a/b against c/d with b, d > 0: a*d against c*b, exact in 128 bits.
    __extension__ using Int128 = __int128;
    const Int128 left = static_cast<Int128>(a.num_) * b.den_, right = static_cast<Int128>(b.num_) * a.den_;
    c = (left > right) - (left < right);
  } else {
    const Rational::View va(a), vb(b);
    c = mpq_cmp(va.get(), vb.get());
  }
  return c < 0 ? std::strong_ordering::less : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

Rational operator-(const Rational& a) {
  if (a.is_inline() && a.num_ != std::numeric_limits<std::int64_t>::min())
    return Rational::from_canonical(-a.num_, a.den_);
  const Rational::View v(a);
  mpq_class q;
  mpq_neg(q.get_mpq_t(), v.get());
  return Rational::from_canonical(std::move(q));
}

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
  const mpq_class value = mpq();
  const double t = value.get_d();
  const double up = std::nextafter(t, sgn(value) >= 0 ? INFINITY : -INFINITY);
  if (!std::isfinite(up)) return t;
  mpq_class dt, du;
  mpq_set_d(dt.get_mpq_t(), t);
  mpq_set_d(du.get_mpq_t(), up);
  const mpq_class et = abs(value - dt), eu = abs(value - du);
  if (eu < et) return up;
  if (et < eu) return t;
  // A tie: the one whose last significand bit is 0.
  return (std::bit_cast<std::uint64_t>(t) & 1U) == 0 ? t : up;
}

std::string Rational::to_string() const { return canonical_string(); }

namespace {
// a = op(a, b) in GMP: both read through views, so `a` and `b` may be the same object.
template <void (*Operation)(mpq_ptr, mpq_srcptr, mpq_srcptr)>
mpq_class apply(mpq_srcptr a, mpq_srcptr b) {
  mpq_class result;
  Operation(result.get_mpq_t(), a, b);  // canonical, by GMP's contract
  check_exact_size(result.get_mpq_t());
  return result;
}
}  // namespace

Rational& Rational::operator+=(const Rational& other) {
  const View a(*this), b(other);
  return *this = from_canonical(apply<mpq_add>(a.get(), b.get()));
}
Rational& Rational::operator-=(const Rational& other) {
  const View a(*this), b(other);
  return *this = from_canonical(apply<mpq_sub>(a.get(), b.get()));
}
Rational& Rational::operator*=(const Rational& other) {
  const View a(*this), b(other);
  return *this = from_canonical(apply<mpq_mul>(a.get(), b.get()));
}
Rational& Rational::operator/=(const Rational& other) {
  if (other.is_zero()) throw std::domain_error("Rational: division by zero");
  const View a(*this), b(other);
  return *this = from_canonical(apply<mpq_div>(a.get(), b.get()));
}

std::ostream& operator<<(std::ostream& out, const Rational& value) { return out << value.to_string(); }

Rational abs(const Rational& value) { return value.sign() < 0 ? -value : value; }

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

Rational truncate_to_bits(const Rational& x, int fraction_bits) {
  if (fraction_bits < 0 || fraction_bits > 4096) throw std::domain_error("truncate_to_bits: bad precision");
  std::int64_t num = 0, den = 0;
  if (x.fits_int64(num, den) && fraction_bits <= 64 && num != std::numeric_limits<std::int64_t>::min()) {
    // Canonical, so den > 0: a power of two no finer than 2^-b is already on the grid.
    const auto uden = static_cast<std::uint64_t>(den);
    if ((uden & (uden - 1)) == 0 && std::countr_zero(uden) <= fraction_bits) return x;
    // |num| 2^b < 2^127, and C++ division truncates toward zero. Lowest terms: the denominator 2^b has no factor
    // but 2, so removing the common powers of two is the whole reduction.
    __extension__ using UInt128 = unsigned __int128;
    const auto magnitude = static_cast<std::uint64_t>(num < 0 ? -num : num);
    UInt128 q = (static_cast<UInt128>(magnitude) << fraction_bits) / uden;
    if (q == 0) return Rational(0);
    const auto low = static_cast<std::uint64_t>(q);
    const int trailing = low != 0 ? std::countr_zero(low) : 64 + std::countr_zero(static_cast<std::uint64_t>(q >> 64));
    const int twos = std::min(fraction_bits, trailing);
    q >>= twos;
    const int shift = fraction_bits - twos;
    if (shift <= 62 && q <= static_cast<UInt128>(std::numeric_limits<std::int64_t>::max())) {
      const auto n = static_cast<std::int64_t>(q);
      return Rational::from_canonical(num < 0 ? -n : n, std::int64_t{1} << shift);
    }
    mpq_class value;  // q / 2^shift, in lowest terms already
    mpz_import(mpq_numref(value.get_mpq_t()), 1, -1, sizeof(UInt128), 0, 0, &q);  // one native 128-bit word
    if (num < 0) mpz_neg(mpq_numref(value.get_mpq_t()), mpq_numref(value.get_mpq_t()));
    mpz_mul_2exp(mpq_denref(value.get_mpq_t()), mpq_denref(value.get_mpq_t()), static_cast<mp_bitcnt_t>(shift));
    return Rational::from_canonical(std::move(value));
  }
  mpq_class value;
  detail::truncate_mpq_to_bits(value, x.mpq().get_mpq_t(), fraction_bits);
  return Rational::from_canonical(std::move(value));
}

void detail::truncate_mpq_to_bits(mpq_class& out, mpq_srcptr x, int fraction_bits) {
  const auto bits = static_cast<mp_bitcnt_t>(fraction_bits);
  mpz_ptr num = mpq_numref(out.get_mpq_t());
  mpz_mul_2exp(num, mpq_numref(x), bits);
  mpz_tdiv_q(num, num, mpq_denref(x));
  // Lowest terms without a gcd: 2^b has no factor but 2, so removing the common powers of two is the whole
  // reduction (mpz_scan1 finds a negative value's lowest set bit as its magnitude's).
  const mp_bitcnt_t twos = mpz_sgn(num) == 0 ? bits : std::min<mp_bitcnt_t>(mpz_scan1(num, 0), bits);
  mpz_tdiv_q_2exp(num, num, twos);
  mpz_set_ui(mpq_denref(out.get_mpq_t()), 1);
  mpz_mul_2exp(mpq_denref(out.get_mpq_t()), mpq_denref(out.get_mpq_t()), bits - twos);
}

}  // namespace accumcheck::models
