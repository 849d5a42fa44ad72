// Properties of Fixed<F>: adds and subtracts are exact, products and quotients are the exact result rounded
// once to nearest with ties to even, and every overflow throws FixedPointOverflow exactly at the boundary.
//
// Method: an independent oracle in plain GMP. The test forms the exact rational raw / 2^F itself, computes the
// exact result, rounds it with its own round_half_even (floor plus a comparison of the fraction with 1/2,
// not the shift-and-remainder of the code under test), and then either expects that raw value or, when it
// does not fit an int64, expects the throw. Every property runs for several widths F (0, 1, 2, 31, 32, 62),
// because F = 0 (no rounding) and F = 62 (|x| < 2) are where off-by-one shifts hide. Generators lean on the
// int64 limits, products near 2^(63+F), odd multiples of powers of two (which make exact ties), and 0, +-1.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>

#include <Eigen/Core>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "models/fixed_point.h"
#include "models/rational.h"
#include "models/scalar.h"

namespace accumcheck::models {
// RapidCheck prints counterexamples through showValue, found by argument-dependent lookup.
inline void showValue(const Rational& value, std::ostream& os) { os << value.to_string(); }
template <int F>
void showValue(const Fixed<F>& value, std::ostream& os) {
  os << value.to_string() << " (fixed<" << F << "> raw " << value.raw() << ")";
}
}  // namespace accumcheck::models

