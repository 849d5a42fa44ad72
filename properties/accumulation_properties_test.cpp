// properties/: every property passes on the reference target over generated scenarios, and each catches the
// bugs it is meant to catch on the catalogue's minimal cases (a property that cannot fail proves nothing).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/generators/scenario_generators.h"
#include "properties/membership.h"
#include "properties/property.h"
#include "properties/sim/scalar_catalogue.h"

namespace accumcheck::properties {
namespace {

using models::Rational;

const sim::RunOptions kExact{.scalar = sim::ScalarKind::fast_rational};

RC_GTEST_PROP(AccumulationProperties, every_property_holds_for_the_reference_target, ()) {
  const sim::Scenario s = *gen_scenario();
  const auto reference = sim::make_target("reference");
  for (const auto& property : all_properties()) {
    const Verdict v = property->check(*reference, s, kExact);
    RC_ASSERT(v.outcome != Outcome::fail);
    RC_CLASSIFY(v.outcome == Outcome::cannot_run, std::string(property->name()) + " could not run");
  }
}

// DeepSpeed's fixed band stays clean on ordinary scenarios (every parameter used every step, ZeRO 1/2).
RC_GTEST_PROP(AccumulationProperties, every_property_holds_for_deepspeed_band_c_on_dense_models, ()) {
  sim::Scenario s = *gen_scenario();
  s.engine.zero_stage = *rc::gen::inRange(1, 3);
  // Ordinary loops only: the boundary on every backward with one step() per window is a known band C issue
  // (upstream notes 1.8.2; membership_names_a_leak_from_an_earlier_step).
  if (s.engine.boundary == sim::BoundaryMode::automatic && !s.engine.step_after_every_backward) s.engine.boundary = sim::BoundaryMode::manual;
  s.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 2, .output_size = 1};
  s.initial_parameters = *gen_parameters(s.training.model);
  for (auto& step : s.steps)  // every micro-batch of every rank carries one token: no parameter ever lacks a gradient
    for (auto& mb : step.micro_batches)
      for (auto& rank : mb.rank_sequences) {
        rank = {*gen_sequence(s.training.model)};
        if (rank[0].token_count() == 0) rank[0] = scalar_tokens_2d();
      }
  const auto target = sim::make_target("deepspeed@0.19.0");
  for (const auto& property : all_properties()) {
    const Verdict v = property->check(*target, s, kExact);
    if (v.outcome == Outcome::fail) RC_FAIL(std::string(property->name()) + ": " + v.message);
  }
}

sim::Scenario catalogue_g3() {
  return scalar_scenario({{1, 10, 100}, {1000, 10000, 100000}},
                         sim::EngineConfig{.accumulation_steps = 3, .zero_stage = 2, .offload = true});
}

TEST(AccumulationProperties, band_b_offload_drop_fails_the_oracle_split_order_offload_and_membership_properties) {
  const auto buggy = sim::make_target("deepspeed@0.16.0");
  const sim::Scenario s = catalogue_g3();
  for (const char* name : {"accumulated_update_equals_full_batch_update", "split_does_not_change_the_update",
                           "offload_and_partitioning_do_not_change_the_update", "micro_batch_order_does_not_change_the_update",
                           "applied_gradient_holds_each_micro_batch_once"}) {
    const Verdict v = find_property(name)->check(*buggy, s, kExact);
    EXPECT_EQ(v.outcome, Outcome::fail) << name;
  }
  // The norm is that of the (truncated) gradient it applied: property 6 holds, as upstream's logging did.
  EXPECT_EQ(find_property("reported_norm_is_the_norm_of_the_applied_gradient")->check(*buggy, s, kExact).outcome, Outcome::pass);
  const auto fixed = sim::make_target("deepspeed@0.19.0");
  for (const auto& property : all_properties())
    EXPECT_NE(property->check(*fixed, s, kExact).outcome, Outcome::fail) << property->name();
}

// SGD with lr = 1/1000003 on the scalar world: each step multiplies w's denominator by 1000003 (about 2^20), so
// 250 steps take it past 5000 bits; 100 steps stay within the limit (checked: it passes).
sim::Scenario growing_scenario(int steps) {
  sim::Scenario s = scalar_scenario(std::vector<std::vector<long long>>(static_cast<std::size_t>(steps), {1}),
                                    sim::EngineConfig{.accumulation_steps = 1});
  s.training.optimizer.lr = Rational(1LL, 1000003LL);
  return s;
}

TEST(AccumulationProperties, a_run_past_the_exact_size_limit_cannot_run_and_says_why) {
  const auto target = sim::make_target("reference");
  const Property& p1 = *find_property("accumulated_update_equals_full_batch_update");
  const Verdict within = p1.check(*target, growing_scenario(100), kExact);  // within the limit
  EXPECT_EQ(within.outcome, Outcome::pass) << within.message;
  const Verdict past = p1.check(*target, growing_scenario(250), kExact);  // past it
  EXPECT_EQ(past.outcome, Outcome::cannot_run);
  EXPECT_NE(past.message.find("more than " + std::to_string(models::kExactBitsMax) + " bits"), std::string::npos)
      << past.message;
  EXPECT_NE(past.message.find("--max-steps"), std::string::npos) << past.message;
  // A float scalar's bound is centred on the same exact values: it cannot run either, and says why.
  const Verdict past_fp64 = p1.check(*target, growing_scenario(250), sim::RunOptions{.scalar = sim::ScalarKind::fp64});
  EXPECT_EQ(past_fp64.outcome, Outcome::cannot_run);
  EXPECT_NE(past_fp64.message.find("bits"), std::string::npos) << past_fp64.message;
}

TEST(AccumulationProperties, membership_names_the_dropped_micro_batch) {
  const Verdict v = find_property("applied_gradient_holds_each_micro_batch_once")->check(*sim::make_target("deepspeed@0.16.0"), catalogue_g3(), kExact);
  ASSERT_TRUE(v.membership);
  EXPECT_EQ(v.membership->summary, "step 0: micro-batch 1 (rank 0) of step 0 dropped; step 1: micro-batch 1 (rank 0) of step 1 dropped");
  ASSERT_EQ(v.membership->wrong.size(), 2u);
  EXPECT_EQ(v.membership->wrong[0].micro_batch, (MicroBatchId{0, 1, 0}));
}

TEST(AccumulationProperties, membership_names_a_leak_from_an_earlier_step) {
  // Band C with the boundary on every backward (upstream notes 1.8.2): g0 lost, the cpu buffer leaks.
  sim::Scenario s = scalar_scenario({{1, 10, 100}, {1, 10, 100}}, sim::EngineConfig{.accumulation_steps = 1, .zero_stage = 2, .offload = true,
                                                                                    .step_after_every_backward = false});
  const Verdict v = find_property("applied_gradient_holds_each_micro_batch_once")->check(*sim::make_target("deepspeed@0.19.0"), s, kExact);
  EXPECT_EQ(v.outcome, Outcome::fail);
  EXPECT_NE(v.message.find("micro-batch 0 (rank 0) of step 0 dropped"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("of step 0 leaked in"), std::string::npos) << v.message;
}

TEST(AccumulationProperties, openrlhf_mean_of_means_fails_the_oracle_property_but_not_membership) {
  sim::Scenario s = scalar_scenario({}, sim::EngineConfig{.accumulation_steps = 2});
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  s.steps = {sim::StepPlan{{sim::MicroBatch{{{scalar_tokens({Rational(-2)})}}},
                            sim::MicroBatch{{{scalar_tokens({Rational(-4), Rational(-4), Rational(-4)})}}}}}};
  const auto target = sim::make_target("openrlhf@0.10.2+reference");
  const Verdict v = find_property("accumulated_update_equals_full_batch_update")->check(*target, s, kExact);
  ASSERT_EQ(v.outcome, Outcome::fail);
  ASSERT_FALSE(v.mismatches.empty());
  EXPECT_EQ(v.mismatches[0].expected, Rational(7LL, 2LL));
  EXPECT_EQ(v.mismatches[0].actual, Rational(3));
  EXPECT_EQ(find_property("accumulated_update_equals_full_batch_update")->check(*sim::make_target("openrlhf@0.10.4+reference"), s, kExact).outcome,
            Outcome::pass);
}

TEST(AccumulationProperties, the_canary_fails_and_fixed_point_cannot_run) {
  const auto canary = sim::make_target("canary-offload-nosync");
  int failed = 0;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    sim::Scenario s = catalogue_g3();
    s.schedule_seed = seed;
    failed += find_property("accumulated_update_equals_full_batch_update")->check(*canary, s, kExact).outcome == Outcome::fail;
  }
  EXPECT_GT(failed, 0);
  const Verdict v = find_property("accumulated_update_equals_full_batch_update")
                        ->check(*sim::make_target("reference"), catalogue_g3(), sim::RunOptions{.scalar = sim::ScalarKind::fixed32});
  EXPECT_EQ(v.outcome, Outcome::cannot_run);
  EXPECT_NE(v.message.find("exact scalar"), std::string::npos);
}

// Float scalars are compared within the derived rounding bound: the reference in fp32 passes, and the dropped
// micro-batch of band B stands far outside the bound (101/3 against 37 in fp32).
TEST(AccumulationProperties, float_runs_pass_within_the_bound_and_the_drop_stands_outside_it) {
  const auto* p = find_property("accumulated_update_equals_full_batch_update");
  for (auto scalar : {sim::ScalarKind::fp32, sim::ScalarKind::fp64}) {
    const Verdict clean = p->check(*sim::make_target("reference"), catalogue_g3(), sim::RunOptions{.scalar = scalar});
    EXPECT_EQ(clean.outcome, Outcome::pass) << clean.message;
    const Verdict buggy = p->check(*sim::make_target("deepspeed@0.16.0"), catalogue_g3(), sim::RunOptions{.scalar = scalar});
    ASSERT_EQ(buggy.outcome, Outcome::fail) << buggy.message;
    ASSERT_FALSE(buggy.mismatches.empty());
    const auto& m = buggy.mismatches[0];
    EXPECT_GT(models::abs(m.actual - m.expected), m.tolerance * 1000) << m.where;
  }
}

TEST(AccumulationProperties, zero_2_without_offload_in_0_18_0_fails_even_at_g2) {
  const sim::Scenario s = scalar_scenario({{1, 10}}, sim::EngineConfig{.accumulation_steps = 2, .zero_stage = 2});
  EXPECT_EQ(find_property("accumulated_update_equals_full_batch_update")->check(*sim::make_target("deepspeed@0.18.0"), s, kExact).outcome,
            Outcome::fail);
}

}  // namespace
}  // namespace accumcheck::properties
