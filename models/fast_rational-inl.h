// FastRational's hot paths: inline arithmetic on two int64 pairs in __int128, included at the end of
// fast_rational.h and nowhere else.
//
// Method (Knuth, TAOCP vol. 2, 4.5.1): add and subtract divide out the gcd of the denominators before
// cross-multiplying, multiply and divide cancel across (gcd(a, d), gcd(c, b)) first. The intermediates stay
// within 127 bits and the result comes out in lowest terms without a 128-bit gcd. Bounds, with
// |a|, |c| <= 2^63 and 1 <= b, d <= 2^63 - 1:
//   add/sub  a*d' + c*b' has magnitude < 2^127, and b'*d < 2^126;
//   mul/div  products of two values of magnitude <= 2^63 are <= 2^126.
// A result that fits two int64 words is returned inline; anything else goes to promote_canonical (GMP).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "models/assert.h"

namespace accumcheck::models {

namespace detail {

inline constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// gcd(x, y), with gcd(0, y) = y. A binary (Stein) gcd whose loop body is branch-free (min and |difference|
// compile to conditional moves), so random operands cost no mispredicted branches. When the operands differ
// by more than 6 bits (a numerator against a small denominator, or anything against 1), one Euclid step
// goes first: a single division then replaces dozens of binary steps. On the project's (shared, noisy)
// machine, for 20-bit by 10-bit operands: about 20 ns, against about 57 ns for std::gcd in libstdc++ 12.
inline std::uint64_t gcd_u64(std::uint64_t x, std::uint64_t y) noexcept {
  std::uint64_t big = x > y ? x : y, small = x > y ? y : x;
  if (small == 0) return big;
  if (__builtin_clzll(small) - __builtin_clzll(big) > 6) {
    big %= small;
    if (big == 0) return small;
  }
  const int shift = __builtin_ctzll(big | small);
  big >>= __builtin_ctzll(big);
  small >>= __builtin_ctzll(small);
  // A power of two (every denominator of a value that came from a float) leaves 1 here: done. Without this
  // exit the loop below would take one step per bit of the other operand.
  if (big == 1 || small == 1) return std::uint64_t{1} << shift;
  while (big != small) {  // both odd
    const std::uint64_t difference = big > small ? big - small : small - big;
    small = big < small ? big : small;
    big = difference >> __builtin_ctzll(difference);
  }
  return small << shift;
}

// gcd of a 128-bit magnitude and a nonzero 64-bit value. One 128-by-64 remainder when x is wide; usually it
// is not, and the remainder (a library call) is skipped.
inline std::uint64_t gcd_u128_u64(UInt128 x, std::uint64_t y) noexcept {
  if ((x >> 64) == 0) return gcd_u64(static_cast<std::uint64_t>(x), y);
  return gcd_u64(y, static_cast<std::uint64_t>(x % y));
}

// x / g for a divisor g in [1, 2^63) of x. A 64-bit division when x fits an int64, as it usually does:
// __int128 division is a library call several times slower.
inline Int128 divide_exact(Int128 x, std::uint64_t g) noexcept {
  if (g == 1) return x;
  if (x >= kInt64Min && x <= kInt64Max) return static_cast<std::int64_t>(x) / static_cast<std::int64_t>(g);
  return x / static_cast<Int128>(g);
}

inline UInt128 magnitude128(Int128 x) noexcept {
  return x < 0 ? UInt128{0} - static_cast<UInt128>(x) : static_cast<UInt128>(x);
}

// floor(sqrt(n)) into root; true when n is its square. The double's root is within one of the integer root
// for every uint64, and the loops correct it exactly in 128 bits.
inline bool perfect_square_root(std::uint64_t n, std::uint64_t& root) noexcept {
  std::uint64_t r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 0 && static_cast<UInt128>(r) * r > n) --r;
  while (static_cast<UInt128>(r + 1) * (r + 1) <= n) ++r;
  root = r;
  return static_cast<UInt128>(r) * r == n;
}

}  // namespace detail

// Both types keep a value inline exactly when it fits, in lowest terms, so an inline value converts as its two
// words. Inline here, because scenarios and results convert element by element (8% of a peer-size trial when
// these were calls).
inline FastRational::FastRational(const Rational& value) {
  std::int64_t numerator = 0, denominator = 1;
  if (value.fits_int64(numerator, denominator)) [[likely]] {
    num_ = numerator;
    den_ = denominator;
  } else {
    *this = from_promoted(value);
  }
}

inline Rational FastRational::to_rational() const {
  if (is_inline()) [[likely]] return Rational::from_canonical(num_, den_);
  return promoted_to_rational();
}