namespace {

using accumcheck::models::Fixed;
using accumcheck::models::Fixed32;
using accumcheck::models::FixedPointOverflow;
using accumcheck::models::pow2;
using accumcheck::models::Rational;
using accumcheck::models::ScalarTraits;

constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

static_assert(ScalarTraits<Fixed32>::name == "fixed<32>");
static_assert(ScalarTraits<Fixed<0>>::name == "fixed<0>");
static_assert(ScalarTraits<Fixed<7>>::name == "fixed<7>");
static_assert(ScalarTraits<Fixed<62>>::name == "fixed<62>");
static_assert(!ScalarTraits<Fixed32>::exact && ScalarTraits<Fixed32>::checked);
static_assert(sizeof(Fixed32) == sizeof(std::int64_t));

// ---- The oracle: plain GMP, written independently of fixed_point-inl.h. ----

mpq_class exact_value(std::int64_t raw, int fraction_bits) {
  mpq_class q(mpz_class(static_cast<long>(raw)), mpz_class(1) << fraction_bits);
  q.canonicalize();
  return q;
}

// The integer nearest to q, ties to the even one.
mpz_class round_half_even(const mpq_class& q) {
  mpz_class floor_q;
  mpz_fdiv_q(floor_q.get_mpz_t(), q.get_num_mpz_t(), q.get_den_mpz_t());
  const mpq_class fraction = q - mpq_class(floor_q);  // in [0, 1)
  const mpq_class half(1, 2);
  if (fraction > half) return floor_q + 1;
  if (fraction < half) return floor_q;
  return mpz_even_p(floor_q.get_mpz_t()) ? floor_q : mpz_class(floor_q + 1);
}

bool fits_int64(const mpz_class& z) { return mpz_fits_slong_p(z.get_mpz_t()) != 0; }

// The raw result the oracle expects for an exact result: q * 2^F rounded, or nothing when it overflows.
struct Expected {
  bool fits;
  std::int64_t raw;
};
Expected expected_raw(const mpq_class& exact, int fraction_bits) {
  const mpz_class rounded = round_half_even(exact * mpq_class(mpz_class(1) << fraction_bits));
  if (!fits_int64(rounded)) return {false, 0};
  return {true, mpz_get_si(rounded.get_mpz_t())};
}

// ---- Generators ----
// Each is built once per width and shared (a function-local static): building costs more than drawing.

// Raw values for width F, weighted toward: 0, +-1 ulp, +-1.0, 0.5, the int64 limits and their neighbours,
// sqrt(2^(63+F)) (where products start to overflow), odd multiples of powers of two (exact ties), and noise.
template <int F>
rc::Gen<std::int64_t> interesting_raw() {
  const std::int64_t one = std::int64_t{1} << F;
  // floor(sqrt(2^(63+F))): raw * raw / 2^F crosses INT64_MAX around here.
  const auto product_edge = static_cast<std::int64_t>(std::sqrt(std::ldexp(1.0, 63 + F)));
  static const auto gen = rc::gen::weightedOneOf<std::int64_t>({
      {4, rc::gen::element<std::int64_t>(0, 1, -1, one, -one, one / 2 + (F == 0 ? 1 : 0), 3 * (one / 4), kInt64Max,
                                         kInt64Min, kInt64Max - 1, kInt64Min + 1, kInt64Max / 2, kInt64Min / 2)},
      {2, rc::gen::map(rc::gen::pair(rc::gen::inRange<std::int64_t>(0, 1 << 12), rc::gen::arbitrary<bool>()),
                       [](const std::pair<std::int64_t, bool>& p) { return p.second ? kInt64Max - p.first : kInt64Min + p.first; })},
      {2, rc::gen::map(rc::gen::pair(rc::gen::inRange<std::int64_t>(-1000, 1001), rc::gen::arbitrary<bool>()),
                       [product_edge](const std::pair<std::int64_t, bool>& p) {
                         return (p.second ? product_edge : -product_edge) + p.first;
                       })},
      // (odd m) * 2^e: a product of two of these has an exact tie whenever the exponents sum to F - 1.
      {3, rc::gen::map(rc::gen::tuple(rc::gen::inRange<std::int64_t>(-7, 8), rc::gen::inRange(0, 60)),
                       [](const std::tuple<std::int64_t, int>& t) {
                         return (2 * std::get<0>(t) + 1) * (std::int64_t{1} << std::get<1>(t));
                       })},
      {2, rc::gen::inRange<std::int64_t>(-(1 << 10), 1 << 10)},
      {3, rc::gen::arbitrary<std::int64_t>()},
  });
  return gen;
}

template <int F>
rc::Gen<Fixed<F>> interesting_fixed() {
  static const auto gen = rc::gen::map(interesting_raw<F>(), [](std::int64_t raw) { return Fixed<F>::from_raw(raw); });
  return gen;
}

// Operand pairs: independent values, plus an edge value (the limits, half the limits) against a unit-like
// value (+-1, +-1/2, +-2, +-1/4), in either order. Those produce results exactly at the boundary, such as
// INT64_MIN * 1.0 and INT64_MIN / 1.0 (which fit) next to INT64_MIN / -1.0 (which does not), and exact ties
// such as odd raws times 1/2.
template <int F>
rc::Gen<std::pair<Fixed<F>, Fixed<F>>> operand_pair() {
  using Pair = std::pair<Fixed<F>, Fixed<F>>;
  static const auto gen = [] {
    constexpr std::int64_t one = std::int64_t{1} << F;
    const auto edge = rc::gen::element(std::int64_t{kInt64Min}, kInt64Min + 1, kInt64Max, kInt64Max - 1,
                                       kInt64Min / 2, kInt64Max / 2, kInt64Max / 2 + 1, kInt64Min / 2 - 1);
    // The conditionals keep every unit in range at F = 0, 1 (no halves, quarters) and F = 62 (no 2.0).
    const auto unit = rc::gen::element(std::int64_t{one}, -one, F >= 1 ? one / 2 : 1, F >= 1 ? -one / 2 : -1,
                                       F <= 61 ? 2 * one : one, F <= 61 ? -2 * one : -one, F >= 2 ? one / 4 : 1,
                                       F >= 2 ? -one / 4 : -1);
    const auto edge_and_unit = rc::gen::apply(
        [](std::int64_t e, std::int64_t u, bool swap) {
          const Fixed<F> x = Fixed<F>::from_raw(e), y = Fixed<F>::from_raw(u);
          return swap ? Pair(y, x) : Pair(x, y);
        },
        edge, unit, rc::gen::arbitrary<bool>());
    return rc::gen::weightedOneOf<Pair>(
        {{3, rc::gen::pair(interesting_fixed<F>(), interesting_fixed<F>())}, {1, edge_and_unit}});
  }();
  return gen;
}

// Run body.template operator()<F>() for every width under test.
template <int... Fs, class Body>
void for_widths(Body&& body) {
  (body.template operator()<Fs>(), ...);
}
template <class Body>
void for_each_width(Body&& body) {
  for_widths<0, 1, 2, 31, 32, 62>(body);
}

// Either the operation returns the raw the oracle expects, or the oracle says overflow and it throws
// FixedPointOverflow; never anything else.
template <int F, class Operation>
void assert_matches(const Expected& expected, Operation&& operation) {
  if (expected.fits) {
    const Fixed<F> result = operation();
    RC_ASSERT(result.raw() == expected.raw);
  } else {
    RC_ASSERT_THROWS_AS(operation(), FixedPointOverflow);
  }
}

}  // namespace

