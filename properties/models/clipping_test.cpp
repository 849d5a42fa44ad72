// models/clipping.h: global-norm clipping on hand cases, and the norm of the applied gradient.
#include <gtest/gtest.h>

#include "models/clipping.h"
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

TEST(Clipping, norm_of_3_4_is_exactly_5_and_clips_by_max_over_norm_plus_eps) {
  Gradient<Rational> grad = gradient_3_4();
  const ClipResult<Rational> clip = clip_grad_norm(grad, Rational(1));
  EXPECT_EQ(clip.total_norm, Rational(5));
  EXPECT_TRUE(clip.clipped);
  // coef = 1 / (5 + 1/10^6) = 10^6 / 5000001
  EXPECT_EQ(clip.clip_coefficient, Rational(1000000LL, 5000001LL));
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(3000000LL, 5000001LL));
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(4000000LL, 5000001LL));
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
