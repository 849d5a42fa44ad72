// Properties of FastRational: every operation gives the value Rational gives, whether the operands are inline
// or promoted, and every result is canonical (inline exactly when it fits two int64 words, in lowest terms).
//
// Method: Rational (plain GMP) is the reference. Generators lean on the seams of the inline representation:
// INT64 limits, products and sums that overflow 64 or 128 bits, denominators near 2^63, equal denominators
// (the fast path), integers (the other fast path), cancellations, and promoted values right at the boundary
// (2^63, -2^63 - 1, 1/2^63) whose results may demote again.
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::models {
// RapidCheck prints counterexamples through showValue, found by argument-dependent lookup.
inline void showValue(const Rational& value, std::ostream& os) { os << value.to_string(); }
inline void showValue(const FastRational& value, std::ostream& os) {
  os << value.to_string() << (value.is_inline() ? " (inline)" : " (promoted)");
}
}  // namespace accumcheck::models

namespace {

// Generators are built once and shared (function-local statics): building one, with its table of
// Rational constants, costs more than drawing from it.

using accumcheck::models::FastRational;
using accumcheck::models::pow2;
using accumcheck::models::Rational;
using accumcheck::models::ScalarTraits;

constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

static_assert(sizeof(FastRational) == 16);
static_assert(ScalarTraits<FastRational>::exact && ScalarTraits<FastRational>::checked);
static_assert(ScalarTraits<FastRational>::name == "fast-rational");

// Integers weighted toward the edges: 0, +-1, the limits, sqrt(2^63) (where products start to overflow),
// 2^32 and 2^53 neighbourhoods, powers of two, and a share of uniform noise.
rc::Gen<std::int64_t> interesting_int64() {
  static const auto gen = rc::gen::weightedOneOf<std::int64_t>({
      {4, rc::gen::element<std::int64_t>(0, 1, -1, 2, -2, 3, kInt64Max, kInt64Min, kInt64Max - 1, kInt64Min + 1,
                                         3037000499, -3037000499, 3037000500, std::int64_t{1} << 32,
                                         -(std::int64_t{1} << 32), (std::int64_t{1} << 32) + 1, std::int64_t{1} << 62,
                                         -(std::int64_t{1} << 62))},
      {3, rc::gen::inRange<std::int64_t>(-20, 21)},
      {2, rc::gen::map(rc::gen::pair(rc::gen::inRange<std::int64_t>(0, 1000), rc::gen::arbitrary<bool>()),
                       [](const std::pair<std::int64_t, bool>& p) { return p.second ? kInt64Max - p.first : kInt64Min + p.first; })},
      {2, rc::gen::map(rc::gen::tuple(rc::gen::inRange(0, 63), rc::gen::inRange<std::int64_t>(-2, 3), rc::gen::arbitrary<bool>()),
                       [](const std::tuple<int, std::int64_t, bool>& t) {
                         const std::int64_t v = (std::int64_t{1} << std::get<0>(t)) + std::get<1>(t);
                         return std::get<2>(t) ? -v : v;
                       })},
      {3, rc::gen::arbitrary<std::int64_t>()},
  });
  return gen;
}

// Positive denominators: 1 (the integer fast path), small primes, powers of two, and values near 2^63 whose
// products need all 126 bits.
rc::Gen<std::int64_t> interesting_denominator() {
  static const auto gen = rc::gen::weightedOneOf<std::int64_t>({
      {4, rc::gen::element<std::int64_t>(1, 2, 3, 4, 6, 7, 12, kInt64Max, kInt64Max - 1, kInt64Max - 2,
                                         std::int64_t{1} << 62, (std::int64_t{1} << 62) + 1, 3037000499,
                                         std::int64_t{1} << 32, 4294967295)},
      {3, rc::gen::inRange<std::int64_t>(1, 40)},
      {2, rc::gen::map(rc::gen::inRange<std::int64_t>(0, 1000), [](std::int64_t k) { return kInt64Max - k; })},
      {1, rc::gen::map(rc::gen::inRange(0, 63), [](int e) { return std::int64_t{1} << e; })},
      {2, rc::gen::map(rc::gen::arbitrary<std::int64_t>(), [](std::int64_t x) {
         return x == kInt64Min ? kInt64Max : (x < 0 ? -x : (x == 0 ? 1 : x));
       })},
  });
  return gen;
}

rc::Gen<FastRational> inline_fast_rational() {
  static const auto gen = rc::gen::apply([](std::int64_t n, std::int64_t d) { return FastRational(n, d); }, interesting_int64(),
                        interesting_denominator());
  return gen;
}

// Values that do not fit inline, built in Rational so that the generator does not depend on the code under
// test. Several sit just past the boundary, so that operations on them demote again.
rc::Gen<Rational> promoted_rational() {
  static const Rational two_63 = pow2(63);
  static const auto gen = rc::gen::weightedOneOf<Rational>({
      {3, rc::gen::element(two_63, -two_63 - Rational(1), Rational(1) / two_63, Rational(-1) / two_63,
                           two_63 / Rational(3), (two_63 + Rational(1)) / two_63, Rational(kInt64Max) / (two_63 + Rational(1)),
                           -two_63 * two_63, pow2(64) + Rational(1), Rational(1) / (pow2(64) - Rational(1)))},
      // Integers of magnitude >= 2^63: k * 2^64 + m with k != 0.
      {2, rc::gen::apply([](std::int64_t k, std::int64_t m) { return Rational(k) * pow2(64) + Rational(m); },
                         rc::gen::suchThat(interesting_int64(), [](std::int64_t k) { return k != 0; }), interesting_int64())},
      // Denominators >= 2^63: n / (2^63 + j) is already in lowest terms when n = +-1.
      {2, rc::gen::apply([](bool negative, std::int64_t j) { return Rational(negative ? -1 : 1) / (two_63 + Rational(j)); },
                         rc::gen::arbitrary<bool>(), rc::gen::inRange<std::int64_t>(0, 1000))},
      // Sums of two fractions with large coprime-ish denominators: ~126-bit denominators.
      {2, rc::gen::apply([](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) { return Rational(a, b) + Rational(c, d); },
                         interesting_int64(), interesting_denominator(), interesting_int64(), interesting_denominator())},
  });
  return gen;
}

rc::Gen<FastRational> promoted_fast_rational() {
  static const auto gen = rc::gen::map(promoted_rational(), [](const Rational& q) { return FastRational(q); });
  return gen;
}

rc::Gen<FastRational> any_fast_rational() {
  static const auto gen = rc::gen::weightedOneOf<FastRational>({{3, inline_fast_rational()}, {1, promoted_fast_rational()}});
  return gen;
}

// Values whose denominator is a power of two, 2^0 to 2^200, over numerators of one to three words: inline
// ones, and promoted ones like those on Adam's 2^-64 grid. Two of them take FastRational's dyadic GMP path.
rc::Gen<FastRational> dyadic_fast_rational() {
  static const auto gen = rc::gen::apply(
      [](std::int64_t low, std::int64_t high, int words, int exponent) {
        Rational numerator(low);
        if (words > 1) numerator += Rational(high) * pow2(64);
        if (words > 2) numerator += Rational(high) * pow2(128);
        return FastRational(numerator * pow2(-exponent));
      },
      interesting_int64(), interesting_int64(), rc::gen::inRange(1, 4),
      rc::gen::weightedOneOf<int>({{2, rc::gen::inRange(0, 70)}, {1, rc::gen::inRange(0, 201)}}));
  return gen;
}

using Pair = std::pair<FastRational, FastRational>;

// Pairs whose results land exactly on the int64 boundary or one step past it, so that every comparison in
// the fits-inline test is exercised at equality: (e/d) * d = e, (e/d) / (1/d) = e, e/d + k/d near e/d,
// e +- 1 and e / -1 for integers, and k/2^62 times or divided by 2 (denominator 2^63, just too big).
rc::Gen<Pair> boundary_pair() {
  static const auto gen = rc::gen::apply(
      [](std::int64_t e, std::int64_t d, int shape, std::int64_t k) -> Pair {
        const FastRational x(e, d);
        switch (shape) {
          case 0: return {x, FastRational(d)};
          case 1: return {x, FastRational(1, d)};
          case 2: return {x, FastRational(k, d)};
          case 3: return {FastRational(e), FastRational(k == 0 ? 1 : k)};
          default: return {FastRational(k | 1, std::int64_t{1} << 62), FastRational(1, k < 0 ? -2 : 2)};
        }
      },
      rc::gen::element(kInt64Min, kInt64Min + 1, kInt64Min + 2, kInt64Max, kInt64Max - 1, kInt64Max - 2),
      rc::gen::element<std::int64_t>(1, 2, 3, 5, 7, 9), rc::gen::inRange(0, 5), rc::gen::inRange<std::int64_t>(-2, 3));
  return gen;
}

// Operand pairs for the binary operations, each shape aimed at one code path.
rc::Gen<Pair> operand_pair() {
  static const auto gen = rc::gen::weightedOneOf<Pair>({
      {2, boundary_pair()},
      {4, rc::gen::pair(any_fast_rational(), any_fast_rational())},
      // Both integers: the __builtin_*_overflow fast path.
      {2, rc::gen::apply([](std::int64_t a, std::int64_t b) { return Pair(FastRational(a), FastRational(b)); },
                         interesting_int64(), interesting_int64())},
      // The same denominator before reduction; with odd numerators over a power of two, also after it.
      {2, rc::gen::apply([](std::int64_t a, std::int64_t b, std::int64_t d) { return Pair(FastRational(a, d), FastRational(b, d)); },
                         interesting_int64(), interesting_int64(), interesting_denominator())},
      {2, rc::gen::apply([](std::int64_t a, std::int64_t b, int e) {
         const std::int64_t d = std::int64_t{1} << e;
         return Pair(FastRational(a | 1, d), FastRational(b | 1, d));
       }, interesting_int64(), interesting_int64(), rc::gen::inRange(1, 63))},
      {3, rc::gen::pair(dyadic_fast_rational(), dyadic_fast_rational())},
      // Nested denominators, b and usually b m (x and (x + k) / m), inline and promoted, in either order: the GMP
      // sum that takes one gcd instead of two.
      {3, rc::gen::apply([](const FastRational& x, std::int64_t k, std::int64_t m, bool swap) {
         const FastRational y = (x + FastRational(k)) / FastRational(m);
         return swap ? Pair(y, x) : Pair(x, y);
       }, any_fast_rational(), interesting_int64(), interesting_denominator(), rc::gen::arbitrary<bool>())},
      // An inline value and a promoted one of one limb over 2^e, in either order (the clip coefficient on its 2^-64
      // grid times a gradient's value): the product's one-word path, its denominator on both sides of 127 bits.
      {3, rc::gen::apply([](const FastRational& x, std::int64_t limb, bool high_bit, int e, bool swap) {
         const Rational numerator = Rational(limb | 1) + (high_bit ? pow2(63) : Rational(0));
         const FastRational y(numerator * pow2(-e));
         return swap ? Pair(y, x) : Pair(x, y);
       }, inline_fast_rational(), interesting_int64(), rc::gen::arbitrary<bool>(),
         rc::gen::weightedOneOf<int>({{3, rc::gen::inRange(60, 70)}, {2, rc::gen::inRange(0, 140)}}), rc::gen::arbitrary<bool>())},
      // Cancellations and reciprocals: x - x, x + (-x), x * (1/x), x / x.
      {1, rc::gen::map(any_fast_rational(), [](const FastRational& x) { return Pair(x, x); })},
      {1, rc::gen::map(any_fast_rational(), [](const FastRational& x) { return Pair(x, -x); })},
      {1, rc::gen::map(rc::gen::suchThat(any_fast_rational(), [](const FastRational& x) { return !x.is_zero(); }),
                       [](const FastRational& x) { return Pair(x, FastRational(1) / x); })},
  });
  return gen;
}

bool fits_inline(const Rational& q) {
  return mpz_fits_slong_p(q.mpq().get_num_mpz_t()) != 0 && mpz_fits_slong_p(q.mpq().get_den_mpz_t()) != 0;
}

// x holds the value `expected` in canonical form: inline iff it fits, stored parts in lowest terms.
void assert_holds(const FastRational& x, const Rational& expected) {
  const Rational value = x.to_rational();
  RC_ASSERT(value == expected);
  RC_ASSERT(x.is_inline() == fits_inline(expected));
  // numerator() and denominator() read the stored parts, while to_rational() canonicalises: equal parts
  // mean the stored form was already canonical.
  RC_ASSERT(x.numerator() == expected.numerator());
  RC_ASSERT(x.denominator() == expected.denominator());
}

}  // namespace