RC_GTEST_PROP(Fixed, add_is_exact_and_throws_exactly_when_the_sum_leaves_the_range, ()) {
  for_each_width([]<int F>() {
    // Not a structured binding: the lambdas below capture a and b, which Clang 14 refuses for bindings.
    const auto operands = *operand_pair<F>();
    const Fixed<F> a = operands.first, b = operands.second;
    const mpq_class exact = exact_value(a.raw(), F) + exact_value(b.raw(), F);
    assert_matches<F>(expected_raw(exact, F), [&] { return a + b; });
    Fixed<F> c = a;
    assert_matches<F>(expected_raw(exact, F), [&] { return c += b; });
  });
}

RC_GTEST_PROP(Fixed, sub_is_exact_and_throws_exactly_when_the_difference_leaves_the_range, ()) {
  for_each_width([]<int F>() {
    // Not a structured binding: the lambdas below capture a and b, which Clang 14 refuses for bindings.
    const auto operands = *operand_pair<F>();
    const Fixed<F> a = operands.first, b = operands.second;
    const mpq_class exact = exact_value(a.raw(), F) - exact_value(b.raw(), F);
    assert_matches<F>(expected_raw(exact, F), [&] { return a - b; });
    Fixed<F> c = a;
    assert_matches<F>(expected_raw(exact, F), [&] { return c -= b; });
  });
}

RC_GTEST_PROP(Fixed, mul_rounds_half_to_even_and_throws_exactly_when_the_rounded_product_leaves_the_range, ()) {
  for_each_width([]<int F>() {
    // Not a structured binding: the lambdas below capture a and b, which Clang 14 refuses for bindings.
    const auto operands = *operand_pair<F>();
    const Fixed<F> a = operands.first, b = operands.second;
    const mpq_class exact = exact_value(a.raw(), F) * exact_value(b.raw(), F);
    assert_matches<F>(expected_raw(exact, F), [&] { return a * b; });
    Fixed<F> c = a;
    assert_matches<F>(expected_raw(exact, F), [&] { return c *= b; });
  });
}

RC_GTEST_PROP(Fixed, div_rounds_half_to_even_and_throws_exactly_when_the_rounded_quotient_leaves_the_range, ()) {
  for_each_width([]<int F>() {
    const auto operands = *rc::gen::suchThat(operand_pair<F>(), [](const auto& p) { return !p.second.is_zero(); });
    const Fixed<F> a = operands.first, b = operands.second;
    const mpq_class exact = exact_value(a.raw(), F) / exact_value(b.raw(), F);
    assert_matches<F>(expected_raw(exact, F), [&] { return a / b; });
  });
}