inline std::optional<FastRational> FastRational::exact_square_root() const noexcept {
  std::uint64_t num_root = 0, den_root = 0;
  if (!is_inline() || num_ < 0 || !detail::perfect_square_root(static_cast<std::uint64_t>(num_), num_root) ||
      !detail::perfect_square_root(static_cast<std::uint64_t>(den_), den_root))
    return std::nullopt;
  // In lowest terms: a common factor of the roots would divide n and d, which have none.
  return FastRational(InlineTag{}, static_cast<std::int64_t>(num_root), static_cast<std::int64_t>(den_root));
}

inline int FastRational::sign() const noexcept {
  if (is_inline()) return (num_ > 0) - (num_ < 0);
  return mpq_sgn(promoted());
}

inline bool FastRational::is_integer() const noexcept {
  if (is_inline()) return den_ == 1;
  return mpz_cmp_ui(mpq_denref(promoted()), 1) == 0;
}

inline FastRational FastRational::from_canonical(detail::Int128 n, detail::UInt128 d) {
  if (n >= detail::kInt64Min && n <= detail::kInt64Max && d <= static_cast<detail::UInt128>(detail::kInt64Max)) {
    return FastRational(InlineTag{}, static_cast<std::int64_t>(n), static_cast<std::int64_t>(d));
  }
  return promote_canonical(n, d);
}

inline FastRational FastRational::from_dyadic(detail::Int128 n, int exponent) {
  ACCUMCHECK_ASSERT(exponent >= 0);
  if (n == 0) return FastRational();
  const auto low = static_cast<std::uint64_t>(n);
  const int zeros = low != 0 ? __builtin_ctzll(low) : 64 + __builtin_ctzll(static_cast<std::uint64_t>(n >> 64));
  const int shift = zeros < exponent ? zeros : exponent;
  n >>= shift;  // exact: the bits shifted out are zeros
  exponent -= shift;
  if (exponent <= 62 && n >= detail::kInt64Min && n <= detail::kInt64Max)
    return FastRational(InlineTag{}, static_cast<std::int64_t>(n), std::int64_t{1} << exponent);
  return promote_dyadic(n, exponent);
}

// a/b + c/d (or a/b - c/d), all four inline parts.
template <bool Subtract>
inline FastRational FastRational::add_inline(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  using detail::Int128;
  using detail::UInt128;
  // A shortcut only, as in mul_inline: a zero operand (0/1) would take the coprime path below. Accumulators start
  // at zero (gradients, moments, sums), so a first term is added to one in most of the models' sums.
  if (c == 0) return FastRational(InlineTag{}, a, b);
  if (a == 0) return from_canonical(Subtract ? -Int128{c} : Int128{c}, static_cast<UInt128>(static_cast<std::uint64_t>(d)));
  if (b == d) {
    if (b == 1) {
      // Integers: one instruction and an overflow flag.
      std::int64_t r;
      const bool overflow = Subtract ? __builtin_sub_overflow(a, c, &r) : __builtin_add_overflow(a, c, &r);
      if (!overflow) [[likely]] return FastRational(InlineTag{}, r, 1);
      return from_canonical(Subtract ? Int128{a} - c : Int128{a} + c, 1);
    }
    // Equal denominators: (a +- c) / b, then cancel what the new numerator shares with b.
    const Int128 n = Subtract ? Int128{a} - c : Int128{a} + c;
    const std::uint64_t g = detail::gcd_u128_u64(detail::magnitude128(n), static_cast<std::uint64_t>(b));
    return from_canonical(detail::divide_exact(n, g), static_cast<UInt128>(static_cast<std::uint64_t>(b) / g));
  }
  const std::uint64_t ub = static_cast<std::uint64_t>(b), ud = static_cast<std::uint64_t>(d);
  const Int128 cc = Subtract ? -Int128{c} : Int128{c};
  const std::uint64_t g = detail::gcd_u64(ub, ud);
  if (g == 1) {
    // Coprime denominators: a*d + c*b over b*d is already in lowest terms.
    return from_canonical(Int128{a} * static_cast<Int128>(ud) + cc * static_cast<Int128>(ub), UInt128{ub} * ud);
  }
  // t = a*(d/g) + c*(b/g); only g can share factors with t, and (b/g)*(d/g2) is the reduced denominator.
  const std::uint64_t bg = ub / g, dg = ud / g;
  const Int128 t = Int128{a} * static_cast<Int128>(dg) + cc * static_cast<Int128>(bg);
  const std::uint64_t g2 = detail::gcd_u128_u64(detail::magnitude128(t), g);
  return from_canonical(detail::divide_exact(t, g2), UInt128{bg} * (ud / g2));
}