RC_GTEST_PROP(FastRational, constructor_from_parts_matches_rational, ()) {
  const std::int64_t n = *interesting_int64();
  const std::int64_t d = *rc::gen::weightedOneOf<std::int64_t>(
      {{3, interesting_denominator()},
       {1, rc::gen::map(interesting_denominator(), [](std::int64_t x) { return -x; })},
       {1, rc::gen::just(kInt64Min)}});
  assert_holds(FastRational(n, d), Rational(n, d));
}

// n / 2^e from a 128-bit n: trailing zeros against small and large exponents, results inline and promoted.
RC_GTEST_PROP(FastRational, from_dyadic_matches_rational, ()) {
  const std::int64_t high = *rc::gen::weightedOneOf<std::int64_t>(
      {{2, rc::gen::element<std::int64_t>(0, -1)}, {1, interesting_int64()}});
  const std::int64_t low = *interesting_int64();
  const int zeros = *rc::gen::inRange(0, 64);
  const int exponent = *rc::gen::weightedOneOf<int>({{3, rc::gen::inRange(0, 70)}, {1, rc::gen::inRange(0, 200)}});
  using accumcheck::models::detail::Int128;
  using accumcheck::models::detail::UInt128;
  const Int128 n = static_cast<Int128>((static_cast<UInt128>(static_cast<std::uint64_t>(high)) << 64) |
                                       static_cast<std::uint64_t>(low)) / (Int128{1} << zeros) * (Int128{1} << zeros);
  // n's value from its two words: the signed high word times 2^64 plus the unsigned low word.
  const auto word = static_cast<std::uint64_t>(static_cast<UInt128>(n));
  const Rational value = Rational(static_cast<long long>(n >> 64)) * pow2(64) +
                         Rational(static_cast<long long>(word >> 32)) * pow2(32) +
                         Rational(static_cast<long long>(word & 0xffffffffU));
  assert_holds(FastRational::from_dyadic(n, exponent), value * pow2(-exponent));
}