RC_GTEST_PROP(Fixed, division_by_zero_throws_domain_error, ()) {
  for_each_width([]<int F>() {
    const Fixed<F> a = *interesting_fixed<F>();
    RC_ASSERT_THROWS_AS(a / Fixed<F>(0), std::domain_error);
  });
}

RC_GTEST_PROP(Fixed, negation_is_exact_except_for_the_most_negative_value, ()) {
  for_each_width([]<int F>() {
    const Fixed<F> a = *interesting_fixed<F>();
    assert_matches<F>(expected_raw(-exact_value(a.raw(), F), F), [&] { return -a; });
    assert_matches<F>(expected_raw(abs(exact_value(a.raw(), F)), F), [&] { return abs(a); });
  });
}

RC_GTEST_PROP(Fixed, from_rational_rounds_half_to_even_and_throws_out_of_range, ()) {
  for_each_width([]<int F>() {
    // Raw-scale values k + f for interesting k and fractions f that include the exact tie 1/2, so that
    // INT64_MAX + 1/2 (a tie whose even neighbour 2^63 does not fit) and INT64_MIN - 1/2 are both tried.
    const std::int64_t k = *interesting_raw<F>();
    const mpq_class f = *rc::gen::element(mpq_class(0), mpq_class(1, 2), mpq_class(-1, 2), mpq_class(1, 3),
                                          mpq_class(2, 3), mpq_class(-2, 3), mpq_class(1, 1000000007),
                                          mpq_class(3, 2), mpq_class(-3, 2));
    const mpq_class scaled = mpq_class(mpz_class(static_cast<long>(k))) + f;
    const mpq_class exact = scaled / mpq_class(mpz_class(1) << F);
    const Rational value{exact};
    assert_matches<F>(expected_raw(exact, F), [&] { return Fixed<F>::from_rational(value); });
    assert_matches<F>(expected_raw(exact, F), [&] { return ScalarTraits<Fixed<F>>::from_rational(value); });
  });
}

RC_GTEST_PROP(Fixed, integer_conversion_is_exact_and_throws_out_of_range, ()) {
  for_each_width([]<int F>() {
    const std::int64_t n = *rc::gen::weightedOneOf<std::int64_t>({
        // The last integers in range and the first ones out (for F = 0 every int64 is in range).
        {2, rc::gen::element<std::int64_t>(0, 1, -1, kInt64Max >> F, F == 0 ? kInt64Max : (kInt64Max >> F) + 1,
                                           kInt64Min >> F, F == 0 ? kInt64Min : (kInt64Min >> F) - 1, kInt64Max,
                                           kInt64Min)},
        {1, rc::gen::arbitrary<std::int64_t>()},
    });
    assert_matches<F>(expected_raw(mpq_class(mpz_class(static_cast<long>(n))), F), [&] { return Fixed<F>(static_cast<long long>(n)); });
  });
}

RC_GTEST_PROP(Fixed, to_rational_is_exact_and_round_trips, ()) {
  for_each_width([]<int F>() {
    const Fixed<F> a = *interesting_fixed<F>();
    const Rational q = a.to_rational();
    RC_ASSERT(q.mpq() == exact_value(a.raw(), F));
    RC_ASSERT(ScalarTraits<Fixed<F>>::to_rational(a) == q);
    RC_ASSERT(Fixed<F>::from_rational(q) == a);
    RC_ASSERT(a.to_string() == q.to_string());
  });
}

RC_GTEST_PROP(Fixed, comparisons_agree_with_the_exact_values, ()) {
  for_each_width([]<int F>() {
    const Fixed<F> a = *interesting_fixed<F>(), b = *interesting_fixed<F>();
    const Rational qa = a.to_rational(), qb = b.to_rational();
    RC_ASSERT((a == b) == (qa == qb));
    RC_ASSERT((a <=> b) == (qa <=> qb));
    RC_ASSERT(a.sign() == qa.sign());
  });
}

