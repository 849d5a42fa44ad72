// sim/loss_normaliser.h: the catalogue's (a+b)/2 versus (a+3b)/4 (sections 2 and 3), in its one-rank and
// cross-rank forms, through the full target (framework layer over the reference engine).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <memory>
#include <utility>

#include "properties/generators/scenario_generators.h"
#include "properties/sim/scalar_catalogue.h"
#include "sim/loss_normaliser.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

using models::Rational;
using properties::scalar_tokens;

// At w = 0 a token with target -2 has loss a = 2 and gradient 2; a token with target -4 has b = 8 and gradient 4.
// Token-mean over 1 + 3 tokens: gradient (2 + 3*4)/4 = 7/2. Mean of per-micro-batch means: (2 + 4)/2 = 3.
Scenario one_and_three_tokens(int rank_count, int G) {
  Scenario s = properties::scalar_scenario({}, EngineConfig{.rank_count = rank_count, .accumulation_steps = G, .zero_stage = 0});
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  const auto short_seq = scalar_tokens({Rational(-2)});
  const auto long_seq = scalar_tokens({Rational(-4), Rational(-4), Rational(-4)});
  StepPlan plan;
  if (rank_count == 1) {
    plan.micro_batches = {MicroBatch{{{short_seq}}}, MicroBatch{{{long_seq}}}};
  } else {
    plan.micro_batches = {MicroBatch{{{short_seq}, {long_seq}}}};
  }
  s.steps = {plan};
  return s;
}

Rational gradient_of(const std::string& target, const Scenario& s) {
  return make_target(target)->run(s, RunOptions{.scalar = ScalarKind::rational}).steps[0].gradient.tensors[0](0, 0);
}

