// models/clipping.h: global-norm clipping on hand cases, and the norm of the applied gradient.
#include <gtest/gtest.h>

#include "models/clipping.h"
#include "models/fast_rational.h"
#include "models/model.h"

namespace accumcheck::models {
namespace {

Gradient<Rational> gradient_3_4() {
  const ModelSpec spec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
  Gradient<Rational> grad = zero_gradient<Rational>(spec);
  grad.tensors[0](0, 0) = Rational(3);
  grad.tensors[1](0, 0) = Rational(4);
  grad.present = {true, true};
  return grad;
}

TEST(Clipping, norm_of_3_4_is_exactly_5_and_clips_by_max_over_norm_plus_eps_truncated_to_2_pow_minus_64) {
  Gradient<Rational> grad = gradient_3_4();
  const ClipResult<Rational> clip = clip_grad_norm(grad, Rational(1));
  EXPECT_EQ(clip.total_norm, Rational(5));
  EXPECT_TRUE(clip.clipped);
  // 1 / (5 + 1/10^6) = 10^6 / 5000001, truncated toward zero to a multiple of 2^-64:
  // floor(10^6 2^64 / 5000001) / 2^64.
  const mpz_class scaled = (mpz_class(1000000) << 64) / 5000001;
  mpq_class truncated(scaled, mpz_class(1) << 64);
  truncated.canonicalize();
  const Rational coef = Rational(truncated);
  EXPECT_EQ(clip.clip_coefficient, coef);
  EXPECT_LE(coef, Rational(1000000LL, 5000001LL));
  EXPECT_GT(coef + pow2(-64), Rational(1000000LL, 5000001LL));
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(3) * coef);
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(4) * coef);
  // The clipped norm stays at or under max_norm.
  EXPECT_LE(grad_norm(grad), Rational(1));
}

TEST(Clipping, exact_types_agree_and_float_types_do_not_truncate) {
  Gradient<Rational> exact = gradient_3_4();
  Gradient<FastRational> fast = zero_gradient<FastRational>(ModelSpec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1});
  fast.tensors[0](0, 0) = FastRational(3);
  fast.tensors[1](0, 0) = FastRational(4);
  fast.present = {true, true};
  const ClipResult<Rational> a = clip_grad_norm(exact, Rational(1));
  const ClipResult<FastRational> b = clip_grad_norm(fast, Rational(1));
  EXPECT_EQ(b.clip_coefficient.to_rational(), a.clip_coefficient);
  // On the 2^-64 grid: its denominator divides 2^64.
  EXPECT_TRUE(mpz_divisible_p(mpz_class(mpz_class(1) << 64).get_mpz_t(), b.clip_coefficient.denominator().get_mpz_t()));
  // A double's coefficient is its own division, rounded once.
  EXPECT_EQ(clip_coefficient(5.0, Rational(1)), 1.0 / (5.0 + 1e-6));
}

TEST(Clipping, gradient_under_the_limit_is_untouched) {
  Gradient<Rational> grad = gradient_3_4();
  const ClipResult<Rational> clip = clip_grad_norm(grad, Rational(10));
  EXPECT_FALSE(clip.clipped);
  EXPECT_EQ(clip.clip_coefficient, Rational(1));
  EXPECT_EQ(grad, gradient_3_4());
}

TEST(Clipping, absent_gradients_do_not_count_toward_the_norm) {
  Gradient<Rational> grad = gradient_3_4();
  grad.present[1] = false;
  grad.tensors[1](0, 0) = Rational(0);
  EXPECT_EQ(grad_norm(grad), Rational(3));
}

TEST(Clipping, irrational_norm_is_the_documented_root) {
  Gradient<Rational> grad = gradient_3_4();
  grad.tensors[1](0, 0) = Rational(1);  // norm sqrt(10)
  const Rational norm = grad_norm(grad);
  EXPECT_EQ(norm, sqrt_rounded(Rational(10), kExactSqrtFractionBits));
  EXPECT_LE(norm * norm, Rational(10));
  const Rational ulp = pow2(-kExactSqrtFractionBits);
  EXPECT_GT((norm + ulp) * (norm + ulp), Rational(10));
  EXPECT_THROW(clip_grad_norm(grad, Rational(0)), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::models