RC_GTEST_PROP(Fixed, to_double_is_the_nearest_double_ties_to_even, ()) {
  for_each_width([]<int F>() {
    const Fixed<F> a = *interesting_fixed<F>();
    const mpq_class exact = exact_value(a.raw(), F);
    const double d = a.to_double();
    // Every double in this range is a dyadic rational: compare errors exactly with both neighbours.
    const auto err = [&](double x) {
      mpq_class q;
      mpq_set_d(q.get_mpq_t(), x);
      return mpq_class(abs(exact - q));
    };
    const mpq_class e = err(d);
    const mpq_class e_down = err(std::nextafter(d, -INFINITY)), e_up = err(std::nextafter(d, INFINITY));
    RC_ASSERT(e <= e_down);
    RC_ASSERT(e <= e_up);
    if (e == e_down || e == e_up) RC_ASSERT((std::bit_cast<std::uint64_t>(d) & 1) == 0);
  });
}

RC_GTEST_PROP(Fixed, sqrt_is_the_floor_of_the_exact_root, ()) {
  for_each_width([]<int F>() {
    const Fixed<F> a = *interesting_fixed<F>();
    if (a.sign() < 0) {
      RC_ASSERT_THROWS_AS(ScalarTraits<Fixed<F>>::sqrt(a), std::domain_error);
      return;
    }
    // r = floor(sqrt(raw / 2^F) * 2^F) = floor(sqrt(raw * 2^F)), so r^2 <= raw * 2^F < (r + 1)^2.
    const mpz_class r(static_cast<long>(ScalarTraits<Fixed<F>>::sqrt(a).raw()));
    const mpz_class scaled = mpz_class(static_cast<long>(a.raw())) << F;
    RC_ASSERT(r >= 0);
    RC_ASSERT(r * r <= scaled);
    RC_ASSERT(scaled < (r + 1) * (r + 1));
  });
}

RC_GTEST_PROP(Fixed, overflow_message_names_the_operation_operands_and_width, ()) {
  // Two values whose sum, product and negation are all out of range, at every width.
  for_each_width([]<int F>() {
    const Fixed<F> big = Fixed<F>::from_raw(*rc::gen::inRange<std::int64_t>(kInt64Max - 1000, kInt64Max));
    const Fixed<F> most_negative = Fixed<F>::from_raw(kInt64Min);
    const std::string width = "fixed<" + std::to_string(F) + ">";
    const std::string bits = std::to_string(F) + " fraction bits";
    try {
      (void)(big + big);
      RC_FAIL("add did not throw");
    } catch (const FixedPointOverflow& e) {
      const std::string what = e.what();
      RC_ASSERT(what.find(width + " add overflow") != std::string::npos);
      RC_ASSERT(what.find(big.to_string() + " + " + big.to_string()) != std::string::npos);
      RC_ASSERT(what.find((big.to_rational() + big.to_rational()).to_string()) != std::string::npos);
      RC_ASSERT(what.find(bits) != std::string::npos);
    }
    try {
      (void)(most_negative * most_negative);
      RC_FAIL("mul did not throw");
    } catch (const FixedPointOverflow& e) {
      const std::string what = e.what();
      RC_ASSERT(what.find(width + " mul overflow") != std::string::npos);
      RC_ASSERT(what.find(most_negative.to_string() + " * " + most_negative.to_string()) != std::string::npos);
      RC_ASSERT(what.find(bits) != std::string::npos);
    }
    try {
      (void)(-most_negative);
      RC_FAIL("negation did not throw");
    } catch (const FixedPointOverflow& e) {
      const std::string what = e.what();
      RC_ASSERT(what.find(width + " negation overflow") != std::string::npos);
      RC_ASSERT(what.find(most_negative.to_string()) != std::string::npos);
    }
  });
}

// ---- Hand-worked cases ----

