// models/optimizer.h: SGD, Adam and AdamW on hand-computed steps, absent gradients skipped, validation.
#include <gmpxx.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/model.h"
#include "models/optimizer.h"

namespace accumcheck::models {
namespace {

// Adam's update as docs/oracle.md rounds it, written independently of truncate_to_bits: the nearest multiple of
// 2^-64 toward zero, computed with GMP's floor on the magnitude.
Rational truncated_update(const Rational& u) {
  const mpz_class scale = mpz_class(1) << kExactUpdateFractionBits;
  const mpq_class scaled = abs(u.mpq()) * scale;
  const mpz_class magnitude(scaled);  // mpz_set_q truncates: the floor of a magnitude
  mpq_class out(magnitude, scale);
  out.canonicalize();
  return Rational(u.sign() < 0 ? mpq_class(-out) : out);
}

// One scalar parameter (the linear model's weight, bias frozen) so that hand arithmetic stays readable.
struct Scalar1 {
  ModelSpec spec;
  Parameters<Rational> params;
  Gradient<Rational> grad;
  OptimizerState<Rational> state;

  explicit Scalar1(Rational w) {
    spec = ModelSpec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
    spec.frozen = {"bias"};
    params = zero_parameters<Rational>(spec);
    params.tensors[0](0, 0) = w;
    grad = zero_gradient<Rational>(spec);
    grad.present = {true, false};
    state = initial_optimizer_state<Rational>(spec);
  }
  Rational step(const OptimizerSpec& opt, Rational g) {
    grad.tensors[0](0, 0) = g;
    optimizer_step(opt, params, grad, state);
    return params.tensors[0](0, 0);
  }
};

TEST(Optimizer, sgd_with_momentum_matches_hand_steps) {
  const OptimizerSpec opt{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 10LL), .momentum = Rational(9LL, 10LL)};
  Scalar1 s(Rational(0));
  EXPECT_EQ(s.step(opt, Rational(1)), Rational(-1LL, 10LL));    // buf = 1 (first step: buf = d)
  EXPECT_EQ(s.step(opt, Rational(1)), Rational(-29LL, 100LL));  // buf = 9/10 + 1 = 19/10
  EXPECT_EQ(s.state.step_count[0], 2);
  EXPECT_EQ(s.state.step_count[1], 0);  // the frozen bias is never stepped
}

TEST(Optimizer, sgd_nesterov_and_coupled_weight_decay_match_hand_steps) {
  const OptimizerSpec nesterov{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 10LL), .momentum = Rational(9LL, 10LL),
                               .nesterov = true};
  Scalar1 s(Rational(0));
  EXPECT_EQ(s.step(nesterov, Rational(1)), Rational(-19LL, 100LL));  // d = 1 + 9/10 * 1
  const OptimizerSpec decay{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 10LL), .weight_decay = Rational(1LL, 100LL)};
  Scalar1 d(Rational(1));
  EXPECT_EQ(d.step(decay, Rational(0)), Rational(999LL, 1000LL));  // d = 0 + 1/100 * 1
}

TEST(Optimizer, adam_first_step_matches_hand_value) {
  // b1 = 1/2, b2 = 3/4, lr = 1/10, eps = 1/100, g = 2:
  // m = 1, v = 1, bias corrections 1/2 and 1/4 (sqrt 1/2, exact), denom = 1 / (1/2) + 1/100 = 201/100,
  // step size = (1/10) / (1/2) = 1/5, update = (1/5) / (201/100) = 20/201, truncated to 2^-64.
  const OptimizerSpec opt{.kind = OptimizerKind::adam, .lr = Rational(1LL, 10LL), .beta1 = Rational(1LL, 2LL),
                          .beta2 = Rational(3LL, 4LL), .eps = Rational(1LL, 100LL)};
  Scalar1 s(Rational(0));
  const Rational first = -truncated_update(Rational(20LL, 201LL));
  EXPECT_EQ(s.step(opt, Rational(2)), first);
  EXPECT_NE(first, Rational(-20LL, 201LL));
  EXPECT_LT(Rational(20LL, 201LL) + first, pow2(-kExactUpdateFractionBits));
  // Second step, g = 2: m = 3/2, v = 7/4, corrections 3/4 and 7/16; sqrt(7/4) and sqrt(7/16) are irrational and
  // each is the documented root, taken separately as PyTorch does.
  const Rational denom = sqrt_rounded(Rational(7LL, 4LL), kExactSqrtFractionBits) /
                             sqrt_rounded(Rational(7LL, 16LL), kExactSqrtFractionBits) +
                         Rational(1LL, 100LL);
  const Rational update = (Rational(1LL, 10LL) / Rational(3LL, 4LL)) * Rational(3LL, 2LL) / denom;
  const Rational expected = first - truncated_update(update);
  EXPECT_EQ(s.step(opt, Rational(2)), expected);
  EXPECT_EQ(s.state.step_count[0], 2);
}

