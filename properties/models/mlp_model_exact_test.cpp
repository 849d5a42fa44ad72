// models/mlp_model_exact.h: the MLP's gradient over GMP integers equals the generic loop's in Rational, value for
// value and presence for presence, and it declines (touching nothing) whatever it cannot take.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/mlp_model_exact.h"
#include "models/model.h"
#include "properties/models/exact_gradient_cases.h"

namespace accumcheck::models {
namespace {

using namespace exact_cases;  // NOLINT(google-build-using-namespace): the shared cases, this file's vocabulary

RC_GTEST_PROP(MlpModelExact, equals_the_generic_loop_or_declines_untouched, ()) {
  check_equals_or_declines(*gen_case(ModelKind::mlp, false, *rc::gen::arbitrary<bool>()),
                           mlp_model::accumulate_gradient_integer, "summed in GMP integers");
}

// Parameters after an SGD step (a divisor of 3), of 62 bits, or promoted (2^64n + 1), over dyadic data; ReLU
// units at exactly zero come from the zeros among the values.
RC_GTEST_PROP(MlpModelExact, takes_any_parameters_over_dyadic_data, ()) {
  check_takes(*gen_case(ModelKind::mlp, false, true), mlp_model::accumulate_gradient_integer);
}

RC_GTEST_PROP(MlpModelExact, accumulate_gradient_in_fast_rational_equals_rational, ()) {
  check_accumulate_gradient(*gen_case(ModelKind::mlp, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>()));
}

// One unit, one input, one output: W1 = 1/2, b1 = b, W2 = 3, b2 = 1/4, x = 2, y = 1, c = 1/3. With b = 0:
// z = 1, h = 1, y_hat = 13/4, r = 9/4; dW2 = c r h = 3/4, db2 = 3/4, dz = W2 r = 27/4, dW1 = c dz x = 9/2,
// db1 = 9/4. With b = -1, z = 0 sits on the kink: relu'(0) = 0, so W1 and b1 get zeros (present), and
// y_hat = 1/4, r = -3/4, dW2 = 0 (h = 0), db2 = -1/4.
TEST(MlpModelExact, hand_cases_on_and_off_the_kink) {
  for (const int b : {0, -1}) {
    Case c;
    c.spec = ModelSpec{.kind = ModelKind::mlp, .input_size = 1, .output_size = 1, .hidden_size = 1};
    Matrix<Rational> W1(1, 1), b1(1, 1), W2(1, 1), b2(1, 1), x(1, 1), y(1, 1);
    W1 << Rational(1LL, 2LL);
    b1 << Rational(b);
    W2 << Rational(3);
    b2 << Rational(1LL, 4LL);
    x << Rational(2);
    y << Rational(1);
    c.params.tensors = {W1, b1, W2, b2};
    c.batch = {Sequence<Rational>{x, {}, {}, y, {1}}};
    c.coefficients = {Rational(1LL, 3LL)};
    c.grad = zero_gradient<Rational>(c.spec);
    const Outcome got = integer_path(c, mlp_model::accumulate_gradient_integer);
    ASSERT_TRUE(got.taken);
    const auto& g = got.grad.tensors;
    if (b == 0) {
      EXPECT_EQ(g[0](0, 0), FastRational(9, 2));
      EXPECT_EQ(g[1](0, 0), FastRational(9, 4));
      EXPECT_EQ(g[2](0, 0), FastRational(3, 4));
      EXPECT_EQ(g[3](0, 0), FastRational(3, 4));
    } else {
      EXPECT_EQ(g[0](0, 0), FastRational(0));
      EXPECT_EQ(g[1](0, 0), FastRational(0));
      EXPECT_EQ(g[2](0, 0), FastRational(0));
      EXPECT_EQ(g[3](0, 0), FastRational(-1, 4));
    }
    for (const bool present : got.grad.present) EXPECT_TRUE(present);
  }
}

}  // namespace
}  // namespace accumcheck::models
