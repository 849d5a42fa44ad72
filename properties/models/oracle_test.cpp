// models/oracle.h: the catalogue's numeric reproducer, multi-step trajectories, and input validation.
#include <span>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/oracle.h"
#include "properties/generators/model_generators.h"

namespace accumcheck::models {
namespace {

TrainingSpec scalar_spec() {
  TrainingSpec spec;
  spec.model = ModelSpec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
  spec.model.frozen = {"bias"};
  spec.aggregation.mode = LossAggregation::seq_mean_token_sum;
  spec.optimizer = OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 10LL)};
  return spec;
}

Sequence<Rational> one_token(Rational target) {
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>::Constant(1, 1, Rational(1));
  seq.targets = Matrix<Rational>::Constant(1, 1, target);
  seq.loss_mask = {1};
  return seq;
}

// Catalogue section 1: c = (1, 10, 100), G = 3, each micro-batch loss times 1/G: full-batch gradient 37.
TEST(Oracle, catalogue_c_1_10_100_gives_gradient_37_over_two_steps) {
  const StepBatch<Rational> batch = {one_token(Rational(-1)), one_token(Rational(-10)), one_token(Rational(-100))};
  const std::vector<StepBatch<Rational>> steps = {batch, batch};
  const auto result = run_oracle(scalar_spec(), zero_parameters<Rational>(scalar_spec().model),
                                 std::span<const StepBatch<Rational>>(steps));
  ASSERT_EQ(result.steps.size(), 2u);
  EXPECT_EQ(result.steps[0].gradient.tensors[0](0, 0), Rational(37));
  EXPECT_EQ(result.steps[0].grad_norm, Rational(37));
  EXPECT_EQ(result.steps[1].gradient.tensors[0](0, 0), Rational(333LL, 10LL));  // at w = -37/10
  EXPECT_EQ(result.parameters.tensors[0](0, 0), Rational(-703LL, 100LL));
  EXPECT_FALSE(result.steps[0].gradient.present[1]);
  EXPECT_EQ(result.state.step_count, (std::vector<long>{2, 0}));
}

TEST(Oracle, clipping_uses_the_full_batch_norm_and_reports_it_before_clipping) {
  TrainingSpec spec = scalar_spec();
  spec.max_grad_norm = Rational(1);
  const std::vector<StepBatch<Rational>> steps = {{one_token(Rational(-1)), one_token(Rational(-10)),
                                                   one_token(Rational(-100))}};
  const auto result = run_oracle(spec, zero_parameters<Rational>(spec.model), std::span<const StepBatch<Rational>>(steps));
  EXPECT_EQ(result.steps[0].grad_norm, Rational(37));
  // 1 / (37 + 10^-6), truncated toward zero to a multiple of 2^-64 (models/clipping.h).
  const Rational coef = truncate_to_bits(Rational(1) / (Rational(37) + kClipEpsilon), 64);
  EXPECT_EQ(coef.denominator(), mpz_class(1) << 64);
  EXPECT_EQ(result.steps[0].clip_coefficient, coef);
  EXPECT_EQ(result.steps[0].applied_gradient.tensors[0](0, 0), Rational(37) * coef);
  EXPECT_EQ(result.parameters.tensors[0](0, 0), -Rational(1LL, 10LL) * Rational(37) * coef);
}

TEST(Oracle, bad_input_is_rejected_before_training) {
  TrainingSpec spec = scalar_spec();
  Sequence<Rational> bad = one_token(Rational(1));
  bad.features = Matrix<Rational>::Zero(1, 2);
  const std::vector<StepBatch<Rational>> steps = {{bad}};
  EXPECT_THROW(run_oracle(spec, zero_parameters<Rational>(spec.model), std::span<const StepBatch<Rational>>(steps)),
               std::invalid_argument);
  spec.max_grad_norm = Rational(-1);
  const std::vector<StepBatch<Rational>> none;
  EXPECT_THROW(run_oracle(spec, zero_parameters<Rational>(spec.model), std::span<const StepBatch<Rational>>(none)),
               std::invalid_argument);
  spec = scalar_spec();
  spec.model.frozen = {"nonexistent"};
  EXPECT_THROW(run_oracle(spec, Parameters<Rational>{}, std::span<const StepBatch<Rational>>(none)),
               std::invalid_argument);
}