// The exact types take Adam's update as (step_size c) m / (sqrt(v) + eps c), c = sqrt(1 - b2^t), in one quotient
// (models::round_update_quotient): the value of PyTorch's step_size m / (sqrt(v) / c + eps) as written, rounded
// once. Checked here against that formula, written out in Rational, for both exact types.
RC_GTEST_PROP(Optimizer, exact_adam_update_is_the_written_formula_rounded_once, ()) {
  const auto small = [](int bound) {
    return rc::gen::map(rc::gen::pair(rc::gen::inRange(-bound, bound + 1), rc::gen::element(1, 2, 3, 7, 8, 10, 1024)),
                        [](const std::pair<int, int>& p) { return Rational(p.first, p.second); });
  };
  OptimizerSpec spec{.kind = *rc::gen::element(OptimizerKind::adam, OptimizerKind::adamw)};
  spec.lr = *rc::gen::element(Rational(1LL, 8LL), Rational(1LL, 10LL), Rational(3LL, 1000LL));
  spec.beta1 = *rc::gen::element(Rational(1LL, 2LL), Rational(9LL, 10LL));
  spec.beta2 = *rc::gen::element(Rational(3LL, 4LL), Rational(999LL, 1000LL));
  spec.eps = *rc::gen::element(Rational(1LL, 100LL), Rational(1LL, 100000000LL));
  spec.weight_decay = *rc::gen::element(Rational(0), Rational(1LL, 10LL));
  const long t = *rc::gen::inRange(1L, 6L);
  const Rational theta = *small(8), g = *small(8), m = *small(4);
  const Rational v = abs(*small(4)) * *rc::gen::element(Rational(1), Rational(1LL, 3LL));
  // Written out: decay, moments, bias corrections, then the update as PyTorch's Adam writes it.
  Rational w = theta, g_eff = g;
  if (spec.weight_decay.sign() != 0) {
    if (spec.kind == OptimizerKind::adam) g_eff += spec.weight_decay * theta;
    else w *= Rational(1) - spec.lr * spec.weight_decay;
  }
  Rational power1(1), power2(1);
  for (long i = 0; i < t; ++i) {
    power1 *= spec.beta1;
    power2 *= spec.beta2;
  }
  const Rational m1 = spec.beta1 * m + (Rational(1) - spec.beta1) * g_eff;
  const Rational v1 = spec.beta2 * v + (Rational(1) - spec.beta2) * g_eff * g_eff;
  const Rational denom = sqrt_rounded(v1, kExactSqrtFractionBits) /
                             sqrt_rounded(Rational(1) - power2, kExactSqrtFractionBits) + spec.eps;
  const Rational expected = w - truncated_update(spec.lr / (Rational(1) - power1) * m1 / denom);

  Rational r_theta = theta, r_first = m, r_second = v;
  update_element(spec, step_constants<Rational>(spec, t, false), r_theta, g, r_first, r_second);
  RC_ASSERT(r_theta == expected);
  RC_ASSERT(r_first == m1);
  RC_ASSERT(r_second == v1);
  FastRational f_theta(theta), f_first(m), f_second(v);
  update_element(spec, step_constants<FastRational>(spec, t, false), f_theta, FastRational(g), f_first, f_second);
  RC_ASSERT(f_theta.to_rational() == expected);
}

TEST(Optimizer, adam_keeps_exact_parameters_on_the_update_grid_whatever_the_step_count) {
  // Without the rounding, each step divides by a rounded root and the parameter's digits grow with every step
  // (each later product paying for them); with it, a parameter that starts on the 2^-64 grid stays on it.
  const OptimizerSpec opt{.kind = OptimizerKind::adam, .lr = Rational(1LL, 8LL)};  // PyTorch's betas and eps
  Scalar1 s(Rational(3LL, 4LL));
  for (int step = 1; step <= 40; ++step) {
    const Rational w = s.step(opt, Rational(step % 3 == 0 ? -5 : 7, 3 + step));
    ASSERT_TRUE((w * pow2(kExactUpdateFractionBits)).is_integer()) << "step " << step << ": " << w;
  }
  EXPECT_EQ(s.state.step_count[0], 40);
}