RC_GTEST_PROP(FastRational, conversion_from_rational_round_trips, ()) {
  const Rational q = *rc::gen::weightedOneOf<Rational>(
      {{1, promoted_rational()}, {1, rc::gen::map(inline_fast_rational(), [](const FastRational& x) { return x.to_rational(); })}});
  const FastRational x(q);
  assert_holds(x, q);
  RC_ASSERT(x.to_string() == q.to_string());
  RC_ASSERT(FastRational::parse(x.to_string()) == x);
}

RC_GTEST_PROP(FastRational, addition_matches_rational, ()) {
  const auto [a, b] = *operand_pair();
  assert_holds(a + b, a.to_rational() + b.to_rational());
}

RC_GTEST_PROP(FastRational, subtraction_matches_rational, ()) {
  const auto [a, b] = *operand_pair();
  assert_holds(a - b, a.to_rational() - b.to_rational());
}

RC_GTEST_PROP(FastRational, multiplication_matches_rational, ()) {
  const auto [a, b] = *operand_pair();
  assert_holds(a * b, a.to_rational() * b.to_rational());
}

RC_GTEST_PROP(FastRational, division_matches_rational, ()) {
  const auto [a, b] = *operand_pair();
  if (b.is_zero()) {
    RC_ASSERT_THROWS_AS(a / b, std::domain_error);
    return;
  }
  assert_holds(a / b, a.to_rational() / b.to_rational());
}