TEST(LossNormaliser, one_rank_two_micro_batches_gives_mean_of_means_before_window_global_normalisation) {
  const Scenario s = one_and_three_tokens(1, 2);
  EXPECT_EQ(gradient_of("reference", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("openrlhf@0.10.2+reference", s), Rational(3));
  EXPECT_EQ(gradient_of("openrlhf@0.10.3+reference", s), Rational(3));  // still per micro-batch
  EXPECT_EQ(gradient_of("openrlhf@0.10.4+reference", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("transformers@4.45+reference", s), Rational(3));
  EXPECT_EQ(gradient_of("transformers@4.46+reference", s), Rational(7LL, 2LL));
}

TEST(LossNormaliser, two_ranks_one_micro_batch_separates_per_rank_from_global_counts) {
  const Scenario s = one_and_three_tokens(2, 1);
  EXPECT_EQ(gradient_of("reference", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("openrlhf@0.10.2+reference", s), Rational(3));
  EXPECT_EQ(gradient_of("openrlhf@0.10.3+reference", s), Rational(7LL, 2LL));  // global over ranks
  EXPECT_EQ(gradient_of("openrlhf@0.10.4+reference", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("transformers@4.46+reference", s), Rational(3));  // per-rank num_items_in_batch
  EXPECT_EQ(gradient_of("transformers@4.49+reference", s), Rational(3));  // the flag still off by default
  EXPECT_EQ(gradient_of("transformers@4.54+reference", s), Rational(7LL, 2LL));  // gathered over ranks
}

// 4.54+ over DeepSpeed: the count gathered, the loss times R, scale_wrt_gas=False: the token mean on any G and R.
TEST(LossNormaliser, trainer_4_54_is_window_global_over_deepspeed_too) {
  for (const auto& [ranks, g] : {std::pair{1, 2}, std::pair{2, 1}}) {
    Scenario s = one_and_three_tokens(ranks, g);
    s.engine.zero_stage = 2;
    EXPECT_EQ(gradient_of("transformers@4.54+deepspeed@0.19.0", s), Rational(7LL, 2LL)) << ranks << " ranks";
    EXPECT_EQ(gradient_of("transformers@4.49+deepspeed@0.19.0", s), ranks == 1 ? Rational(7LL, 2LL) : Rational(3))
        << ranks << " ranks";
  }
}

// The Trainer over DeepSpeed (measured on the real releases, docs/transformers-adapter.md "Over DeepSpeed"):
// 4.46.x passes the window's count and leaves DeepSpeed's 1/G in place, a G-th of the token mean; 4.49+ turns
// DeepSpeed's 1/G off (PR #35808). Without DeepSpeed both give the token mean.
TEST(LossNormaliser, trainer_4_46_over_deepspeed_keeps_deepspeeds_one_over_g_and_4_49_turns_it_off) {
  Scenario s = one_and_three_tokens(1, 2);
  s.engine.zero_stage = 2;  // the DeepSpeed models are of ZeRO-1/2
  EXPECT_EQ(gradient_of("transformers@4.46+deepspeed@0.19.0", s), Rational(7LL, 4LL));
  EXPECT_EQ(gradient_of("transformers@4.46+deepspeed@0.16.0", s), Rational(7LL, 4LL));
  EXPECT_EQ(gradient_of("transformers@4.49+deepspeed@0.19.0", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("transformers@4.49+reference", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("transformers@4.46+reference", s), Rational(7LL, 2LL));
  EXPECT_EQ(gradient_of("transformers@4.45+deepspeed@0.19.0", s), Rational(3));  // its 1/G is the mean of means'
  EXPECT_EQ(make_target("transformers@4.46+deepspeed@0.19.0")->name(), "transformers@4.46+deepspeed@0.19.0");
}

TEST(LossNormaliser, equal_token_counts_hide_the_difference) {
  Scenario s = one_and_three_tokens(1, 2);
  s.steps[0].micro_batches[0].rank_sequences[0][0] = scalar_tokens({Rational(-2), Rational(-2), Rational(-2)});
  EXPECT_EQ(gradient_of("openrlhf@0.10.2+reference", s), gradient_of("reference", s));
}

// fast_coefficients_into against coefficients(), value for value, over `out` lists left by an earlier window.
void expect_fast_equals_exact(const LossNormaliser& normaliser, const Scenario& s, FastWindowCoefficients& out) {
  for (const StepPlan& window : s.steps) {
    const WindowCoefficients exact = normaliser.coefficients(window, s.engine, s.training.aggregation);
    normaliser.fast_coefficients_into(window, s.engine, s.training.aggregation, out);
    RC_ASSERT(out.size() == exact.size());
    for (std::size_t k = 0; k < exact.size(); ++k) {
      RC_ASSERT(out[k].size() == exact[k].size());
      for (std::size_t r = 0; r < exact[k].size(); ++r) {
        RC_ASSERT(out[k][r].size() == exact[k][r].size());
        for (std::size_t i = 0; i < exact[k][r].size(); ++i) RC_ASSERT(out[k][r][i].to_rational() == exact[k][r][i]);
      }
    }
  }
}

// An exact run reads its coefficients through fast_coefficients_into (ComposedTarget::run_as): every built-in
// layer, and the layer each has under DeepSpeed, gives there what coefficients() gives, whatever lists `out` held.
RC_GTEST_PROP(LossNormaliser, fast_coefficients_equal_the_exact_ones, ()) {
  const Scenario s = *properties::gen_scenario();
  FastWindowCoefficients out(*rc::gen::inRange<std::size_t>(0, 4));  // what an earlier run may have left
  for (const auto& normaliser : builtin_normalisers()) {
    if (!normaliser->unsupported(s.training.aggregation).empty()) continue;
    expect_fast_equals_exact(*normaliser, s, out);
    if (const auto under = normaliser->under_deepspeed()) expect_fast_equals_exact(*under, s, out);
  }
}

// A layer of the user's own that implements coefficients() alone gets the default, the same lists converted.
class HalfOfEverySequence final : public LossNormaliser {
 public:
  std::string_view name() const override { return "half"; }
  std::string_view description() const override { return "every coefficient 1/2"; }
  WindowCoefficients coefficients(const StepPlan& window, const EngineConfig& engine, const models::AggregationSpec&) const override {
    WindowCoefficients out(window.micro_batches.size(), std::vector<std::vector<Rational>>(static_cast<std::size_t>(engine.rank_count)));
    for (std::size_t k = 0; k < out.size(); ++k)
      for (std::size_t r = 0; r < out[k].size(); ++r)
        out[k][r].assign(window.micro_batches[k].rank_sequences[r].size(), Rational(1LL, 2LL));
    return out;
  }
};

RC_GTEST_PROP(LossNormaliser, the_default_fast_coefficients_convert_the_exact_ones, ()) {
  const Scenario s = *properties::gen_scenario();
  FastWindowCoefficients out(*rc::gen::inRange<std::size_t>(0, 4));
  expect_fast_equals_exact(HalfOfEverySequence(), s, out);
}

TEST(LossNormaliser, names_are_listed_and_unknown_frameworks_rejected) {
  EXPECT_NE(find_normaliser("openrlhf@0.10.4"), nullptr);
  EXPECT_EQ(find_normaliser("openrlhf@9.9.9"), nullptr);
  EXPECT_THROW(make_target("openrlhf@9.9.9+reference"), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::sim
