// Rounding bounds: regression cases of the bound itself, each a false positive a campaign once met.
#include "properties/rounding_bounds.h"

#include <gtest/gtest.h>

#include "models/model.h"
#include "properties/property.h"
#include "sim/target.h"

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

// cuda-offload-fp32-host-twin, --max-ranks 8 --max-accumulation-steps 8, seed 9, and reference at fp32 on the same
// campaign: every engine scales each loss by 1/G, and the compensating reference layer multiplies it back by G R.
// With G = 7 and R = 3 the coefficient is 21 fl(1/7) = 3.000000134, which fp32 rounds up to 3 + 2^-22: the run's
// gradient is one ulp off an exact oracle gradient that the bound used to call exact. The engines' 1/G is now charged
// to each coefficient (models/oracle.h), so the run passes; a power of two G still charges nothing.
sim::Scenario seven_windows_of_three_ranks(int accumulation_steps) {
  sim::Scenario s;
  s.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  s.training.aggregation.mode = models::LossAggregation::sum;
  s.training.optimizer.lr = Rational(1LL, 8LL);
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  s.engine.rank_count = 3;
  s.engine.accumulation_steps = accumulation_steps;
  sim::MicroBatch mb;
  mb.rank_sequences = {{token({1}, 1)}, {token({1}, 1)}, {token({1}, 1)}};
  s.steps = {sim::StepPlan{std::vector<sim::MicroBatch>(static_cast<std::size_t>(accumulation_steps), mb)}};
  sim::validate(s);
  return s;
}

TEST(RoundingBounds, the_engines_one_over_g_is_charged_to_each_coefficient) {
  const auto target = sim::make_target("reference");
  const Property* property = find_property("accumulated_update_equals_full_batch_update");
  const sim::Scenario s = seven_windows_of_three_ranks(7);
  const sim::RunResult run = target->run(s, sim::RunOptions{.scalar = sim::ScalarKind::fp32});
  const Rational exact(-21);  // 21 tokens, each r x = -1
  ASSERT_NE(run.steps.at(0).gradient.tensors[0](0, 0), exact);  // the fp32 run rounds
  const Verdict v = property->check(*target, s, sim::RunOptions{.scalar = sim::ScalarKind::fp32});
  EXPECT_EQ(v.outcome, Outcome::pass) << v.message;
  auto b = rounding_bounds(s.training, s, sim::ScalarKind::fp32);
  ASSERT_TRUE(std::holds_alternative<RunBounds>(b)) << std::get<std::string>(b);
  const Rational bound = std::get<RunBounds>(b).step_gradient[0][0](0, 0);
  EXPECT_GE(bound, models::abs(run.steps[0].gradient.tensors[0](0, 0) - exact));
  EXPECT_LT(bound, Rational(1LL, 1000LL));  // a few ulps: a dropped micro-batch (3 of 21) stands far outside
  // G = 8, a power of two: 1/8 is exact, and so is the bound.
  const sim::Scenario eight = seven_windows_of_three_ranks(8);
  auto exact_bound = rounding_bounds(eight.training, eight, sim::ScalarKind::fp32);
  ASSERT_TRUE(std::holds_alternative<RunBounds>(exact_bound));
  EXPECT_EQ(std::get<RunBounds>(exact_bound).step_gradient[0][0](0, 0), Rational(0));
}

}  // namespace
}  // namespace accumcheck::properties