TEST(Fixed, hand_worked_products_and_quotients_in_quarters) {
  // Fixed<2> counts quarters: raw r means r/4, so a raw result is the exact result times 4, rounded.
  using Q = Fixed<2>;
  const auto q = [](std::int64_t raw) { return Q::from_raw(raw); };
  EXPECT_EQ((q(1) * q(2)).raw(), 0);   // 0.25 * 0.5 = 0.125 = 0.5 quarters: tie, even neighbour 0
  EXPECT_EQ((q(3) * q(2)).raw(), 2);   // 0.75 * 0.5 = 0.375 = 1.5 quarters: tie, even neighbour 2 (0.5)
  EXPECT_EQ((q(3) * q(3)).raw(), 2);   // 0.75 * 0.75 = 0.5625 = 2.25 quarters: down to 2 (0.5)
  EXPECT_EQ((q(-1) * q(2)).raw(), 0);  // -0.125 = -0.5 quarters: tie, even neighbour 0 (not -1)
  EXPECT_EQ((q(-3) * q(2)).raw(), -2); // -0.375 = -1.5 quarters: tie, even neighbour -2 (symmetric)
  EXPECT_EQ((q(5) * q(5)).raw(), 6);   // 1.25 * 1.25 = 1.5625 = 6.25 quarters: down to 6 (1.5)
  EXPECT_EQ((q(7) * q(2)).raw(), 4);   // 1.75 * 0.5 = 0.875 = 3.5 quarters: tie, even neighbour 4 (1.0)
  EXPECT_EQ((Q(1) / Q(3)).raw(), 1);   // 1/3 = 1.333 quarters: down to 1 (0.25)
  EXPECT_EQ((Q(2) / Q(3)).raw(), 3);   // 2/3 = 2.667 quarters: up to 3 (0.75)
  EXPECT_EQ((q(2) / Q(4)).raw(), 0);   // 0.5 / 4 = 0.125 = 0.5 quarters: tie, even neighbour 0
  EXPECT_EQ((q(6) / Q(4)).raw(), 2);   // 1.5 / 4 = 0.375 = 1.5 quarters: tie, even neighbour 2
  EXPECT_EQ((q(-6) / Q(4)).raw(), -2); // -1.5 / 4: symmetric
  EXPECT_EQ((Q(-1) / Q(3)).raw(), -1); // -1/3 = -1.333 quarters: to -1
}

TEST(Fixed, hand_worked_integer_width) {
  // Fixed<0> is a checked integer whose quotient rounds half to even.
  using I = Fixed<0>;
  EXPECT_EQ((I(5) / I(2)).raw(), 2);    // 2.5 -> 2
  EXPECT_EQ((I(7) / I(2)).raw(), 4);    // 3.5 -> 4
  EXPECT_EQ((I(-5) / I(2)).raw(), -2);  // -2.5 -> -2
  EXPECT_EQ((I(7) / I(3)).raw(), 2);    // 2.333 -> 2
  EXPECT_EQ((I(3037000499) * I(3037000499)).raw(), 9223372030926249001);  // just below 2^63
  EXPECT_THROW(I(3037000500) * I(3037000500), FixedPointOverflow);        // 9223372037000250000 > 2^63 - 1
}

