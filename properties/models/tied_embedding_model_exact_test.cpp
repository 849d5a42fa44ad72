// models/tied_embedding_model_exact.h: the tied-embedding model's gradient over GMP integers equals the generic
// loop's in Rational, value for value and presence for presence (the two uses of E adding), and it declines
// (touching nothing) whatever it cannot take.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/model.h"
#include "models/tied_embedding_model_exact.h"
#include "properties/models/exact_gradient_cases.h"

namespace accumcheck::models {
namespace {

using namespace exact_cases;  // NOLINT(google-build-using-namespace): the shared cases, this file's vocabulary

RC_GTEST_PROP(TiedEmbeddingModelExact, equals_the_generic_loop_or_declines_untouched, ()) {
  check_equals_or_declines(*gen_case(ModelKind::tied_embedding, false, *rc::gen::arbitrary<bool>()),
                           tied_embedding_model::accumulate_gradient_integer, "summed in GMP integers");
}

// Parameters after an SGD step (a divisor of 3), of 62 bits, or promoted (2^64n + 1), over dyadic targets.
RC_GTEST_PROP(TiedEmbeddingModelExact, takes_any_parameters_over_dyadic_targets, ()) {
  check_takes(*gen_case(ModelKind::tied_embedding, false, true), tied_embedding_model::accumulate_gradient_integer);
}

RC_GTEST_PROP(TiedEmbeddingModelExact, accumulate_gradient_in_fast_rational_equals_rational, ()) {
  check_accumulate_gradient(*gen_case(ModelKind::tied_embedding, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>()));
}

// V = 2, D = 1, E = [1/2, 3], b = [0, 1/4], one token of id 0 with y = [1, 0] and c = 1/3: e = 1/2,
// y_hat = [1/4, 7/4], r = [-3/4, 7/4]. Output use: dE[v] += c r_v e = [-1/8, 7/24]; input use: dE[0] += c E^T r
// = (1/3)(-3/8 + 21/4) = 13/8; so dE = [-1/8 + 13/8, 7/24] = [3/2, 7/24], db = c r = [-1/4, 7/12].
TEST(TiedEmbeddingModelExact, hand_case_adds_both_uses_of_the_embedding) {
  Case c;
  c.spec = ModelSpec{.kind = ModelKind::tied_embedding, .vocab_size = 2, .embed_size = 1};
  Matrix<Rational> E(2, 1), b(2, 1), x(1, 0), y(1, 2);
  E << Rational(1LL, 2LL), Rational(3);
  b << Rational(0), Rational(1LL, 4LL);
  y << Rational(1), Rational(0);
  c.params.tensors = {E, b};
  c.batch = {Sequence<Rational>{x, {0}, {}, y, {1}}};
  c.coefficients = {Rational(1LL, 3LL)};
  c.grad = zero_gradient<Rational>(c.spec);
  const Outcome got = integer_path(c, tied_embedding_model::accumulate_gradient_integer);
  ASSERT_TRUE(got.taken);
  EXPECT_EQ(got.grad.tensors[0](0, 0), FastRational(3, 2));
  EXPECT_EQ(got.grad.tensors[0](1, 0), FastRational(7, 24));
  EXPECT_EQ(got.grad.tensors[1](0, 0), FastRational(-1, 4));
  EXPECT_EQ(got.grad.tensors[1](1, 0), FastRational(7, 12));
  EXPECT_TRUE(got.grad == convert(expected(c)));
}

}  // namespace
}  // namespace accumcheck::models
