// models/linear_model_exact.h: the linear model's gradient in integers equals the generic loop's in Rational,
// value for value and presence for presence, and it declines (touching nothing) whatever it cannot sum exactly.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/linear_model.h"
#include "models/linear_model_exact.h"
#include "models/model.h"
#include "properties/models/exact_gradient_cases.h"

namespace accumcheck::models {
namespace {

using namespace exact_cases;  // NOLINT(google-build-using-namespace): the shared cases, this file's vocabulary

RC_GTEST_PROP(LinearModelExact, equals_the_generic_loop_or_declines_untouched, ()) {
  check_equals_or_declines(*gen_case(ModelKind::linear, false), linear_model::accumulate_gradient_dyadic,
                           "summed in integers");
}

RC_GTEST_PROP(LinearModelExact, takes_every_small_dyadic_case, ()) {
  check_takes(*gen_case(ModelKind::linear, true), linear_model::accumulate_gradient_dyadic);
}

RC_GTEST_PROP(LinearModelExact, the_gmp_path_equals_the_generic_loop_or_declines_untouched, ()) {
  check_equals_or_declines(*gen_case(ModelKind::linear, false, *rc::gen::arbitrary<bool>()),
                           linear_model::accumulate_gradient_integer, "summed in GMP integers");
}

// Parameters after an SGD step (a divisor of 3), of 62 bits, or promoted (2^64n + 1), over dyadic data.
RC_GTEST_PROP(LinearModelExact, the_gmp_path_takes_any_parameters_over_dyadic_data, ()) {
  check_takes(*gen_case(ModelKind::linear, false, true), linear_model::accumulate_gradient_integer);
}

RC_GTEST_PROP(LinearModelExact, accumulate_gradient_in_fast_rational_equals_rational, ()) {
  check_accumulate_gradient(*gen_case(ModelKind::linear, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>()));
}

// At the bound: two inputs, one token, K = 0, parameters and features of 41 bits: 3 + 41 + 41 + 41 = 126 bits
// is summed in integers (and exactly), 42 bits is declined.
TEST(LinearModelExact, sums_up_to_the_bound_and_declines_past_it) {
  for (const int bits : {41, 42}) {
    Case c;
    c.spec = ModelSpec{.kind = ModelKind::linear, .input_size = 2, .output_size = 1};
    const Rational big = pow2(bits) - Rational(1);
    Matrix<Rational> W(1, 2), b(1, 1), x(1, 2), y(1, 1);
    W << big, -big;
    b << Rational(3);
    x << big, big - Rational(5);
    y << Rational(-7);
    c.params.tensors = {W, b};
    c.batch = {Sequence<Rational>{x, {}, {}, y, {1}}};
    c.coefficients = {Rational(1LL, 3LL)};
    c.grad = zero_gradient<Rational>(c.spec);
    const Outcome got = integer_path(c, linear_model::accumulate_gradient_dyadic);
    EXPECT_EQ(got.taken, bits == 41) << bits << " bits";
    if (got.taken) {
      EXPECT_TRUE(got.grad == convert(expected(c)));
    }
  }
}

// Sums in int64 where their bound stays below 2^62, else in __int128: two inputs, one token, K = 0, every value
// of `bits` bits, so that a sum entry is about 2^(3 bits + 1). The bound is 3 + 3 bits: 19 bits (60) sums in int64,
// 20 and 21 bits in __int128, where int64 would wrap (2^64 at 21 bits). Every one equals the generic loop.
TEST(LinearModelExact, sums_in_int64_within_its_bound_and_in_int128_past_it) {
  for (const int bits : {19, 20, 21}) {
    Case c;
    c.spec = ModelSpec{.kind = ModelKind::linear, .input_size = 2, .output_size = 1};
    const Rational big = pow2(bits) - Rational(1);
    Matrix<Rational> W(1, 2), b(1, 1), x(1, 2), y(1, 1);
    W << big, big;
    b << big;
    x << big, big;
    y << -big;
    c.params.tensors = {W, b};
    c.batch = {Sequence<Rational>{x, {}, {}, y, {1}}};
    c.coefficients = {Rational(1LL, 3LL)};
    c.grad = zero_gradient<Rational>(c.spec);
    const Outcome got = integer_path(c, linear_model::accumulate_gradient_dyadic);
    ASSERT_TRUE(got.taken) << bits << " bits";
    EXPECT_TRUE(got.grad == convert(expected(c))) << bits << " bits";
  }
}

TEST(LinearModelExact, hand_case) {
  // W = [1/2, -1/4], b = 1/8, x = [1, 2], y = 1/2: r = 1/2 - 1/2 + 1/8 - 1/2 = -3/8; with c = 1/3,
  // dW = -1/8 [1, 2] = [-1/8, -1/4], db = -1/8.
  Case c;
  c.spec = ModelSpec{.kind = ModelKind::linear, .input_size = 2, .output_size = 1};
  Matrix<Rational> W(1, 2), b(1, 1), x(1, 2), y(1, 1);
  W << Rational(1LL, 2LL), Rational(-1LL, 4LL);
  b << Rational(1LL, 8LL);
  x << Rational(1), Rational(2);
  y << Rational(1LL, 2LL);
  c.params.tensors = {W, b};
  c.batch = {Sequence<Rational>{x, {}, {}, y, {1}}};
  c.coefficients = {Rational(1LL, 3LL)};
  c.grad = zero_gradient<Rational>(c.spec);
  const Outcome got = integer_path(c, linear_model::accumulate_gradient_dyadic);
  ASSERT_TRUE(got.taken);
  EXPECT_EQ(got.grad.tensors[0](0, 0), FastRational(-1, 8));
  EXPECT_EQ(got.grad.tensors[0](0, 1), FastRational(-1, 4));
  EXPECT_EQ(got.grad.tensors[1](0, 0), FastRational(-1, 8));
  EXPECT_TRUE(got.grad.present[0] && got.grad.present[1]);
}

}  // namespace
}  // namespace accumcheck::models
