// Properties of Rational, the reference exact scalar: parsing and printing, the exact double conversions, the
// documented square root, pow2, and its use as an Eigen scalar.
//
// Method: each property checks a defining inequality or identity exactly, in Rational or mpz arithmetic,
// rather than comparing with a second implementation of the same algorithm. Generators lean toward the
// values where such code breaks: zero, signs, INT64 limits, double midpoints, subnormals, perfect squares.
#include <bit>
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <utility>

#include <Eigen/Core>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "models/rational.h"
#include "models/scalar.h"

namespace accumcheck::models {
// RapidCheck prints counterexamples through showValue, found by argument-dependent lookup.
inline void showValue(const Rational& value, std::ostream& os) { os << value.to_string(); }
}  // namespace accumcheck::models

namespace {

using accumcheck::models::pow2;
using accumcheck::models::Rational;
using accumcheck::models::sqrt_rounded;
using accumcheck::models::truncate_to_bits;

constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// Integers weighted toward the edges: small values, the int64 limits and their neighbours, powers of two.
rc::Gen<std::int64_t> interesting_int64() {
  return rc::gen::weightedOneOf<std::int64_t>({
      {3, rc::gen::element<std::int64_t>(0, 1, -1, 2, -2, 3, 10, kInt64Max, kInt64Min, kInt64Max - 1, kInt64Min + 1,
                                         std::int64_t{1} << 53, (std::int64_t{1} << 53) + 1, 3037000499)},
      {3, rc::gen::inRange<std::int64_t>(-100, 101)},
      {2, rc::gen::map(rc::gen::pair(rc::gen::inRange(0, 63), rc::gen::inRange<std::int64_t>(-2, 3)),
                       [](const std::pair<int, std::int64_t>& p) { return (std::int64_t{1} << p.first) + p.second; })},
      {2, rc::gen::arbitrary<std::int64_t>()},
  });
}

rc::Gen<std::int64_t> nonzero_int64() {
  return rc::gen::suchThat(interesting_int64(), [](std::int64_t x) { return x != 0; });
}

// Rationals: int64 fractions, huge integers and tiny fractions beyond int64, and dyadic values.
rc::Gen<Rational> interesting_rational() {
  return rc::gen::weightedOneOf<Rational>({
      {4, rc::gen::apply([](std::int64_t n, std::int64_t d) { return Rational(n, d); }, interesting_int64(),
                         nonzero_int64())},
      {2, rc::gen::apply([](std::int64_t a, std::int64_t b, std::int64_t c) { return Rational(a) * Rational(b) + Rational(c); },
                         interesting_int64(), interesting_int64(), interesting_int64())},
      {2, rc::gen::apply([](std::int64_t n, std::int64_t d1, std::int64_t d2) { return Rational(n) / (Rational(d1) * Rational(d2)); },
                         interesting_int64(), nonzero_int64(), nonzero_int64())},
      {1, rc::gen::apply([](std::int64_t m, int e) { return Rational(m) * pow2(e); }, interesting_int64(),
                         rc::gen::inRange(-200, 201))},
  });
}

// Finite doubles: every bit pattern is possible, with extra weight on zero, signs, subnormals, extremes.
rc::Gen<double> interesting_double() {
  return rc::gen::weightedOneOf<double>({
      {2, rc::gen::element(0.0, -0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, std::numeric_limits<double>::denorm_min(),
                           -std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::min(),
                           std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(),
                           std::numeric_limits<double>::epsilon(), 9007199254740993.0)},
      {3, rc::gen::suchThat(rc::gen::map(rc::gen::arbitrary<std::uint64_t>(),
                                         [](std::uint64_t bits) { return std::bit_cast<double>(bits); }),
                            [](double x) { return std::isfinite(x); })},
      {2, rc::gen::map(rc::gen::arbitrary<std::int32_t>(), [](std::int32_t x) { return x / 7.0; })},
  });
}

// Exact midpoints between neighbouring doubles, where rounding to nearest has to break a tie, and values a
// hair either side of them.
rc::Gen<Rational> near_double_midpoint() {
  return rc::gen::apply(
      [](double d, int side) {
        const double up = std::nextafter(d, std::numeric_limits<double>::infinity());
        Rational mid = (Rational::from_double(d) + Rational::from_double(up)) / Rational(2);
        if (side != 0) mid += Rational(side) * pow2(-1200);
        return mid;
      },
      rc::gen::suchThat(interesting_double(),
                        [](double d) { return d != std::numeric_limits<double>::max() && std::abs(d) < 1e300; }),
      rc::gen::element(-1, 0, 1));
}

bool is_integer(const Rational& x) { return x.is_integer(); }

// True when |q - d| <= |q - e| for the double neighbours e of d: d is a nearest double to q.
bool is_nearest_double(const Rational& q, double d) {
  const Rational error = abs(q - Rational::from_double(d));
  for (double neighbour : {std::nextafter(d, -std::numeric_limits<double>::infinity()),
                           std::nextafter(d, std::numeric_limits<double>::infinity())}) {
    if (!std::isfinite(neighbour)) continue;
    if (abs(q - Rational::from_double(neighbour)) < error) return false;
  }
  return true;
}

bool mantissa_is_even(double d) { return (std::bit_cast<std::uint64_t>(d) & 1) == 0; }

}  // namespace