TEST(Optimizer, adam_couples_and_adamw_decouples_weight_decay) {
  // Adam, w = 1, g = 0, wd = 1/10: g_eff = 1/10, m = 1/20, v = 1/400, sqrt(v) = 1/20, denom = (1/20)/(1/2) + 1/100
  // = 11/100, update (1/5)(1/20)/(11/100) = 1/11, w = 1 - trunc(1/11) (to 2^-64).
  OptimizerSpec opt{.kind = OptimizerKind::adam, .lr = Rational(1LL, 10LL), .weight_decay = Rational(1LL, 10LL),
                    .beta1 = Rational(1LL, 2LL), .beta2 = Rational(3LL, 4LL), .eps = Rational(1LL, 100LL)};
  Scalar1 adam(Rational(1));
  EXPECT_EQ(adam.step(opt, Rational(0)), Rational(1) - truncated_update(Rational(1LL, 11LL)));
  // AdamW: w = 1 * (1 - lr wd) = 99/100, and with g = 0 the moments stay 0, so the update is 0 / eps = 0.
  opt.kind = OptimizerKind::adamw;
  Scalar1 adamw(Rational(1));
  EXPECT_EQ(adamw.step(opt, Rational(0)), Rational(99LL, 100LL));
}

TEST(Optimizer, absent_gradient_leaves_parameter_and_state_untouched) {
  const OptimizerSpec opt{.kind = OptimizerKind::adamw, .lr = Rational(1), .weight_decay = Rational(1LL, 2LL)};
  Scalar1 s(Rational(3));
  s.grad.present = {false, false};
  s.step(opt, Rational(5));
  EXPECT_EQ(s.params.tensors[0](0, 0), Rational(3));
  EXPECT_EQ(s.state.step_count[0], 0);
}

// Flat-partition optimizers (DeepSpeed ZeRO) step a parameter without a gradient as if it were zeros.
TEST(Optimizer, missing_gradient_is_zero_steps_absent_parameters_but_never_frozen_ones) {
  OptimizerSpec opt{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 10LL), .weight_decay = Rational(1LL, 10LL)};
  opt.missing_gradient_is_zero = true;
  Scalar1 s(Rational(1));
  s.params.tensors[1](0, 0) = Rational(1);  // the frozen bias
  s.grad.present = {false, false};
  optimizer_step(opt, s.params, s.grad, s.state, frozen_mask(s.spec));
  EXPECT_EQ(s.params.tensors[0](0, 0), Rational(99LL, 100LL));  // decayed: d = 0 + wd * 1
  EXPECT_EQ(s.params.tensors[1](0, 0), Rational(1));            // frozen: untouched
  EXPECT_EQ(s.state.step_count, (std::vector<long>{1, 0}));
}

TEST(Optimizer, invalid_specs_are_rejected_with_the_field_named) {
  auto message = [](const OptimizerSpec& spec) {
    try {
      validate(spec);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({.kind = OptimizerKind::sgd, .lr = Rational(-1)}), "optimizer: lr = -1 is negative");
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta1 = Rational(1)}), "optimizer: beta1 = 1 is outside [0, 1)");
  EXPECT_EQ(message({.kind = OptimizerKind::sgd, .nesterov = true}),
            "optimizer: nesterov needs a positive momentum and zero dampening");
  // The bounds of [0, 1) on both sides, inline and promoted values alike.
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta2 = Rational(-1LL, 3LL)}), "optimizer: beta2 = -1/3 is outside [0, 1)");
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta1 = Rational(0)}), "accepted");
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta1 = Rational(999999LL, 1000000LL)}), "accepted");
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta2 = Rational(1000001LL, 1000000LL)}),
            "optimizer: beta2 = 1000001/1000000 is outside [0, 1)");
  const Rational just_below_one = Rational(1) - pow2(-100), just_above_one = Rational(1) + pow2(-100);
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta1 = just_below_one}), "accepted");
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .beta1 = just_above_one}),
            "optimizer: beta1 = " + just_above_one.to_string() + " is outside [0, 1)");
  EXPECT_EQ(message({.kind = OptimizerKind::adam, .eps = Rational(0)}), "optimizer: eps = 0 must be positive");
  EXPECT_EQ(message({.kind = OptimizerKind::sgd, .weight_decay = Rational(-1LL, 2LL)}),
            "optimizer: weight_decay = -1/2 is negative");
  EXPECT_EQ(message({.kind = OptimizerKind::adamw}), "accepted");
  EXPECT_EQ(parse_optimizer_kind("adamw"), OptimizerKind::adamw);
  EXPECT_THROW(parse_optimizer_kind("lion"), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::models
