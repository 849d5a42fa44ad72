// models/loss_scaler.h: overflow skip and backoff, unscaling, growth after the interval.
#include <limits>

#include <gtest/gtest.h>

#include "models/loss_scaler.h"
#include "models/model.h"

namespace accumcheck::models {
namespace {

Gradient<Eigen::half> half_gradient(float value) {
  const ModelSpec spec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
  Gradient<Eigen::half> grad = zero_gradient<Eigen::half>(spec);
  grad.tensors[0](0, 0) = Eigen::half(value);
  grad.present = {true, false};
  return grad;
}

TEST(LossScaler, overflow_skips_the_step_and_halves_the_scale) {
  LossScaler scaler(LossScalerSpec{.initial_scale = Rational(1024), .growth_interval = 2});
  auto grad = half_gradient(std::numeric_limits<float>::infinity());
  EXPECT_FALSE(scaler.unscale_or_skip(grad));
  EXPECT_EQ(scaler.scale(), Rational(512));
  EXPECT_EQ(scaler.skipped_step_count(), 1);
  EXPECT_TRUE(std::isinf(static_cast<float>(grad.tensors[0](0, 0))));  // untouched
}

TEST(LossScaler, finite_gradients_are_unscaled_and_the_scale_grows_after_the_interval) {
  LossScaler scaler(LossScalerSpec{.initial_scale = Rational(1024), .growth_interval = 2});
  auto grad = half_gradient(2048.0f);
  EXPECT_TRUE(scaler.unscale_or_skip(grad));
  EXPECT_EQ(static_cast<float>(grad.tensors[0](0, 0)), 2.0f);
  EXPECT_EQ(scaler.scale(), Rational(1024));
  auto grad2 = half_gradient(1.0f);
  EXPECT_TRUE(scaler.unscale_or_skip(grad2));
  EXPECT_EQ(scaler.scale(), Rational(2048));
}

TEST(LossScaler, static_scale_never_changes_but_still_skips_overflow) {
  LossScaler scaler(LossScalerSpec{.initial_scale = Rational(8), .dynamic = false, .growth_interval = 1});
  auto bad = half_gradient(std::numeric_limits<float>::quiet_NaN());
  EXPECT_FALSE(scaler.unscale_or_skip(bad));
  auto good = half_gradient(8.0f);
  EXPECT_TRUE(scaler.unscale_or_skip(good));
  EXPECT_EQ(scaler.scale(), Rational(8));
  EXPECT_THROW(LossScaler(LossScalerSpec{.initial_scale = Rational(0)}), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::models