RC_GTEST_PROP(Rational, to_string_then_parse_is_identity, ()) {
  const Rational x = *interesting_rational();
  RC_ASSERT(Rational::parse(x.to_string()) == x);
}

RC_GTEST_PROP(Rational, parse_reads_a_decimal_exactly, ()) {
  // Write m / 10^k by hand as a decimal ("-12.345"), and check that parse gives m / 10^k exactly.
  const std::int64_t m = *interesting_int64();
  const int k = *rc::gen::inRange(0, 25);
  std::string digits = std::to_string(m);
  const bool negative = digits[0] == '-';
  if (negative) digits.erase(0, 1);
  if (static_cast<int>(digits.size()) <= k) digits.insert(0, static_cast<std::size_t>(k) + 1 - digits.size(), '0');
  const std::string text =
      (negative ? "-" : "") + digits.substr(0, digits.size() - k) + "." + digits.substr(digits.size() - k);
  Rational ten_to_k(1);
  for (int i = 0; i < k; ++i) ten_to_k *= Rational(10);
  RC_LOG() << "text " << text << "\n";
  RC_ASSERT(Rational::parse(text) == Rational(m) / ten_to_k);
}

TEST(Rational, parse_rejects_malformed_text) {
  for (const char* text : {"", "-", "+", ".", "-.", "abc", "1/0", "1.2.3", "--1", "1/", "1.-5", "0x10", "1e5"}) {
    EXPECT_THROW(Rational::parse(text), std::invalid_argument) << "text '" << text << "'";
  }
  EXPECT_EQ(Rational::parse("+1.25"), Rational(5, 4));
  EXPECT_EQ(Rational::parse("-6/4"), Rational(-3, 2));
}

RC_GTEST_PROP(Rational, from_double_is_exact, ()) {
  // Every finite double is m * 2^e with e >= -1074: the conversion must be that dyadic rational exactly,
  // so it times 2^1074 is an integer, and converting back gives the same double.
  const double d = *interesting_double();
  const Rational x = Rational::from_double(d);
  RC_ASSERT(is_integer(x * pow2(1074)));
  RC_ASSERT(x.to_double() == d);
  RC_ASSERT(x.sign() == (d > 0) - (d < 0));
}

TEST(Rational, from_double_rejects_non_finite_values) {
  EXPECT_THROW(Rational::from_double(std::numeric_limits<double>::infinity()), std::domain_error);
  EXPECT_THROW(Rational::from_double(-std::numeric_limits<double>::infinity()), std::domain_error);
  EXPECT_THROW(Rational::from_double(std::numeric_limits<double>::quiet_NaN()), std::domain_error);
}

RC_GTEST_PROP(Rational, to_double_is_a_nearest_double, ()) {
  const Rational q = *rc::gen::weightedOneOf<Rational>({{1, interesting_rational()}, {1, near_double_midpoint()}});
  const double d = q.to_double();
  RC_ASSERT(std::isfinite(d));
  RC_ASSERT(is_nearest_double(q, d));
}