RC_GTEST_PROP(FastRational, negation_and_abs_match_rational, ()) {
  const FastRational a = *any_fast_rational();
  assert_holds(-a, -a.to_rational());
  assert_holds(abs(a), abs(a.to_rational()));
  assert_holds(+a, a.to_rational());
}

RC_GTEST_PROP(FastRational, compound_assignment_matches_the_binary_operator, ()) {
  const auto [a, b] = *operand_pair();
  FastRational x = a;
  x += b;
  RC_ASSERT(x == a + b);
  x = a;
  x -= b;
  RC_ASSERT(x == a - b);
  x = a;
  x *= b;
  RC_ASSERT(x == a * b);
  if (!b.is_zero()) {
    x = a;
    x /= b;
    RC_ASSERT(x == a / b);
  }
  // Aliasing: the operand is the target.
  x = a;
  x += x;
  RC_ASSERT(x == a + a);
  x = a;
  x *= x;
  RC_ASSERT(x == a * a);
}

RC_GTEST_PROP(FastRational, equality_and_ordering_agree_with_rational, ()) {
  const auto [a, b] = *operand_pair();
  const Rational qa = a.to_rational(), qb = b.to_rational();
  RC_ASSERT((a == b) == (qa == qb));
  RC_ASSERT((a <=> b) == (qa <=> qb));
  RC_ASSERT((a < b) == (qa < qb));
  RC_ASSERT(a == a);
  // By the canonical invariant an inline value never equals a promoted one.
  if (a.is_inline() != b.is_inline()) RC_ASSERT(a != b);
}

// models::matrices_equal compares a tensor's storage in one memcmp before any value (values_equal): equal words
// are equal values, and words that differ must still compare the values where both are promoted in different
// blocks. B is A with each value copied (a shared block), rebuilt (an equal value, a block of its own) or left,
// and perhaps one value changed; the answer must be the elementwise one, and the same for Rational.
RC_GTEST_PROP(FastRational, matrices_equal_is_elementwise_equality_whatever_the_blocks, ()) {
  const auto values = *rc::gen::container<std::vector<FastRational>>(*rc::gen::inRange(1, 9), any_fast_rational());
  const auto n = static_cast<Eigen::Index>(values.size());
  accumcheck::models::Matrix<FastRational> a(n, 1), b(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) {
    a(i) = values[static_cast<std::size_t>(i)];
    const bool rebuild = *rc::gen::arbitrary<bool>();
    b(i) = rebuild ? (a(i) * FastRational(3)) / FastRational(3) : a(i);  // equal; a new block where promoted
    RC_ASSERT(b(i) == a(i));
  }
  const bool change = *rc::gen::arbitrary<bool>();
  if (change) {
    const auto at = *rc::gen::inRange<Eigen::Index>(0, n);
    b(at) = b(at) + FastRational(1);
  }
  bool expected = true;
  for (Eigen::Index i = 0; i < n; ++i) expected = expected && a(i).to_rational() == b(i).to_rational();
  RC_ASSERT(expected == !change);
  RC_ASSERT(accumcheck::models::matrices_equal(a, b) == expected);
  RC_ASSERT(accumcheck::models::matrices_equal(b, a) == expected);
  accumcheck::models::Matrix<Rational> qa(n, 1), qb(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) {
    qa(i) = a(i).to_rational();
    qb(i) = (b(i).to_rational() * Rational(5)) / Rational(5);
  }
  RC_ASSERT(accumcheck::models::matrices_equal(qa, qb) == expected);
}

RC_GTEST_PROP(FastRational, sign_zero_and_integer_tests_match_rational, ()) {
  const FastRational a = *any_fast_rational();
  const Rational q = a.to_rational();
  RC_ASSERT(a.sign() == q.sign());
  RC_ASSERT(a.is_zero() == q.is_zero());
  RC_ASSERT(a.is_integer() == q.is_integer());
}

RC_GTEST_PROP(FastRational, to_double_and_to_string_match_rational, ()) {
  const FastRational a = *any_fast_rational();
  const Rational q = a.to_rational();
  RC_ASSERT(a.to_string() == q.to_string());
  // Rational::to_double is the reference; the inline shortcut (two exact doubles, one IEEE division) must
  // give the same nearest double. Both are correctly rounded away from ties, and a quotient of two
  // 53-bit integers is never exactly halfway between doubles.
  RC_ASSERT(a.to_double() == q.to_double());
}

RC_GTEST_PROP(FastRational, copy_and_move_preserve_the_value, ()) {
  const FastRational a = *any_fast_rational();
  const FastRational b = *any_fast_rational();
  const Rational qa = a.to_rational(), qb = b.to_rational();

  FastRational copy(a);
  assert_holds(copy, qa);
  FastRational moved(std::move(copy));
  assert_holds(moved, qa);
  // Moved-from: valid but unspecified (zero if it was promoted, unchanged if inline); it must be canonical
  // and reusable.
  assert_holds(copy, copy.to_rational());  // NOLINT(bugprone-use-after-move)
  copy = b;
  assert_holds(copy, qb);

  // Assignment between every pair of representations: inline <- promoted, promoted <- inline, and both.
  FastRational target = b;
  target = a;
  assert_holds(target, qa);
  target = b;
  assert_holds(target, qb);
  FastRational source = a;
  target = std::move(source);
  assert_holds(target, qa);
  assert_holds(source, source.to_rational());  // NOLINT(bugprone-use-after-move)

  // Self-assignment keeps the value and (under ASan) frees nothing it still uses.
  FastRational& alias = target;
  target = alias;
  assert_holds(target, qa);
  target = std::move(alias);
  assert_holds(target, qa);

  // A container reallocating moves every element.
  std::vector<FastRational> values;
  for (int i = 0; i < 9; ++i) values.push_back(i % 2 == 0 ? a : b);
  for (int i = 0; i < 9; ++i) assert_holds(values[static_cast<std::size_t>(i)], i % 2 == 0 ? qa : qb);
}