inline FastRational FastRational::mul_inline(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  using detail::Int128;
  using detail::UInt128;
  if (b == 1 && d == 1) {
    std::int64_t r;
    if (!__builtin_mul_overflow(a, c, &r)) [[likely]] return FastRational(InlineTag{}, r, 1);
    return from_canonical(Int128{a} * c, 1);
  }
  // A shortcut only (zero is 0/1, so the general path also gives 0/1): products with zero are common in
  // the models (masked or clipped entries), and this skips two gcds.
  if (a == 0 || c == 0) return FastRational();
  // Cross-cancel: gcd(a, d) and gcd(c, b). Both are < 2^63 since b, d are, so the int64 divisions are safe.
  const std::uint64_t g1 = detail::gcd_u64(detail::magnitude(a), static_cast<std::uint64_t>(d));
  const std::uint64_t g2 = detail::gcd_u64(detail::magnitude(c), static_cast<std::uint64_t>(b));
  const std::int64_t a1 = a / static_cast<std::int64_t>(g1), c1 = c / static_cast<std::int64_t>(g2);
  return from_canonical(Int128{a1} * c1,
                        UInt128{static_cast<std::uint64_t>(b) / g2} * (static_cast<std::uint64_t>(d) / g1));
}

// (a/b) / (c/d) = (a*d) / (b*c), c != 0. Worked on magnitudes because |c| can be 2^63.
inline FastRational FastRational::div_inline(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  using detail::Int128;
  using detail::UInt128;
  if (c == 0) [[unlikely]] throw_division_by_zero();
  if (a == 0) return FastRational();
  const std::uint64_t ma = detail::magnitude(a), mc = detail::magnitude(c);
  const std::uint64_t ub = static_cast<std::uint64_t>(b), ud = static_cast<std::uint64_t>(d);
  const std::uint64_t g1 = detail::gcd_u64(ma, mc);
  const std::uint64_t g2 = detail::gcd_u64(ub, ud);
  const UInt128 num_magnitude = UInt128{ma / g1} * (ud / g2);  // <= 2^126
  const UInt128 den = UInt128{ub / g2} * (mc / g1);
  const Int128 num = static_cast<Int128>(num_magnitude);
  return from_canonical((a < 0) != (c < 0) ? -num : num, den);
}

inline FastRational operator+(const FastRational& a, const FastRational& b) {
  if (a.is_inline() && b.is_inline()) [[likely]] {
    return FastRational::add_inline<false>(a.num_, a.den_, b.num_, b.den_);
  }
  return FastRational::slow_add(a, b);
}

inline FastRational operator-(const FastRational& a, const FastRational& b) {
  if (a.is_inline() && b.is_inline()) [[likely]] {
    return FastRational::add_inline<true>(a.num_, a.den_, b.num_, b.den_);
  }
  return FastRational::slow_sub(a, b);
}

inline FastRational operator*(const FastRational& a, const FastRational& b) {
  if (a.is_inline() && b.is_inline()) [[likely]] {
    return FastRational::mul_inline(a.num_, a.den_, b.num_, b.den_);
  }
  return FastRational::slow_mul(a, b);
}

inline FastRational operator/(const FastRational& a, const FastRational& b) {
  if (a.is_inline() && b.is_inline()) [[likely]] {
    return FastRational::div_inline(a.num_, a.den_, b.num_, b.den_);
  }
  return FastRational::slow_div(a, b);
}

inline FastRational operator-(const FastRational& a) {
  // -INT64_MIN does not fit; the promoted path also demotes -(2^63) back to inline INT64_MIN.
  if (a.is_inline() && a.num_ != detail::kInt64Min) [[likely]] {
    return FastRational(FastRational::InlineTag{}, -a.num_, a.den_);
  }
  return FastRational::slow_negate(a);
}

inline bool operator==(const FastRational& a, const FastRational& b) noexcept { return a.same_value(b); }

// Rational's storage, which FastRational, its friend, may read: the same words and the same canonical form.
inline bool FastRational::equals(const Rational& other) const noexcept { return same_value(other); }

inline bool values_equal(const FastRational* a, const FastRational* b, std::size_t n) noexcept {
  return detail::InlineOrMpq::same_words(a, b, n) || std::equal(a, a + n, b);
}

inline std::strong_ordering operator<=>(const FastRational& a, const FastRational& b) noexcept {
  if (a.is_inline() && b.is_inline()) [[likely]] {
    if (a.den_ == b.den_) return a.num_ <=> b.num_;
    // Cross products: each is < 2^126 in magnitude.
    return detail::Int128{a.num_} * b.den_ <=> detail::Int128{b.num_} * a.den_;
  }
  return FastRational::slow_compare(a, b);
}

inline FastRational abs(const FastRational& value) { return value.sign() < 0 ? -value : value; }

}  // namespace accumcheck::models