RC_GTEST_PROP(Rational, to_double_breaks_ties_to_even, ()) {
  // rational.h promises round to nearest, ties to even: at an exact midpoint the even neighbour wins.
  const double d = *rc::gen::suchThat(interesting_double(), [](double x) {
    return x != std::numeric_limits<double>::max() && x != std::numeric_limits<double>::lowest();
  });
  const double up = std::nextafter(d, std::numeric_limits<double>::infinity());
  const Rational mid = (Rational::from_double(d) + Rational::from_double(up)) / Rational(2);
  const double expected = mantissa_is_even(d) ? d : up;
  RC_LOG() << "midpoint of " << d << " and " << up << "\n";
  // Zero has an even mantissa and its neighbours odd ones; compare values so that -0.0 == 0.0.
  RC_ASSERT(mid.to_double() == expected);
}

RC_GTEST_PROP(Rational, sqrt_rounded_is_exact_for_perfect_squares, ()) {
  const Rational root = abs(Rational(*interesting_int64(), *nonzero_int64()));
  const int bits = *rc::gen::inRange(0, 130);
  RC_ASSERT(sqrt_rounded(root * root, bits) == root);
}

RC_GTEST_PROP(Rational, sqrt_rounded_brackets_the_root, ()) {
  // r = floor(sqrt(x) * 2^b) / 2^b means r^2 <= x < (r + 2^-b)^2 with r a multiple of 2^-b; an exact rational
  // root also satisfies the inequalities. Checked exactly, squaring instead of taking roots.
  const Rational x = abs(*interesting_rational());
  const int bits = *rc::gen::element(0, 1, 2, 31, 32, 53, 64, 100);
  const Rational r = sqrt_rounded(x, bits);
  const Rational step = pow2(-bits);
  RC_ASSERT(r.sign() >= 0);
  RC_ASSERT(r * r <= x);
  RC_ASSERT(x < (r + step) * (r + step));
  if (r * r != x) RC_ASSERT(is_integer(r * pow2(bits)));
}

TEST(Rational, sqrt_rounded_rejects_negative_input) {
  EXPECT_THROW(sqrt_rounded(Rational(-1, 4), 10), std::domain_error);
  EXPECT_EQ(sqrt_rounded(Rational(0), 10), Rational(0));
  EXPECT_EQ(sqrt_rounded(Rational(9, 4), 0), Rational(3, 2));  // exact root, finer than 2^-0
  EXPECT_EQ(sqrt_rounded(Rational(2), 2), Rational(5, 4));     // sqrt(2) = 1.414..., floor to quarters
}

RC_GTEST_PROP(Rational, truncate_to_bits_is_the_multiple_of_the_grain_toward_zero, ()) {
  // t = trunc(x 2^b) / 2^b: a multiple of 2^-b with the sign of x (or zero), |t| <= |x| < |t| + 2^-b, in lowest
  // terms (== compares canonical forms, and the inline path builds its result without a gcd). The bits include
  // 62 to 64, the edge of the inline path, and 100, which only GMP takes.
  const Rational x = *interesting_rational();
  const int bits = *rc::gen::element(0, 1, 2, 31, 53, 62, 63, 64, 100);
  const Rational t = truncate_to_bits(x, bits);
  RC_ASSERT(is_integer(t * pow2(bits)));
  RC_ASSERT(t.sign() == 0 || t.sign() == x.sign());
  RC_ASSERT(abs(t) <= abs(x));
  RC_ASSERT(abs(x) < abs(t) + pow2(-bits));
  RC_ASSERT(t == Rational(t.mpq()));  // canonical
  RC_ASSERT(truncate_to_bits(-x, bits) == -t);
  RC_ASSERT(truncate_to_bits(t, bits) == t);  // on the grid: unchanged
}

