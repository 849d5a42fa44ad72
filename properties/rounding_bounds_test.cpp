// Rounding bounds: regression cases of the bound itself, each a false positive a campaign once met.
#include "properties/rounding_bounds.h"

#include <gtest/gtest.h>

#include "models/model.h"

namespace accumcheck::properties {
namespace {

using models::Rational;

models::Sequence<Rational> token(std::vector<Rational> features, Rational target) {
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(1, static_cast<Eigen::Index>(features.size()));
  for (std::size_t i = 0; i < features.size(); ++i) seq.features(0, static_cast<Eigen::Index>(i)) = features[i];
  seq.targets = models::Matrix<Rational>(1, 1);
  seq.targets(0, 0) = target;
  seq.loss_mask = {1};
  return seq;
}

// torch-loop, seed 21, trial 973: the exact grad norm is 15/4 (a rational root, certified exact), but
// clip_grad_norm_ takes the norm of the per-tensor norms sqrt(||dW||^2 + ||db||^2), whose inner roots are
// irrational, and returned 15728641/4194304, one fp32 ulp away. The bound must allow it.
TEST(RoundingBounds, the_grad_norm_allows_the_norm_of_per_tensor_norms) {
  sim::Scenario s;
  s.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 3, .output_size = 1};
  s.training.aggregation.mode = models::LossAggregation::sum;
  s.training.optimizer.lr = Rational(1LL, 8LL);
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  s.initial_parameters.tensors[0](0, 0) = 1;
  s.initial_parameters.tensors[0](0, 1) = 2;
  s.initial_parameters.tensors[0](0, 2) = 2;
  s.initial_parameters.tensors[1](0, 0) = 2;
  sim::MicroBatch mb;
  mb.rank_sequences = {{token({Rational(1LL, 2LL), -1, 1}, 0), token({0, Rational(-1LL, 2LL), 0}, 2)}};
  s.steps = {sim::StepPlan{{mb}}};
  sim::validate(s);
  auto b = rounding_bounds(s.training, s, sim::ScalarKind::fp32);
  ASSERT_TRUE(std::holds_alternative<RunBounds>(b)) << std::get<std::string>(b);
  const Rational torch_norm(15728641LL, 4194304LL);
  EXPECT_GE(std::get<RunBounds>(b).step_grad_norm[0], models::abs(torch_norm - Rational(15LL, 4LL)));
  // The gradient itself is exact in fp32 in every evaluation order: its bound stays 0.
  for (const auto& t : std::get<RunBounds>(b).step_gradient[0])
    for (Eigen::Index i = 0; i < t.size(); ++i) EXPECT_EQ(t(i), Rational(0));
}

}  // namespace
}  // namespace accumcheck::properties
