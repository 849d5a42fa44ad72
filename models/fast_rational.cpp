// FastRational's rare paths: everything that needs GMP. An operation lands here when an operand is promoted
// or when an inline result does not fit two int64 words. Results go through from_mpq, which demotes a value
// that fits, so the representation stays canonical whichever path produced it.
#include "models/fast_rational.h"

#include <stdexcept>

namespace accumcheck::models {

namespace {

static_assert(sizeof(long) == 8, "FastRational assumes LP64: GMP's signed long is int64");
static_assert(sizeof(FastRational) == 16, "FastRational should be two words");

// z = sign * magnitude, for a 128-bit magnitude (GMP has no __int128 setter).
void set_mpz(mpz_class& z, detail::UInt128 magnitude, bool negative) {
  const std::uint64_t words[2] = {static_cast<std::uint64_t>(magnitude), static_cast<std::uint64_t>(magnitude >> 64)};
  // Two words, least significant first, native byte order, no nail bits.
  mpz_import(z.get_mpz_t(), 2, -1, sizeof(std::uint64_t), 0, 0, words);
  if (negative) mpz_neg(z.get_mpz_t(), z.get_mpz_t());
}

}  // namespace

FastRational::FastRational(long long numerator, long long denominator) {
  if (denominator == 0) throw std::domain_error("FastRational: zero denominator (" + std::to_string(numerator) + "/0)");
  const std::uint64_t g = detail::gcd_u64(detail::magnitude(numerator), detail::magnitude(denominator));
  detail::Int128 n = numerator, d = denominator;
  if (d < 0) {
    n = -n;
    d = -d;
  }
  // (INT64_MIN, -1) is 2^63 and (1, INT64_MIN) is -1/2^63: neither fits, so from_canonical promotes them.
  *this = from_canonical(n / static_cast<detail::Int128>(g), static_cast<detail::UInt128>(d / static_cast<detail::Int128>(g)));
}

FastRational::FastRational(const Rational& value) {
  std::int64_t numerator = 0, denominator = 1;
  if (value.fits_int64(numerator, denominator)) {  // canonical, as Rational keeps it
    num_ = numerator;
    den_ = denominator;
  } else {
    big_ = new mpq_class(value.mpq());
    den_ = 0;
  }
}

FastRational FastRational::truncated_to_bits(int fraction_bits) const {
  // An inline value takes Rational's inline path, which needs no GMP; its conversions are two words each way.
  if (is_inline()) return FastRational(truncate_to_bits(to_rational(), fraction_bits));
  if (fraction_bits < 0 || fraction_bits > 4096) throw std::domain_error("truncate_to_bits: bad precision");
  mpq_class value;
  detail::truncate_mpq_to_bits(value, big_->get_mpq_t(), fraction_bits);
  return from_mpq(std::move(value));
}

FastRational FastRational::from_double(double value) { return FastRational(Rational::from_double(value)); }
FastRational FastRational::parse(std::string_view text) { return FastRational(Rational::parse(text)); }

void FastRational::to_mpq(mpq_class& out) const {
  if (is_inline()) {
    // Already canonical, so set the parts directly and skip mpq_canonicalize.
    mpz_set_si(out.get_num_mpz_t(), num_);
    mpz_set_si(out.get_den_mpz_t(), den_);
  } else {
    out = *big_;
  }
}

Rational FastRational::to_rational() const {
  if (is_inline()) return Rational::from_canonical(num_, den_);  // both types are canonical
  return Rational::from_canonical(mpq_class(*big_));
}

mpz_class FastRational::numerator() const {
  if (!is_inline()) return big_->get_num();
  mpz_class z;
  mpz_set_si(z.get_mpz_t(), num_);
  return z;
}

mpz_class FastRational::denominator() const {
  if (!is_inline()) return big_->get_den();
  mpz_class z;
  mpz_set_si(z.get_mpz_t(), den_);
  return z;
}

double FastRational::to_double() const {
  // Both parts exact in a double, so IEEE division rounds the quotient once, to nearest: correctly rounded.
  constexpr std::uint64_t kExactInDouble = std::uint64_t{1} << 53;
  if (is_inline() && detail::magnitude(num_) <= kExactInDouble && static_cast<std::uint64_t>(den_) <= kExactInDouble) {
    return static_cast<double>(num_) / static_cast<double>(den_);
  }
  return to_rational().to_double();
}

std::string FastRational::to_string() const {
  return canonical_string();
}

FastRational FastRational::from_mpq(mpq_class&& value) {
  FastRational result;
  result.assign_canonical(std::move(value));
  return result;
}

FastRational FastRational::promote_canonical(detail::Int128 n, detail::UInt128 d) {
  mpq_class q;
  set_mpz(q.get_num(), detail::magnitude128(n), n < 0);
  set_mpz(q.get_den(), d, false);
  // Canonical by the caller's contract; from_mpq still demotes if it fits, which it never does here.
  return from_mpq(std::move(q));
}

FastRational FastRational::slow_binary(const FastRational& a, const FastRational& b, MpqOperation operation) {
  // Inline operands are copied into scratch mpqs; a promoted one is used in place.
  mpq_class scratch_a, scratch_b;
  if (a.is_inline()) a.to_mpq(scratch_a);
  if (b.is_inline()) b.to_mpq(scratch_b);
  const mpq_class& qa = a.is_inline() ? scratch_a : *a.big_;
  const mpq_class& qb = b.is_inline() ? scratch_b : *b.big_;
  mpq_class result;
  operation(result.get_mpq_t(), qa.get_mpq_t(), qb.get_mpq_t());  // canonical, by GMP's contract
  check_exact_size(result.get_mpq_t());
  return from_mpq(std::move(result));
}

FastRational FastRational::slow_add(const FastRational& a, const FastRational& b) { return slow_binary(a, b, mpq_add); }
FastRational FastRational::slow_sub(const FastRational& a, const FastRational& b) { return slow_binary(a, b, mpq_sub); }
FastRational FastRational::slow_mul(const FastRational& a, const FastRational& b) { return slow_binary(a, b, mpq_mul); }
FastRational FastRational::slow_div(const FastRational& a, const FastRational& b) {
  if (b.is_zero()) throw_division_by_zero();
  return slow_binary(a, b, mpq_div);
}

FastRational FastRational::slow_negate(const FastRational& a) {
  mpq_class r;
  a.to_mpq(r);
  mpq_neg(r.get_mpq_t(), r.get_mpq_t());
  return from_mpq(std::move(r));
}

std::strong_ordering FastRational::slow_compare(const FastRational& a, const FastRational& b) noexcept {
  // mpq_cmp_si would avoid the copy of an inline operand, but it takes an unsigned long denominator and
  // this path is rare; one shape for all cases is easier to trust.
  mpq_class sa, sb;
  if (a.is_inline()) a.to_mpq(sa);
  if (b.is_inline()) b.to_mpq(sb);
  const mpq_class& qa = a.is_inline() ? sa : *a.big_;
  const mpq_class& qb = b.is_inline() ? sb : *b.big_;
  const int c = mpq_cmp(qa.get_mpq_t(), qb.get_mpq_t());
  return c < 0 ? std::strong_ordering::less : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

void FastRational::throw_division_by_zero() { throw std::domain_error("FastRational: division by zero"); }

}  // namespace accumcheck::models