TEST(Rational, truncate_to_bits_by_hand) {
  EXPECT_EQ(truncate_to_bits(Rational(1, 3), 2), Rational(1, 4));     // 0.333... -> 0.25
  EXPECT_EQ(truncate_to_bits(Rational(-1, 3), 2), Rational(-1, 4));   // toward zero, not down
  EXPECT_EQ(truncate_to_bits(Rational(3, 4), 1), Rational(1, 2));
  EXPECT_EQ(truncate_to_bits(Rational(1, 8), 2), Rational(0));
  EXPECT_EQ(truncate_to_bits(Rational(5, 8), 3), Rational(5, 8));     // on the grid
  // 1/3 to 64 bits: (2^64 - 1) / 3 over 2^64, a denominator no int64 holds.
  const Rational third_64 = Rational(mpq_class(mpz_class("6148914691236517205"), mpz_class(1) << 64));
  EXPECT_EQ(truncate_to_bits(Rational(1, 3), 64), third_64);
  // (2^63 - 1) 2^64 = 1 mod 3, so 3 trunc(x) falls 2^-64 short of 2^63 - 1.
  EXPECT_EQ(truncate_to_bits(Rational(kInt64Max, 3), 64) * Rational(3), Rational(kInt64Max) - pow2(-64));
  EXPECT_THROW(truncate_to_bits(Rational(1, 3), -1), std::domain_error);
  EXPECT_THROW(truncate_to_bits(Rational(1, 3), 4097), std::domain_error);
}

TEST(Rational, arithmetic_past_the_exact_size_limit_throws) {
  using accumcheck::models::ExactSizeExceeded;
  using accumcheck::models::kExactBitsMax;
  const int half = static_cast<int>(kExactBitsMax) / 2;
  // 2^(b/2) squared has b + 1 bits, one past the limit; 2^(b/2 - 1) squared has b - 1 and is fine.
  EXPECT_THROW(pow2(half) * pow2(half), ExactSizeExceeded);
  EXPECT_THROW(pow2(-half) * pow2(-half), ExactSizeExceeded);  // the denominator too
  EXPECT_EQ(pow2(half - 1) * pow2(half - 1), pow2(2 * half - 2));
  EXPECT_THROW(pow2(half) * pow2(half) + Rational(1), ExactSizeExceeded);
}

RC_GTEST_PROP(Rational, pow2_is_two_to_the_exponent, ()) {
  const int e = *rc::gen::weightedOneOf<int>({{2, rc::gen::inRange(-70, 71)}, {1, rc::gen::inRange(-1100, 1101)}});
  RC_ASSERT(pow2(e + 1) == Rational(2) * pow2(e));
  RC_ASSERT(pow2(e) * pow2(-e) == Rational(1));
  if (e >= 0 && e <= 62) RC_ASSERT(pow2(e) == Rational(std::int64_t{1} << e));
}

RC_GTEST_PROP(Rational, int64_construction_is_exact_at_the_limits, ()) {
  const std::int64_t n = *interesting_int64();
  const std::int64_t d = *nonzero_int64();
  // Rational(n, d) * d == n, including INT64_MIN / -1 = 2^63, which no int64 holds.
  RC_ASSERT(Rational(n, d) * Rational(d) == Rational(n));
  RC_ASSERT(Rational(n).to_string() == std::to_string(n));
  RC_ASSERT(Rational(n, d).denominator() > 0);
}

RC_GTEST_PROP(Rational, arithmetic_inverts, ()) {
  const Rational a = *interesting_rational();
  const Rational b = *interesting_rational();
  RC_ASSERT((a + b) - b == a);
  RC_ASSERT(-(-a) == a);
  if (!b.is_zero()) RC_ASSERT((a * b) / b == a);
  RC_ASSERT((a < b) == ((a - b).sign() < 0));
  RC_ASSERT((a == b) == (a - b).is_zero());
}