TEST(Fixed, hand_worked_range_edges) {
  // Fixed<62>: 1 is raw 2^62, the range is [-2, 2 - 2^-62].
  using W = Fixed<62>;
  EXPECT_EQ((W(1) * W(1)).raw(), std::int64_t{1} << 62);
  EXPECT_THROW(W(1) + W(1), FixedPointOverflow);    // 2 is just out of range
  EXPECT_EQ((W(-1) - W(1)).raw(), kInt64Min);       // -2 is just in
  EXPECT_THROW(-(W(-1) - W(1)), FixedPointOverflow);
  EXPECT_THROW(W(2), FixedPointOverflow);
  EXPECT_EQ(W(-2).raw(), kInt64Min);
  EXPECT_EQ((W(-1) / W::from_raw(std::int64_t{1} << 61)).raw(), kInt64Min);      // -1 / 0.5 = -2: fits
  EXPECT_THROW(W(1) / W::from_raw(std::int64_t{1} << 61), FixedPointOverflow);   // 1 / 0.5 = 2: does not
  // Fixed32: the largest value is 2^31 - 2^-32; one more ulp overflows, and so does 2^31 itself.
  const Fixed32 max = Fixed32::from_raw(kInt64Max);
  EXPECT_EQ(max, Fixed32(2147483647) + Fixed32::from_raw(0xFFFFFFFF));
  EXPECT_THROW(max + Fixed32::from_raw(1), FixedPointOverflow);
  EXPECT_THROW(Fixed32(2147483648LL), FixedPointOverflow);
  EXPECT_EQ(Fixed32(-2147483648LL).raw(), kInt64Min);
  // from_rational at the top: INT64_MAX + 1/2 raw units is a tie whose even neighbour, 2^63, overflows;
  // INT64_MAX - 1/2 is a tie that rounds to the even INT64_MAX - 1.
  const Rational ulp = Rational(1) / pow2(32);
  EXPECT_THROW(Fixed32::from_rational(max.to_rational() + ulp / Rational(2)), FixedPointOverflow);
  EXPECT_EQ(Fixed32::from_rational(max.to_rational() - ulp / Rational(2)).raw(), kInt64Max - 1);
  EXPECT_EQ(Fixed32::from_rational(Rational(1, 3)).raw(), 1431655765);  // 2^32 / 3 = 1431655765.33
}

TEST(Fixed, sqrt_hand_worked) {
  using Q = Fixed<2>;
  EXPECT_EQ(ScalarTraits<Q>::sqrt(Q(2)).raw(), 5);          // sqrt(2) = 1.414: floor to quarters 1.25
  EXPECT_EQ(ScalarTraits<Q>::sqrt(Q::from_raw(1)).raw(), 2);  // sqrt(1/4) = 1/2 exactly
  EXPECT_EQ(ScalarTraits<Fixed32>::sqrt(Fixed32(4)), Fixed32(2));
  EXPECT_EQ(ScalarTraits<Fixed<62>>::sqrt(Fixed<62>::from_raw(kInt64Max)).raw(), 6521908912666391105);
  EXPECT_THROW(ScalarTraits<Q>::sqrt(Q::from_raw(-1)), std::domain_error);
}

RC_GTEST_PROP(Fixed, eigen_matrix_product_is_the_sum_of_rounded_products, ()) {
  // Sums are exact and each product rounds on its own, so every entry of an Eigen product equals the sum of
  // the individually rounded products, in any order, whenever nothing overflows. Small raws keep it so.
  using Matrix = Eigen::Matrix<Fixed32, Eigen::Dynamic, Eigen::Dynamic>;
  const int rows = *rc::gen::inRange(1, 4), inner = *rc::gen::inRange(1, 4), cols = *rc::gen::inRange(1, 4);
  const auto entry = [] {
    return Fixed32::from_raw(*rc::gen::inRange<std::int64_t>(-(std::int64_t{1} << 40), std::int64_t{1} << 40));
  };
  Matrix a(rows, inner), b(inner, cols);
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < inner; ++k) a(i, k) = entry();
  for (int k = 0; k < inner; ++k)
    for (int j = 0; j < cols; ++j) b(k, j) = entry();
  const Matrix c = a * b;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      mpz_class sum = 0;
      for (int k = 0; k < inner; ++k) sum += round_half_even(exact_value(a(i, k).raw(), 32) * exact_value(b(k, j).raw(), 32) * mpq_class(mpz_class(1) << 32));
      RC_ASSERT(fits_int64(sum));
      RC_ASSERT(c(i, j).raw() == mpz_get_si(sum.get_mpz_t()));
    }
  }
}
