// FastRational's rare paths: everything that needs GMP. An operation lands here when an operand is promoted
// or when an inline result does not fit two int64 words. Results go through from_mpq, which demotes a value
// that fits, so the representation stays canonical whichever path produced it.
#include "models/fast_rational.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <optional>
#include <stdexcept>

#include "models/exact_sums.h"

namespace accumcheck::models {

namespace {

static_assert(sizeof(long) == 8, "FastRational assumes LP64: GMP's signed long is int64");
static_assert(sizeof(FastRational) == 16, "FastRational should be two words");

// This thread's mpq for results on their way to a PackedMpq: its limbs have grown to the largest result so far, so
// making one allocates nothing. Each user finishes with it (packs or demotes its value) before the next begins.
mpq_class& scratch_mpq() {
  thread_local mpq_class scratch;
  return scratch;
}

// z = sign * magnitude, for a 128-bit magnitude (GMP has no __int128 setter): its two words written as z's limbs,
// least significant first. mpz_import, which this replaces, took 80 instructions a call for its general word
// order, a fifth of a promoted product's cost.
void set_mpz(mpz_class& z, detail::UInt128 magnitude, bool negative) {
  static_assert(GMP_NUMB_BITS == 64, "one limb is one 64-bit word");
  const auto low = static_cast<mp_limb_t>(magnitude), high = static_cast<mp_limb_t>(magnitude >> 64);
  const mp_size_t size = high != 0 ? 2 : (low != 0 ? 1 : 0);
  mp_limb_t* limbs = mpz_limbs_write(z.get_mpz_t(), 2);
  limbs[0] = low;
  limbs[1] = high;
  mpz_limbs_finish(z.get_mpz_t(), negative ? -size : size);
}

// Storage for a read-only mpq over an inline value's two words, so that an inline operand of a GMP operation
// costs no copy and no allocation. Not copyable: the mpq points into the limbs beside it.
struct InlineView {
  InlineView() = default;
  InlineView(const InlineView&) = delete;
  InlineView& operator=(const InlineView&) = delete;
  mp_limb_t num_limb = 0, den_limb = 1;
  mpq_t q;
};

mpq_srcptr view_inline(InlineView& view, std::int64_t num, std::int64_t den) noexcept {
  view.num_limb = detail::magnitude(num);
  view.den_limb = static_cast<mp_limb_t>(den);
  mpz_roinit_n(mpq_numref(view.q), &view.num_limb, num < 0 ? -1 : (num > 0 ? 1 : 0));
  mpz_roinit_n(mpq_denref(view.q), &view.den_limb, 1);
  return view.q;
}

enum class Dyadic { add, sub, mul };

// The operations dyadic_binary does (a quotient of two dyadic values need not be dyadic).
std::optional<Dyadic> dyadic_form(void (*operation)(mpq_ptr, mpq_srcptr, mpq_srcptr)) noexcept {
  if (operation == mpq_add) return Dyadic::add;
  if (operation == mpq_sub) return Dyadic::sub;
  if (operation == mpq_mul) return Dyadic::mul;
  return std::nullopt;
}

// When the denominator is 2^e: true, with e.
bool dyadic_exponent(mpz_srcptr den, mp_bitcnt_t& e) noexcept {
  e = mpz_scan1(den, 0);
  return mpz_sizeinbase(den, 2) == e + 1;
}

// a op b for a and b whose denominators are both powers of two: the values the generator and power-of-two
// learning rates produce and Adam's 2^-64 grid keeps (half of the GMP operations of a default campaign).
// mpq_add and mpq_mul would find the result's lowest terms with gcds of the denominators and of the
// numerators; here the only common factor can be a power of two, so shifts and one bit scan find it.
//   a/2^p + b/2^q = (a*2^(e-p) + b*2^(e-q)) / 2^e, e = max(p, q);   (a/2^p) * (b/2^q) = ab / 2^(p+q);
// then both parts are divided by 2^k, k = min(trailing zeros of the numerator, e). The result is canonical:
// its numerator is odd or its denominator is 1.
bool dyadic_binary(mpq_ptr result, mpq_srcptr a, mpq_srcptr b, Dyadic operation) {
  mp_bitcnt_t p = 0, q = 0;
  if (!dyadic_exponent(mpq_denref(a), p) || !dyadic_exponent(mpq_denref(b), q)) return false;
  mpz_ptr num = mpq_numref(result);
  mp_bitcnt_t e = 0;
  if (operation == Dyadic::mul) {
    mpz_mul(num, mpq_numref(a), mpq_numref(b));
    e = p + q;
  } else {
    // Scale the operand with the smaller exponent, then add or subtract in operand order.
    e = p > q ? p : q;
    if (p >= q) {
      mpz_mul_2exp(num, mpq_numref(b), p - q);
      if (operation == Dyadic::add)
        mpz_add(num, mpq_numref(a), num);
      else
        mpz_sub(num, mpq_numref(a), num);
    } else {
      mpz_mul_2exp(num, mpq_numref(a), q - p);
      if (operation == Dyadic::add)
        mpz_add(num, num, mpq_numref(b));
      else
        mpz_sub(num, num, mpq_numref(b));
    }
  }
  mpz_ptr den = mpq_denref(result);
  if (mpz_sgn(num) == 0) {
    mpz_set_ui(den, 1);
    return true;
  }
  const mp_bitcnt_t zeros = mpz_scan1(num, 0);
  const mp_bitcnt_t k = zeros < e ? zeros : e;
  mpz_tdiv_q_2exp(num, num, k);  // exact: 2^k divides num, so truncation loses nothing, whatever the sign
  mpz_set_ui(den, 0);
  mpz_setbit(den, e - k);
  return true;
}

// a/b ± c/d where one denominator divides the other, say d = b m: the other half of a default campaign's GMP sums
// (a running accumulator over a finer denominator plus a new term). mpq_add would take gcd(b, d), which is b, and
// then gcd(t, b); here a division tells b | d, and only gcd(t, b) is taken:
//   a/b ± c/(b m) = t / (b m),  t = a m ± c,  and gcd(t, b m) = gcd(t, b)
// since a prime dividing t and m divides c, which d = b m shares no prime with (c/d is in lowest terms). Equal
// denominators are m = 1. False, touching nothing, where neither denominator divides the other.
bool nested_add(mpq_ptr result, mpq_srcptr a, mpq_srcptr b, bool subtract) {
  mpz_srcptr da = mpq_denref(a), db = mpq_denref(b);
  // fine: the operand with the multiple for a denominator; coarse: the one whose denominator divides it.
  mpq_srcptr fine = nullptr, coarse = nullptr;
  const int order = mpz_cmp(da, db);
  if (order == 0 || (order > 0 && mpz_divisible_p(da, db))) {
    fine = a;
    coarse = b;
  } else if (order < 0 && mpz_divisible_p(db, da)) {
    fine = b;
    coarse = a;
  } else {
    return false;
  }
  mpz_ptr num = mpq_numref(result), den = mpq_denref(result);
  thread_local mpz_class m, g;
  // t = coarse's numerator times m, plus or minus fine's, in operand order: a - b = -(b - a).
  mpz_divexact(m.get_mpz_t(), mpq_denref(fine), mpq_denref(coarse));
  mpz_mul(num, mpq_numref(coarse), m.get_mpz_t());
  if (!subtract) mpz_add(num, num, mpq_numref(fine));
  else if (coarse == a) mpz_sub(num, num, mpq_numref(fine));
  else mpz_sub(num, mpq_numref(fine), num);
  if (mpz_sgn(num) == 0) {
    mpz_set_ui(den, 1);
    return true;
  }
  // gcd(t, b) = 2^min(zeros of t, zeros of b) gcd(t, u) for b = 2^z u, u odd. Most coarse denominators here are
  // powers of two (u = 1: a bit scan is the whole gcd) or have an odd part of one limb (one word gcd after t mod u);
  // only the rest take mpz_gcd.
  mpz_srcptr coarse_den = mpq_denref(coarse);
  const mp_bitcnt_t coarse_twos = mpz_scan1(coarse_den, 0), t_twos = mpz_scan1(num, 0);
  const mp_bitcnt_t twos = coarse_twos < t_twos ? coarse_twos : t_twos;
  const std::size_t odd_bits = mpz_sizeinbase(coarse_den, 2) - coarse_twos;
  if (odd_bits <= GMP_NUMB_BITS) {
    unsigned long odd_gcd = 1;
    if (odd_bits > 1) {
      mpz_tdiv_q_2exp(g.get_mpz_t(), coarse_den, coarse_twos);
      odd_gcd = mpz_gcd_ui(nullptr, num, mpz_get_ui(g.get_mpz_t()));
    }
    mpz_tdiv_q_2exp(den, mpq_denref(fine), twos);  // exact: 2^twos divides b, so d
    mpz_tdiv_q_2exp(num, num, twos);               // exact: twos <= the zeros of t, whatever its sign
    if (odd_gcd != 1) {
      mpz_divexact_ui(num, num, odd_gcd);
      mpz_divexact_ui(den, den, odd_gcd);
    }
    return true;
  }
  mpz_gcd(g.get_mpz_t(), num, coarse_den);
  if (mpz_cmp_ui(g.get_mpz_t(), 1) == 0) {
    mpz_set(den, mpq_denref(fine));
  } else {
    mpz_divexact(num, num, g.get_mpz_t());
    mpz_divexact(den, mpq_denref(fine), g.get_mpz_t());
  }
  return true;
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

FastRational FastRational::from_promoted(const Rational& value) {
  FastRational out;
  out.InlineOrMpq::operator=(static_cast<const detail::InlineOrMpq&>(value));
  return out;
}

FastRational FastRational::truncated_to_bits(int fraction_bits) const {
  // An inline value takes Rational's inline path, which needs no GMP; its conversions are two words each way.
  if (is_inline()) return FastRational(truncate_to_bits(to_rational(), fraction_bits));
  if (fraction_bits < 0 || fraction_bits > 4096) throw std::domain_error("truncate_to_bits: bad precision");
  mpq_class value;
  detail::truncate_mpq_to_bits(value, promoted(), fraction_bits);
  return from_mpq(value.get_mpq_t());
}

FastRational FastRational::truncated_quotient(const FastRational& x, const FastRational& y, const FastRational& z,
                                              int fraction_bits) {
  InlineView view_x, view_y, view_z;
  const mpq_srcptr qx = x.is_inline() ? view_inline(view_x, x.num_, x.den_) : x.promoted();
  const mpq_srcptr qy = y.is_inline() ? view_inline(view_y, y.num_, y.den_) : y.promoted();
  const mpq_srcptr qz = z.is_inline() ? view_inline(view_z, z.num_, z.den_) : z.promoted();
  // The unreduced quotient's parts within the limit (the sum's numerator at most one limb longer than its longer
  // term): then so are y + z's and x / (y + z)'s in lowest terms, and neither throws.
  constexpr std::size_t kLimbsMax = kExactBitsMax / GMP_NUMB_BITS;
  const std::size_t sum_limbs = std::max(mpz_size(mpq_numref(qy)) + mpz_size(mpq_denref(qz)),
                                         mpz_size(mpq_numref(qz)) + mpz_size(mpq_denref(qy))) + 1;
  if (fraction_bits < 0 || fraction_bits > 4096 ||
      mpz_size(mpq_numref(qx)) + mpz_size(mpq_denref(qy)) + mpz_size(mpq_denref(qz)) > kLimbsMax ||
      mpz_size(mpq_denref(qx)) + sum_limbs > kLimbsMax)
    return (x / (y + z)).truncated_to_bits(fraction_bits);  // its exceptions, in its order
  // This thread's integers: their limbs have grown to the largest quotient so far, so this allocates nothing.
  thread_local mpz_class numerator, denominator, term;
  const mpz_ptr n = numerator.get_mpz_t(), d = denominator.get_mpz_t(), t = term.get_mpz_t();
  // d = yn zd + zn yd, the sum's unreduced numerator; zero is a zero divisor.
  mpz_mul(d, mpq_numref(qy), mpq_denref(qz));
  mpz_mul(t, mpq_numref(qz), mpq_denref(qy));
  mpz_add(d, d, t);
  if (mpz_sgn(d) == 0) throw_division_by_zero();
  if (x.is_zero()) return FastRational();
  mpz_mul(d, d, mpq_denref(qx));
  mpz_mul(n, mpq_numref(qx), mpq_denref(qy));
  mpz_mul(n, n, mpq_denref(qz));
  return truncated_dyadic(n, d, static_cast<mp_bitcnt_t>(fraction_bits));
}

FastRational FastRational::truncated_dyadic(mpz_ptr n, mpz_srcptr d, mp_bitcnt_t bits) {
  mpz_mul_2exp(n, n, bits);
  mpz_tdiv_q(n, n, d);  // toward zero, with the quotient's sign, as truncate_to_bits
  if (mpz_sgn(n) == 0) return FastRational();
  // Lowest terms: 2^b has no factor but 2 (as in detail::truncate_mpq_to_bits).
  const mp_bitcnt_t twos = std::min<mp_bitcnt_t>(mpz_scan1(n, 0), bits);
  mpz_tdiv_q_2exp(n, n, twos);
  const auto exponent = static_cast<int>(bits - twos);
  if (exponent <= 62 && mpz_fits_slong_p(n)) return FastRational(InlineTag{}, mpz_get_si(n), std::int64_t{1} << exponent);
  mpq_class& q = scratch_mpq();
  mpz_swap(q.get_num_mpz_t(), n);
  mpz_set_ui(q.get_den_mpz_t(), 0);
  mpz_setbit(q.get_den_mpz_t(), static_cast<mp_bitcnt_t>(exponent));
  return from_mpq(q.get_mpq_t());
}

FastRational FastRational::rounded_square_root(int fraction_bits) const {
  if (sign() < 0 || fraction_bits < 0 || fraction_bits > 64) return FastRational(sqrt_rounded(to_rational(), fraction_bits));
  if (auto root = exact_square_root()) return *root;
  // sqrt_rounded's rule: the exact root when numerator and denominator are both perfect squares, else
  // floor(sqrt(floor(n 4^b / d))) / 2^b.
  if (is_inline()) {
    // Not both perfect squares (exact_square_root said so). n 2^(2b) < 2^191: three limbs, divided by d's one.
    const auto shift = static_cast<unsigned>(2 * fraction_bits);
    const auto n = static_cast<detail::UInt128>(static_cast<std::uint64_t>(num_));
    mp_limb_t scaled[3] = {0, 0, 0};
    if (shift < 128) {
      const detail::UInt128 low = n << shift;  // the bits below 2^128
      scaled[0] = static_cast<mp_limb_t>(low);
      scaled[1] = static_cast<mp_limb_t>(low >> 64);
      scaled[2] = shift == 0 ? 0 : static_cast<mp_limb_t>(n >> (128 - shift));
    } else {
      scaled[2] = static_cast<mp_limb_t>(n);  // shift == 128
    }
    mp_limb_t quotient[3] = {0, 0, 0};
    mpn_divrem_1(quotient, 0, scaled, 3, static_cast<mp_limb_t>(den_));
    mp_size_t size = 3;
    while (size > 0 && quotient[size - 1] == 0) --size;
    if (size == 0) return FastRational();
    mp_limb_t root[2] = {0, 0};  // ceil(size / 2) <= 2 limbs
    mpn_sqrtrem(root, nullptr, quotient, size);
    const auto value = static_cast<detail::Int128>((static_cast<detail::UInt128>(root[1]) << 64) | root[0]);
    return from_dyadic(value, fraction_bits);  // root < 2^96
  }
  const mpq_srcptr q = promoted();
  if (mpz_perfect_square_p(mpq_numref(q)) && mpz_perfect_square_p(mpq_denref(q))) {
    mpq_class exact;
    mpz_sqrt(mpq_numref(exact.get_mpq_t()), mpq_numref(q));
    mpz_sqrt(mpq_denref(exact.get_mpq_t()), mpq_denref(q));  // in lowest terms, as the square was
    return from_canonical_mpq(std::move(exact));
  }
  mpq_class out;
  mpz_ptr root = mpq_numref(out.get_mpq_t());
  mpz_mul_2exp(root, mpq_numref(q), static_cast<mp_bitcnt_t>(2 * fraction_bits));
  mpz_fdiv_q(root, root, mpq_denref(q));
  mpz_sqrt(root, root);
  mpz_set_ui(mpq_denref(out.get_mpq_t()), 1);
  mpz_mul_2exp(mpq_denref(out.get_mpq_t()), mpq_denref(out.get_mpq_t()), static_cast<mp_bitcnt_t>(fraction_bits));
  out.canonicalize();
  return from_canonical_mpq(std::move(out));
}

FastRational FastRational::from_double(double value) { return FastRational(Rational::from_double(value)); }
FastRational FastRational::parse(std::string_view text) { return FastRational(Rational::parse(text)); }

void FastRational::to_mpq(mpq_class& out) const {
  if (is_inline()) {
    // Already canonical, so set the parts directly and skip mpq_canonicalize.
    mpz_set_si(out.get_num_mpz_t(), num_);
    mpz_set_si(out.get_den_mpz_t(), den_);
  } else {
    mpq_set(out.get_mpq_t(), promoted());
  }
}

Rational FastRational::promoted_to_rational() const {
  Rational out;
  out.InlineOrMpq::operator=(static_cast<const detail::InlineOrMpq&>(*this));
  return out;
}

mpz_class FastRational::numerator() const {
  if (!is_inline()) return mpz_class(mpq_numref(promoted()));
  mpz_class z;
  mpz_set_si(z.get_mpz_t(), num_);
  return z;
}

mpz_class FastRational::denominator() const {
  if (!is_inline()) return mpz_class(mpq_denref(promoted()));
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

FastRational FastRational::from_mpq(mpq_srcptr value) {
  FastRational result;
  result.assign_canonical(value);
  return result;
}

FastRational FastRational::from_canonical_mpq(mpq_class&& q) {
  check_exact_size(q.get_mpq_t());
  return from_mpq(q.get_mpq_t());
}

FastRational FastRational::promote_canonical(detail::Int128 n, detail::UInt128 d) {
  mpq_class& q = scratch_mpq();
  set_mpz(q.get_num(), detail::magnitude128(n), n < 0);
  set_mpz(q.get_den(), d, false);
  // Canonical by the caller's contract; from_mpq still demotes if it fits, which it never does here.
  return from_mpq(q.get_mpq_t());
}

FastRational FastRational::promote_dyadic(detail::Int128 n, int exponent) {
  mpq_class& q = scratch_mpq();
  set_mpz(q.get_num(), detail::magnitude128(n), n < 0);
  mpz_set_ui(q.get_den_mpz_t(), 0);
  mpz_setbit(q.get_den_mpz_t(), static_cast<mp_bitcnt_t>(exponent));
  return from_mpq(q.get_mpq_t());
}

FastRational FastRational::slow_binary(const FastRational& a, const FastRational& b, MpqOperation operation) {
  // Both operands are read in place: a promoted one's own mpq, an inline one through a view of its words.
  InlineView view_a, view_b;
  const mpq_srcptr qa = a.is_inline() ? view_inline(view_a, a.num_, a.den_) : a.promoted();
  const mpq_srcptr qb = b.is_inline() ? view_inline(view_b, b.num_, b.den_) : b.promoted();
  // The result is made in the scratch mpq and packed when it stays promoted. Neither operand is the scratch: each
  // is an inline view or a packed value.
  const mpq_ptr result = scratch_mpq().get_mpq_t();
  const std::optional<Dyadic> form = dyadic_form(operation);
  if (!form || !dyadic_binary(result, qa, qb, *form)) {
    if (!(form == Dyadic::add || form == Dyadic::sub) || !nested_add(result, qa, qb, form == Dyadic::sub))
      operation(result, qa, qb);  // canonical, by GMP's contract
  }
  check_exact_size(result);
  return from_mpq(result);
}

FastRational FastRational::slow_add(const FastRational& a, const FastRational& b) { return slow_binary(a, b, mpq_add); }
FastRational FastRational::slow_sub(const FastRational& a, const FastRational& b) { return slow_binary(a, b, mpq_sub); }
FastRational FastRational::slow_mul(const FastRational& a, const FastRational& b) {
  // An inline value times a promoted one whose numerator takes one limb and whose denominator is 2^e, e <= 127: a
  // gradient's value times the clip coefficient on its 2^-64 grid (1.5 k instructions a clipped trial's element
  // through mpq_mul, about 2.5% of a trial at the peer's sizes). The only common factors are gcd(inline numerator,
  // 2^e), a power of two, and gcd(limb, inline denominator), found in one word each; the product is then canonical
  // by construction and built from two 128-bit words. A denominator past 127 bits takes the general path.
  static_assert(GMP_NUMB_BITS == 64, "one limb is one 64-bit word");
  if (a.is_inline() != b.is_inline()) {
    const FastRational& small = a.is_inline() ? a : b;
    const mpq_srcptr q = (a.is_inline() ? b : a).promoted();
    mp_bitcnt_t e = 0;
    if (mpz_size(mpq_numref(q)) == 1 && dyadic_exponent(mpq_denref(q), e) && e <= 127) {
      if (small.num_ == 0) return FastRational();
      const std::uint64_t magnitude = detail::magnitude(small.num_);
      const int shift = std::min(__builtin_ctzll(magnitude), static_cast<int>(e));  // 2^shift = gcd(numerator, 2^e)
      const std::uint64_t limb = mpz_getlimbn(mpq_numref(q), 0);
      const std::uint64_t g = detail::gcd_u64(limb, static_cast<std::uint64_t>(small.den_));
      const std::uint64_t den = static_cast<std::uint64_t>(small.den_) / g;
      const int exponent = static_cast<int>(e) - shift;
      if (std::bit_width(den) + exponent <= 127) {
        const detail::UInt128 n = detail::UInt128{magnitude >> shift} * (limb / g);  // < 2^63 2^64
        const bool negative = (small.num_ < 0) != (mpq_sgn(q) < 0);
        return from_canonical(negative ? -static_cast<detail::Int128>(n) : static_cast<detail::Int128>(n),
                              detail::UInt128{den} << exponent);
      }
    }
  }
  return slow_binary(a, b, mpq_mul);
}
FastRational FastRational::slow_div(const FastRational& a, const FastRational& b) {
  if (b.is_zero()) throw_division_by_zero();
  return slow_binary(a, b, mpq_div);
}

FastRational FastRational::slow_negate(const FastRational& a) {
  mpq_class r;
  a.to_mpq(r);
  mpq_neg(r.get_mpq_t(), r.get_mpq_t());
  return from_mpq(r.get_mpq_t());
}

std::strong_ordering FastRational::slow_compare(const FastRational& a, const FastRational& b) noexcept {
  InlineView view_a, view_b;
  const mpq_srcptr qa = a.is_inline() ? view_inline(view_a, a.num_, a.den_) : a.promoted();
  const mpq_srcptr qb = b.is_inline() ? view_inline(view_b, b.num_, b.den_) : b.promoted();
  const int c = mpq_cmp(qa, qb);
  return c < 0 ? std::strong_ordering::less : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

// The 512 bits past which a sum's values take FastRational's operations: with D within them too, every sum below
// stays far from the exact size limit, where the operations might throw (exact_sums.h).
constexpr std::size_t kSumLimbsMax = exact_sums::kProductParameterLimbsMax;

namespace {

// sum_of_squares over inline values whose least common denominator D fits 63 bits (a gradient under a mean over
// tokens: denominators of the token counts' factors times powers of two), each v D within 63 bits and the sum of
// their squares within 127: that sum over D^2, reduced by gcd(sum, D) and then gcd(what is left, D), which together
// take out every common factor (a prime p^a of D and p^b of the sum leaves p^max(0, b - 2a) above and nothing of p
// below). nullopt where a value is promoted, a bound is passed or the result does not fit two int64 words: the GMP
// sum takes those.
std::optional<FastRational> inline_sum_of_squares(std::span<const FastRational> values) {
  using detail::UInt128;
  std::uint64_t D = 1;
  for (const FastRational& v : values) {
    const auto parts = v.inline_parts();
    if (!parts) return std::nullopt;
    const auto d = static_cast<std::uint64_t>(parts->second);
    if (D % d == 0) continue;
    if (__builtin_mul_overflow(D / detail::gcd_u64(D, d), d, &D) || D > static_cast<std::uint64_t>(detail::kInt64Max))
      return std::nullopt;
  }
  UInt128 sum = 0;
  for (const FastRational& v : values) {
    const auto parts = *v.inline_parts();
    const UInt128 scaled = UInt128{detail::magnitude(parts.first)} * (D / static_cast<std::uint64_t>(parts.second));
    if ((scaled >> 63) != 0) return std::nullopt;
    sum += scaled * scaled;  // below 2^126 each; the sum is checked against 2^127 before it could wrap
    if ((sum >> 127) != 0) return std::nullopt;
  }
  const std::uint64_t g1 = detail::gcd_u128_u64(sum, D);
  sum /= g1;
  const std::uint64_t g2 = detail::gcd_u128_u64(sum, D);
  sum /= g2;
  const UInt128 denominator = UInt128{D / g1} * (D / g2);
  const auto most = static_cast<UInt128>(detail::kInt64Max);
  if (sum > most || denominator > most) return std::nullopt;  // a promoted result: the GMP sum makes it
  return FastRational(static_cast<long long>(sum), static_cast<long long>(denominator));
}

}  // namespace

FastRational sum_of_squares(std::span<const FastRational> values) {
  using detail::Int128;
  const auto by_operations = [&] {
    FastRational total(0);
    for (const FastRational& v : values) total += v * v;
    return total;
  };
  // Every value an inline dyadic n / 2^e: with K the largest e, the sum is sum (n 2^(K - e))^2 / 2^(2K).
  int K = 0;
  exact_sums::Extent extent;
  bool dyadic = true;
  for (const FastRational& v : values)
    if (!extent.add(v, K)) {
      dyadic = false;
      break;
    }
  // Each scaled value below 2^b, each square below 2^(2b), the sum below 2^(2b + bit_width(count)).
  const int b = extent.scaled_bits(K);
  if (dyadic && b <= 62 && 2 * b + static_cast<int>(std::bit_width(values.size())) <= 126) {
    Int128 sum = 0;
    for (const FastRational& v : values) {
      const Int128 scaled = exact_sums::scaled(v, K);
      sum += scaled * scaled;
    }
    return FastRational::from_dyadic(sum, 2 * K);
  }
  if (const auto sum = inline_sum_of_squares(values)) return *sum;
  // GMP: D the least common denominator, sum (v D)^2 in integers, one reduction by D^2.
  thread_local mpz_class D, term, scratch, numerator;
  D = 1;
  for (const FastRational& v : values)
    if (!exact_sums::include_denominator(v, kSumLimbsMax, D)) return by_operations();
  numerator = 0;
  for (const FastRational& v : values) {
    exact_sums::scale_to(v, D, term, scratch);
    mpz_addmul(numerator.get_mpz_t(), term.get_mpz_t(), term.get_mpz_t());
  }
  mpz_mul(D.get_mpz_t(), D.get_mpz_t(), D.get_mpz_t());
  return exact_sums::quotient(numerator, D, 0);
}

FastRational sum_divided_by(std::span<const FastRational* const> terms, std::int64_t divisor) {
  ACCUMCHECK_ASSERT(divisor > 0);
  const auto by_operations = [&] {
    FastRational total(0);
    for (const FastRational* t : terms) total += *t;
    return divisor == 1 ? total : total / FastRational(divisor);
  };
  if (std::all_of(terms.begin(), terms.end(), [](const FastRational* t) { return t->is_inline(); })) return by_operations();
  // GMP: D the least common denominator, the sum of v D in integers, one reduction by D divisor.
  thread_local mpz_class D, term, scratch, numerator;
  D = 1;
  for (const FastRational* t : terms)
    if (!exact_sums::include_denominator(*t, kSumLimbsMax, D)) return by_operations();
  numerator = 0;
  for (const FastRational* t : terms) {
    exact_sums::scale_to(*t, D, term, scratch);
    mpz_add(numerator.get_mpz_t(), numerator.get_mpz_t(), term.get_mpz_t());
  }
  mpz_mul_ui(D.get_mpz_t(), D.get_mpz_t(), static_cast<unsigned long>(divisor));
  return exact_sums::quotient(numerator, D, 0);
}

void FastRational::throw_division_by_zero() { throw std::domain_error("FastRational: division by zero"); }

}  // namespace accumcheck::models