// A promoted value's block is shared by its copies and by its conversions to and from Rational: each holder keeps
// the value whatever the order in which the others are assigned over, moved from or destroyed (ASan would see a
// block freed while held, or never freed).
TEST(FastRational, copies_and_conversions_of_a_promoted_value_hold_it_whatever_goes_first) {
  const Rational q = Rational::parse("-123456789012345678901234567891/98765432109876543210987654323");
  const Rational r = Rational::parse("1/18446744073709551617");
  std::vector<FastRational> holders;
  Rational back;
  {
    const FastRational original(q);
    ASSERT_FALSE(original.is_inline());
    for (int i = 0; i < 4; ++i) holders.push_back(original);
    back = original.to_rational();
  }  // the value that made the block is gone; its holders are not
  for (const FastRational& h : holders) EXPECT_EQ(h.to_rational(), q);
  EXPECT_EQ(back, q);
  holders[0] = holders[1];             // two holders of the one block
  holders[2] = std::move(holders[3]);  // the block moves; holders[3] is left inline
  EXPECT_TRUE(holders[3].is_inline());
  holders[1] = FastRational(r);        // another block over a holder of the first
  holders[3] = holders[1];
  EXPECT_EQ(holders[0].to_rational(), q);
  EXPECT_EQ(holders[2].to_rational(), q);
  EXPECT_EQ(holders[1].to_rational(), r);
  EXPECT_EQ(holders[3].to_rational(), r);
  holders.erase(holders.begin());
  holders[1] = FastRational(7);        // the last FastRational holder of q gives it up
  EXPECT_EQ(back, q);                  // the Rational still holds it
  EXPECT_EQ(FastRational(back).to_rational(), q);
}

// Copies and releases of one promoted value on several threads at once: its count of holders is atomic, so
// every copy reads the value and the block is freed once, after the last holder (ASan reports otherwise).
TEST(FastRational, a_promoted_value_is_copied_and_released_on_many_threads) {
  const Rational q = Rational::parse("340282366920938463463374607431768211457/170141183460469231731687303715884105729");
  const FastRational shared(q);
  ASSERT_FALSE(shared.is_inline());
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < mismatches.size(); ++t)
    threads.emplace_back([&shared, &q, &mismatches, t] {
      std::vector<FastRational> copies;
      for (int i = 0; i < 20000; ++i) {
        copies.push_back(shared);
        const Rational converted = copies.back().to_rational();
        if (!(converted == q) || !(FastRational(converted) == shared)) ++mismatches[t];
        if (copies.size() == 64) copies.clear();
      }
    });
  for (std::thread& thread : threads) thread.join();
  for (const int m : mismatches) EXPECT_EQ(m, 0);
  EXPECT_EQ(shared.to_rational(), q);
}

RC_GTEST_PROP(FastRational, division_by_zero_throws_domain_error, ()) {
  const FastRational a = *any_fast_rational();
  RC_ASSERT_THROWS_AS(a / FastRational(0), std::domain_error);
  FastRational x = a;
  RC_ASSERT_THROWS_AS(x /= FastRational(), std::domain_error);
  RC_ASSERT(x == a);  // a failed operation leaves the target unchanged
  RC_ASSERT_THROWS_AS(FastRational(*interesting_int64(), 0), std::domain_error);
}

RC_GTEST_PROP(FastRational, sqrt_matches_the_rational_sqrt, ()) {
  const FastRational a = abs(*any_fast_rational());
  assert_holds(ScalarTraits<FastRational>::sqrt(a), ScalarTraits<Rational>::sqrt(a.to_rational()));
  // Squares, where the inline root is taken, up to the int64 edge (3037000499^2 < 2^63 <= 3037000500^2), and their
  // neighbours one off, where it must not be.
  const FastRational r = abs(*any_fast_rational());
  const FastRational square = r * r;
  assert_holds(ScalarTraits<FastRational>::sqrt(square), ScalarTraits<Rational>::sqrt(square.to_rational()));
  if (square.is_inline()) RC_ASSERT(ScalarTraits<FastRational>::sqrt(square) == r);
  const FastRational off = square + FastRational(*rc::gen::element(-1, 1));
  if (off.sign() >= 0)
    assert_holds(ScalarTraits<FastRational>::sqrt(off), ScalarTraits<Rational>::sqrt(off.to_rational()));
}