// The storage (rational.h): a value is held as two int64 words exactly when its canonical parts fit them, and
// every operation, comparison, copy and move gives what GMP's mpq gives, across that boundary.
RC_GTEST_PROP(Rational, agrees_with_mpq_across_the_inline_boundary, ()) {
  const Rational a = *interesting_rational();
  const Rational b = *interesting_rational();
  const mpq_class qa = a.mpq(), qb = b.mpq();
  auto fits = [](const mpq_class& q) { return mpz_fits_slong_p(q.get_num_mpz_t()) && mpz_fits_slong_p(q.get_den_mpz_t()); };
  auto agrees = [&](const Rational& r, const mpq_class& q) {
    std::int64_t n = 0, d = 0;
    RC_ASSERT(r.mpq() == q);
    RC_ASSERT(r.fits_int64(n, d) == fits(q));
    RC_ASSERT(r.to_string() == q.get_str());
    RC_ASSERT(r.sign() == sgn(q));
    RC_ASSERT(r.is_integer() == (q.get_den() == 1));
  };
  agrees(a, qa);
  agrees(a + b, mpq_class(qa + qb));
  agrees(a - b, mpq_class(qa - qb));
  agrees(a * b, mpq_class(qa * qb));
  if (!b.is_zero()) agrees(a / b, mpq_class(qa / qb));
  agrees(-a, mpq_class(-qa));
  agrees(abs(a), mpq_class(abs(qa)));
  RC_ASSERT((a == b) == (qa == qb));
  RC_ASSERT((a < b) == (qa < qb));
  RC_ASSERT((a > b) == (qa > qb));
  RC_ASSERT(Rational(qa) == a);
  Rational c = a;  // copy, copy-assign over either kind, self-assign, move
  c = b;
  agrees(c, qb);
  c = a;
  c = *&c;
  agrees(c, qa);
  Rational moved = std::move(c);
  agrees(moved, qa);
  c = std::move(moved);
  agrees(c, qa);
  c += c;  // an operand that is also the result
  agrees(c, mpq_class(qa + qa));
}

TEST(Rational, the_int64_edges_sit_on_the_right_side_of_the_boundary) {
  std::int64_t n = 0, d = 0;
  EXPECT_TRUE(Rational(kInt64Min).fits_int64(n, d));
  EXPECT_FALSE((-Rational(kInt64Min)).fits_int64(n, d));       // 2^63
  EXPECT_FALSE(Rational(1, kInt64Min).fits_int64(n, d));       // -1/2^63: the denominator 2^63 does not fit
  EXPECT_TRUE(Rational(kInt64Min, kInt64Min).fits_int64(n, d));
  EXPECT_EQ(Rational(kInt64Min, kInt64Min), Rational(1));
  EXPECT_EQ(Rational(kInt64Min, -1).to_string(), "9223372036854775808");
  EXPECT_EQ(-(-Rational(kInt64Min)), Rational(kInt64Min));
  EXPECT_EQ(Rational(6, -4), Rational(-3, 2));
  EXPECT_EQ(Rational(0, -7).to_string(), "0");
  EXPECT_LT(Rational(kInt64Max, kInt64Max - 1), Rational(kInt64Max - 1, kInt64Max - 2));
}

TEST(Rational, division_by_zero_throws_domain_error) {
  EXPECT_THROW(Rational(1) / Rational(0), std::domain_error);
  EXPECT_THROW(Rational(1, 0), std::domain_error);
}

RC_GTEST_PROP(Rational, eigen_matrix_product_matches_the_definition, ()) {
  using Matrix = Eigen::Matrix<Rational, Eigen::Dynamic, Eigen::Dynamic>;
  const int rows = *rc::gen::inRange(1, 4), inner = *rc::gen::inRange(1, 4), cols = *rc::gen::inRange(1, 4);
  Matrix a(rows, inner), b(inner, cols);
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < inner; ++k) a(i, k) = *interesting_rational();
  for (int k = 0; k < inner; ++k)
    for (int j = 0; j < cols; ++j) b(k, j) = *interesting_rational();
  const Matrix c = a * b;
  RC_ASSERT(c.rows() == rows && c.cols() == cols);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      Rational sum(0);
      for (int k = 0; k < inner; ++k) sum += a(i, k) * b(k, j);
      RC_ASSERT(c(i, j) == sum);
    }
  }
  const Matrix ct = b.transpose() * a.transpose();
  RC_ASSERT(ct == c.transpose());
}