// Whatever the model, data, aggregation and optimizer, each step's gradient is the full-batch gradient at the
// parameters that step started from, and the trajectory is the optimizer applied to those gradients.
RC_GTEST_PROP(Oracle, each_step_applies_the_full_batch_gradient_at_its_start, ()) {
  TrainingSpec spec;
  spec.model = *properties::gen_model_spec();
  spec.aggregation = *properties::gen_aggregation();
  spec.optimizer = *properties::gen_optimizer();
  const auto initial = *properties::gen_parameters(spec.model);
  const int step_count = *rc::gen::inRange(1, 4);
  std::vector<StepBatch<Rational>> steps;
  for (int s = 0; s < step_count; ++s) steps.push_back(*properties::gen_batch(spec.model));
  const auto result = run_oracle(spec, initial, std::span<const StepBatch<Rational>>(steps));

  Parameters<Rational> params = initial;
  OptimizerState<Rational> state = initial_optimizer_state<Rational>(spec.model);
  for (int s = 0; s < step_count; ++s) {
    const auto grad = full_batch_gradient(spec, params, std::span<const Sequence<Rational>>(steps[static_cast<std::size_t>(s)]));
    RC_ASSERT(grad == result.steps[static_cast<std::size_t>(s)].gradient);
    optimizer_step(spec.optimizer, params, grad, state);
  }
  RC_ASSERT(params == result.parameters);
  RC_ASSERT(state == result.state);
}

// The narrower scopes give the same applied gradients, clip values and, when clipping, norms as training
// everything, and no pre-clip gradient. applied_gradients (property 1's) leaves nothing else that could be read as
// a result; trajectory (property 9's, and a trial's shared oracle) adds everything's final parameters and state.
RC_GTEST_PROP(Oracle, the_narrower_scopes_give_everythings_applied_gradients_and_the_trajectory_its_final_state, ()) {
  TrainingSpec spec;
  spec.model = *properties::gen_model_spec();
  spec.aggregation = *properties::gen_aggregation();
  spec.optimizer = *properties::gen_optimizer();
  if (*rc::gen::arbitrary<bool>()) spec.max_grad_norm = Rational(*rc::gen::inRange(1, 4), 2);
  const auto initial = *properties::gen_parameters(spec.model);
  const int step_count = *rc::gen::inRange(1, 4);
  std::vector<StepBatch<Rational>> steps;
  for (int s = 0; s < step_count; ++s) steps.push_back(*properties::gen_batch(spec.model));
  const auto all = run_oracle(spec, initial, std::span<const StepBatch<Rational>>(steps));
  const auto same_applied_steps = [&](const OracleResult<Rational>& narrower) {
    RC_ASSERT(narrower.steps.size() == all.steps.size());
    for (std::size_t s = 0; s < all.steps.size(); ++s) {
      RC_ASSERT(narrower.steps[s].applied_gradient == all.steps[s].applied_gradient);
      RC_ASSERT(narrower.steps[s].clip_coefficient == all.steps[s].clip_coefficient);
      if (spec.max_grad_norm) RC_ASSERT(narrower.steps[s].grad_norm == all.steps[s].grad_norm);
      RC_ASSERT(narrower.steps[s].gradient.tensors.empty());
    }
  };
  const auto applied = run_oracle(spec, initial, std::span<const StepBatch<Rational>>(steps), OracleScope::applied_gradients);
  same_applied_steps(applied);
  RC_ASSERT(applied.parameters.tensors.empty());
  RC_ASSERT(applied.state.first_moment.empty());
  const auto trajectory = run_oracle(spec, initial, std::span<const StepBatch<Rational>>(steps), OracleScope::trajectory);
  same_applied_steps(trajectory);
  RC_ASSERT(trajectory.parameters == all.parameters);
  RC_ASSERT(trajectory.state == all.state);
}

}  // namespace
}  // namespace accumcheck::models