// The root at every precision the limb path takes (0 to 64 fraction bits: an inline value's n 4^b from one limb to
// three), and past it, where sqrt_rounded itself answers, errors included.
RC_GTEST_PROP(FastRational, rounded_square_root_matches_sqrt_rounded_at_every_precision, ()) {
  const FastRational a = *any_fast_rational();
  const int bits = *rc::gen::oneOf(rc::gen::inRange(0, 65), rc::gen::element(-1, 65, 100, 4097));
  const bool fails = a.sign() < 0 || bits < 0 || bits > 4096;
  if (fails) {
    RC_ASSERT_THROWS_AS(a.rounded_square_root(bits), std::domain_error);
    RC_ASSERT_THROWS_AS(sqrt_rounded(a.to_rational(), bits), std::domain_error);
    return;
  }
  assert_holds(a.rounded_square_root(bits), sqrt_rounded(a.to_rational(), bits));
  const FastRational square = a * a;
  assert_holds(square.rounded_square_root(bits), sqrt_rounded(square.to_rational(), bits));
}

// Adam's update rounding: the promoted path truncates GMP's value in place, the inline one goes through Rational.
RC_GTEST_PROP(FastRational, truncation_matches_the_rational_truncation, ()) {
  const FastRational a = *any_fast_rational();
  const int bits = *rc::gen::oneOf(rc::gen::inRange(0, 130), rc::gen::element(62, 63, 64, 65, 4096));
  assert_holds(a.truncated_to_bits(bits), truncate_to_bits(a.to_rational(), bits));
  assert_holds(ScalarTraits<FastRational>::round_update(a), ScalarTraits<Rational>::round_update(a.to_rational()));
  RC_ASSERT_THROWS_AS(a.truncated_to_bits(*rc::gen::element(-1, 4097)), std::domain_error);
}

// Adam's update and the clip coefficient: x / (y + z) truncated, taken in one division, is the sum and the quotient
// in lowest terms truncated, for every sign, size and precision; a zero divisor throws as the division does.
RC_GTEST_PROP(FastRational, truncated_quotient_is_the_truncated_quotient, ()) {
  const FastRational x = *any_fast_rational();
  const FastRational y = *any_fast_rational();
  const FastRational z = *rc::gen::oneOf(any_fast_rational(), rc::gen::just(FastRational(0)), rc::gen::just(-y));
  const int bits = *rc::gen::oneOf(rc::gen::inRange(0, 130), rc::gen::element(62, 63, 64, 65, 4096));
  const Rational sum = y.to_rational() + z.to_rational();
  if (sum.is_zero()) {
    RC_ASSERT_THROWS_AS(FastRational::truncated_quotient(x, y, z, bits), std::domain_error);
    return;
  }
  assert_holds(FastRational::truncated_quotient(x, y, z, bits), truncate_to_bits(x.to_rational() / sum, bits));
  assert_holds(accumcheck::models::round_update_quotient(x, y, z), ScalarTraits<Rational>::round_update(x.to_rational() / sum));
  RC_ASSERT_THROWS_AS(FastRational::truncated_quotient(x, y, z, *rc::gen::element(-1, 4097)), std::domain_error);
}

// Near the exact size limit the unreduced quotient is not formed: what x / (y + z) would throw, this throws too,
// and a quotient whose common factors bring it back within the limit is still exact.
TEST(FastRational, truncated_quotient_at_the_exact_size_limit) {
  const Rational big = pow2(3000) + Rational(1);
  const FastRational zero(0), x(big), y(Rational(1) / (pow2(3000) + Rational(3)));
  EXPECT_THROW(static_cast<void>(x / y), accumcheck::models::ExactSizeExceeded);
  EXPECT_THROW(static_cast<void>(FastRational::truncated_quotient(x, y, zero, 64)), accumcheck::models::ExactSizeExceeded);
  const FastRational same(big), common_factor(big * Rational(1LL, 3LL));
  EXPECT_EQ(FastRational::truncated_quotient(same, FastRational(big), zero, 64), FastRational(1));
  EXPECT_EQ(FastRational::truncated_quotient(same, common_factor, zero, 64), FastRational(3));
  EXPECT_EQ(FastRational::truncated_quotient(same, common_factor, common_factor, 64), FastRational(3LL, 2LL));
  EXPECT_EQ(FastRational::truncated_quotient(FastRational(1), FastRational(3), zero, 2), FastRational(1LL, 4LL));
  EXPECT_EQ(FastRational::truncated_quotient(FastRational(-1), FastRational(1), FastRational(2), 2), FastRational(-1LL, 4LL));
}

TEST(FastRational, inline_square_roots_at_the_int64_edge) {
  // 3037000499 is the largest root whose square fits an int64.
  for (const std::int64_t root : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{3037000499}}) {
    const FastRational square(root * root);
    ASSERT_TRUE(square.exact_square_root().has_value()) << root;
    EXPECT_EQ(*square.exact_square_root(), FastRational(root));
    EXPECT_EQ(*FastRational(1LL, root * root + (root == 0)).exact_square_root(), FastRational(1LL, root + (root == 0)));
  }
  EXPECT_EQ(*FastRational(9LL, 4LL).exact_square_root(), FastRational(3LL, 2LL));
  EXPECT_FALSE(FastRational(2).exact_square_root().has_value());
  EXPECT_FALSE(FastRational(9LL, 8LL).exact_square_root().has_value());
  EXPECT_FALSE(FastRational(-4).exact_square_root().has_value());
  EXPECT_FALSE(FastRational(std::numeric_limits<std::int64_t>::max()).exact_square_root().has_value());
  EXPECT_EQ(ScalarTraits<FastRational>::sqrt(FastRational(std::numeric_limits<std::int64_t>::max())),
            FastRational(ScalarTraits<Rational>::sqrt(Rational(std::numeric_limits<std::int64_t>::max()))));
}

RC_GTEST_PROP(FastRational, internal_gcd_matches_std_gcd, ()) {
  // Every reduction rests on detail::gcd_u64 (binary, with a Euclid step and a power-of-two exit), so it is
  // checked on its own against std::gcd: zeros, ones, powers of two, equal values, multiples, and noise.
  const auto operand = rc::gen::weightedOneOf<std::uint64_t>({
      {2, rc::gen::element<std::uint64_t>(0, 1, 2, 3, std::uint64_t{1} << 63, ~std::uint64_t{0}, kInt64Max)},
      {2, rc::gen::map(rc::gen::inRange(0, 64), [](int e) { return std::uint64_t{1} << e; })},
      {2, rc::gen::inRange<std::uint64_t>(0, 2000)},
      {3, rc::gen::arbitrary<std::uint64_t>()},
  });
  const std::uint64_t x = *operand;
  const std::uint64_t y = *rc::gen::weightedOneOf<std::uint64_t>({
      {3, operand},
      {1, rc::gen::just(x)},
      {1, rc::gen::map(rc::gen::inRange<std::uint64_t>(1, 1000), [x](std::uint64_t k) { return x * k; })},
  });
  RC_ASSERT(accumcheck::models::detail::gcd_u64(x, y) == std::gcd(x, y));
}

TEST(FastRational, boundary_values_promote_and_demote) {
  const FastRational max(kInt64Max), min(kInt64Min, 1);
  EXPECT_TRUE(max.is_inline());
  EXPECT_TRUE(min.is_inline());
  const FastRational past_max = max + 1;  // 2^63: integer fast path overflows
  EXPECT_FALSE(past_max.is_inline());
  EXPECT_EQ(past_max.to_string(), "9223372036854775808");
  EXPECT_TRUE((past_max - 1).is_inline());  // and demotes back
  EXPECT_EQ(past_max - 1, max);
  EXPECT_FALSE((-min).is_inline());  // -(-2^63) = 2^63
  EXPECT_EQ(-(-min), min);
  EXPECT_TRUE((-(-min)).is_inline());
  EXPECT_FALSE(FastRational(1, kInt64Min).is_inline());  // -1/2^63: the denominator does not fit
  EXPECT_TRUE(FastRational(kInt64Min, kInt64Min).is_inline());
  EXPECT_EQ(FastRational(kInt64Min, kInt64Min), FastRational(1));
  EXPECT_EQ(FastRational(kInt64Min, -1).to_string(), "9223372036854775808");
  EXPECT_EQ(FastRational(6, -4).to_string(), "-3/2");
  // 1/(2^63 - 1) + 1/(2^63 - 1) over equal denominators, and a product whose denominator needs 126 bits.
  const FastRational tiny(1, kInt64Max);
  EXPECT_EQ((tiny + tiny).to_string(), "2/9223372036854775807");
  EXPECT_FALSE((tiny * tiny).is_inline());
  EXPECT_EQ((tiny * tiny) * FastRational(kInt64Max), tiny);
  EXPECT_TRUE(((tiny * tiny) * FastRational(kInt64Max)).is_inline());
  EXPECT_EQ(FastRational(3, 4) <=> FastRational(2, 3), std::strong_ordering::greater);
  EXPECT_EQ(past_max <=> max, std::strong_ordering::greater);
}

RC_GTEST_PROP(FastRational, eigen_matrix_product_matches_the_rational_product, ()) {
  using FastMatrix = Eigen::Matrix<FastRational, Eigen::Dynamic, Eigen::Dynamic>;
  using ExactMatrix = Eigen::Matrix<Rational, Eigen::Dynamic, Eigen::Dynamic>;
  const int rows = *rc::gen::inRange(1, 5), inner = *rc::gen::inRange(1, 5), cols = *rc::gen::inRange(1, 5);
  FastMatrix a(rows, inner), b(inner, cols);
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < inner; ++k) a(i, k) = *any_fast_rational();
  for (int k = 0; k < inner; ++k)
    for (int j = 0; j < cols; ++j) b(k, j) = *any_fast_rational();
  const ExactMatrix exact_a = a.unaryExpr([](const FastRational& x) { return x.to_rational(); });
  const ExactMatrix exact_b = b.unaryExpr([](const FastRational& x) { return x.to_rational(); });
  const FastMatrix c = a * b;
  const ExactMatrix exact_c = exact_a * exact_b;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) assert_holds(c(i, j), exact_c(i, j));
  // Reductions and elementwise expressions go through the same operators.
  assert_holds(a.sum(), exact_a.sum());
  const FastMatrix d = a + a;
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < inner; ++k) assert_holds(d(i, k), exact_a(i, k) * Rational(2));
}

// Inline dyadics as gradients hold them: small numerators over powers of two up to 2^62, and now and then a
// numerator near int64's edges, whose square takes a sum past __int128's bound.
rc::Gen<FastRational> gradient_like_dyadic() {
  return rc::gen::apply(
      [](std::int64_t small, std::int64_t wide, bool edge, int e) { return FastRational(edge ? wide : small, std::int64_t{1} << e); },
      rc::gen::inRange<std::int64_t>(-(1 << 20), 1 << 20), interesting_int64(),
      rc::gen::weightedOneOf<bool>({{9, rc::gen::just(false)}, {1, rc::gen::just(true)}}), rc::gen::inRange(0, 63));
}

// Values for the exact sums: gradient-like dyadics (the __int128 sum, and past its bound near int64's edges), any
// values (the GMP sum over a common denominator), values past 512 bits (the operations).
rc::Gen<FastRational> sum_term() {
  static const auto gen = rc::gen::weightedOneOf<FastRational>({
      {4, dyadic_fast_rational()},
      {3, gradient_like_dyadic()},
      {3, any_fast_rational()},
      {1, rc::gen::map(rc::gen::inRange(-700, 700), [](int e) { return FastRational(pow2(e)) + FastRational(1, 3); })},
      {1, rc::gen::map(rc::gen::inRange(40, 63), [](int e) { return FastRational((std::int64_t{1} << e) - 1, std::int64_t{1} << 62); })},
  });
  return gen;
}

// A gradient under a mean over tokens: n / (m 2^j) for a small token-count factor m, so that a list's common
// denominator stays within 63 bits (the inline path of sum_of_squares), and near its bounds for large n and j.
rc::Gen<FastRational> gradient_like_quotient() {
  return rc::gen::apply(
      [](std::int64_t n, std::int64_t m, int j) { return FastRational(n, m * (std::int64_t{1} << j)); },
      rc::gen::weightedOneOf<std::int64_t>({{4, rc::gen::inRange<std::int64_t>(-(1 << 30), 1 << 30)},
                                            {1, rc::gen::inRange<std::int64_t>(-(std::int64_t{1} << 62), std::int64_t{1} << 62)}}),
      rc::gen::inRange<std::int64_t>(1, 13), rc::gen::inRange(0, 50));
}

// sum_of_squares against squares added one at a time in Rational, for all-dyadic lists, gradient-like quotients and
// mixed lists; a sum past the exact size limit must be refused by both.
RC_GTEST_PROP(FastRational, sum_of_squares_matches_adding_each_square, ()) {
  const int kind = *rc::gen::inRange(0, 3);
  RC_TAG(kind == 0 ? "dyadic" : kind == 1 ? "quotients" : "mixed");
  const auto values = *rc::gen::container<std::vector<FastRational>>(
      kind == 0 ? gradient_like_dyadic() : kind == 1 ? gradient_like_quotient() : sum_term());
  Rational expected(0);
  try {
    for (const FastRational& v : values) expected += v.to_rational() * v.to_rational();
  } catch (const accumcheck::models::ExactSizeExceeded&) {
    RC_ASSERT_THROWS_AS(accumcheck::models::sum_of_squares(values), accumcheck::models::ExactSizeExceeded);
    return;
  }
  assert_holds(accumcheck::models::sum_of_squares(values), expected);
}

// sum_divided_by against adding in Rational and dividing, likewise.
RC_GTEST_PROP(FastRational, sum_divided_by_matches_adding_then_dividing, ()) {
  const auto values = *rc::gen::container<std::vector<FastRational>>(sum_term());
  const auto divisor = *rc::gen::inRange<std::int64_t>(1, 65);
  std::vector<const FastRational*> terms;
  for (const FastRational& v : values) terms.push_back(&v);
  Rational expected(0);
  try {
    for (const FastRational& v : values) expected += v.to_rational();
    expected /= Rational(static_cast<long long>(divisor));
  } catch (const accumcheck::models::ExactSizeExceeded&) {
    RC_ASSERT_THROWS_AS(accumcheck::models::sum_divided_by(terms, divisor), accumcheck::models::ExactSizeExceeded);
    return;
  }
  assert_holds(accumcheck::models::sum_divided_by(terms, divisor), expected);
}

// Squares near 2^128: with a = 2^63 - 1, 4 a^2 = 2^128 - 2^66 + 4, and (2^33)^2 = 2^66 takes the sum to 2^128 + 4,
// which a 128-bit sum would wrap to 4. The sum must leave 128 bits for GMP and stay exact.
TEST(FastRational, sum_of_squares_past_128_bits_is_exact) {
  const std::int64_t a = std::numeric_limits<std::int64_t>::max(), b = std::int64_t{1} << 33;
  const std::vector<FastRational> values = {FastRational(a), FastRational(a), FastRational(a), FastRational(a), FastRational(b)};
  const Rational ra(static_cast<long long>(a)), rb(static_cast<long long>(b));
  EXPECT_EQ(accumcheck::models::sum_of_squares(values).to_rational(), Rational(4) * ra * ra + rb * rb);
}

TEST(FastRational, sum_of_squares_of_nothing_is_zero_and_past_the_limit_throws) {
  EXPECT_EQ(accumcheck::models::sum_of_squares({}), FastRational(0));
  const int half = static_cast<int>(accumcheck::models::kExactBitsMax) / 2;
  const std::vector<FastRational> big = {FastRational(1, 3), FastRational(pow2(half))};
  EXPECT_THROW(accumcheck::models::sum_of_squares(big), accumcheck::models::ExactSizeExceeded);
}

TEST(FastRational, arithmetic_past_the_exact_size_limit_throws_as_rationals_does) {
  const int half = static_cast<int>(accumcheck::models::kExactBitsMax) / 2;
  const FastRational big(pow2(half)), tiny(pow2(-half));
  EXPECT_THROW(big * big, accumcheck::models::ExactSizeExceeded);
  EXPECT_THROW(tiny * tiny, accumcheck::models::ExactSizeExceeded);
  EXPECT_EQ(FastRational(pow2(half - 1)) * FastRational(pow2(half - 1)), FastRational(pow2(2 * half - 2)));
}
