// sim/reference_engine.h: equal to the full-batch oracle exactly, for every configuration the engine accepts
// (R > 1, every ZeRO stage, offload, buckets, uneven manual windows, empty ranks, checkpoint and resume), in
// every exact scalar; and deterministic in its trace.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/oracle.h"
#include "properties/generators/scenario_generators.h"
#include "properties/sim/engine_drive.h"
#include "properties/sim/scalar_catalogue.h"
#include "sim/convert.h"
#include "sim/reference_engine.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

using models::Rational;

// Asserts (RapidCheck) that a run equals the oracle on every step and in its final state.
void assert_equals_oracle(const Scenario& s, const RunResult& run) {
  const auto batches = oracle_batches(s);
  const auto oracle = models::run_oracle(s.training, s.initial_parameters,
                                         std::span<const models::StepBatch<Rational>>(batches));
  RC_ASSERT(run.steps.size() == oracle.steps.size());
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    RC_ASSERT(run.steps[i].applied);
    RC_ASSERT(run.steps[i].gradient == oracle.steps[i].applied_gradient);
    RC_ASSERT(run.steps[i].grad_norm == oracle.steps[i].grad_norm);
    RC_ASSERT(run.steps[i].clip_coefficient == oracle.steps[i].clip_coefficient);
  }
  RC_ASSERT(run.parameters == oracle.parameters);
  RC_ASSERT(run.optimizer_state == oracle.state);
}

RC_GTEST_PROP(ReferenceEngine, reference_engine_equals_the_full_batch_oracle_in_fast_rationals, ()) {
  const Scenario s = *properties::gen_scenario();
  RC_TAG(s.engine.zero_stage, s.engine.offload, s.engine.rank_count > 1, to_string(s.engine.boundary));
  assert_equals_oracle(s, make_target("reference")->run(s, RunOptions{.scalar = ScalarKind::fast_rational}));
}

RC_GTEST_PROP(ReferenceEngine, reference_engine_equals_the_full_batch_oracle_in_gmp_rationals, ()) {
  const Scenario s = *properties::gen_scenario();
  assert_equals_oracle(s, make_target("reference")->run(s, RunOptions{.scalar = ScalarKind::rational}));
}

RC_GTEST_PROP(ReferenceEngine, same_seed_gives_the_same_trace_and_other_schedules_the_same_result, ()) {
  Scenario s = *properties::gen_scenario();
  const auto target = make_target("reference");
  const RunResult a = target->run(s, RunOptions{});
  const RunResult b = target->run(s, RunOptions{});
  RC_ASSERT(a.trace_digest == b.trace_digest);
  RC_ASSERT(a.trace_event_count == b.trace_event_count);
  s.schedule_seed = *rc::gen::arbitrary<std::uint64_t>();
  const RunResult c = target->run(s, RunOptions{});
  RC_ASSERT(c.parameters == a.parameters);
  RC_ASSERT(c.optimizer_state == a.optimizer_state);
  RC_CLASSIFY(c.trace_digest != a.trace_digest, "schedule changed the trace");
}

RC_GTEST_PROP(ReferenceEngine, checkpoint_then_resume_equals_running_straight_through, ()) {
  Scenario s = *properties::gen_scenario();
  s.checkpoint_after_step.reset();
  const auto target = make_target("reference");
  const RunResult straight = target->run(s, RunOptions{});
  s.checkpoint_after_step = *rc::gen::inRange(0, static_cast<int>(s.steps.size()));
  const RunResult resumed = target->run(s, RunOptions{});
  RC_ASSERT(resumed.parameters == straight.parameters);
  RC_ASSERT(resumed.optimizer_state == straight.optimizer_state);
  for (std::size_t i = 0; i < s.steps.size(); ++i) RC_ASSERT(resumed.steps[i].gradient == straight.steps[i].gradient);
}

template <class S>
void assert_reset_runs_as_new() {
  // An engine made for one scenario and left anywhere in it (mid-window, copies pending), then reset for another,
  // must run that other exactly as an engine made for it: other shapes, ranks, stages, offload, faults, lines.
  const Scenario first = *properties::gen_scenario();
  const Scenario second = *rc::gen::arbitrary<bool>() ? first : *properties::gen_scenario();
  const auto faults = [](bool canary) { return ReferenceFaults{.skip_synchronize_before_step = canary}; };
  const bool canary_first = *rc::gen::arbitrary<bool>(), canary_second = *rc::gen::arbitrary<bool>();
  const bool lines_first = *rc::gen::arbitrary<bool>(), lines_second = *rc::gen::arbitrary<bool>();
  const auto seed_first = *rc::gen::arbitrary<std::uint64_t>(), seed_second = *rc::gen::arbitrary<std::uint64_t>();
  const std::size_t stop = gen_reset_point(first);
  RC_TAG(stop < drive_length(first) ? "reset mid-run" : "reset after a whole run",
         first.training.model == second.training.model ? "same model" : "another model");

  ReferenceEngine<S> reused(first.training, first.engine, to_scalar<S>(first.initial_parameters), seed_first,
                            lines_first, faults(canary_first));
  drive(reused, first, stop);
  reused.reset(second.training, second.engine, to_scalar<S>(second.initial_parameters), seed_second, lines_second,
               faults(canary_second));
  ReferenceEngine<S> fresh(second.training, second.engine, to_scalar<S>(second.initial_parameters), seed_second,
                           lines_second, faults(canary_second));
  assert_same_run(drive(reused, second), drive(fresh, second));
}

RC_GTEST_PROP(ReferenceEngine, a_reset_engine_runs_as_a_new_one_in_fast_rationals, ()) {
  assert_reset_runs_as_new<models::FastRational>();
}

RC_GTEST_PROP(ReferenceEngine, a_reset_engine_runs_as_a_new_one_in_fp32, ()) { assert_reset_runs_as_new<float>(); }

// The generated scenarios rarely overflow: an engine reset in a window whose gradient overflowed fp16 must not
// skip the next scenario's step for it.
TEST(ReferenceEngine, a_reset_engine_forgets_an_overflow_in_its_last_window) {
  Scenario overflows = properties::scalar_scenario({{1000, 1000}}, EngineConfig{.accumulation_steps = 2, .zero_stage = 1});
  overflows.engine.precision = Precision::fp16;
  overflows.engine.loss_scaler = models::LossScalerSpec{.initial_scale = Rational(1024)};
  Scenario fits = overflows;
  fits.steps = properties::scalar_scenario({{1, 1}}, overflows.engine).steps;
  ReferenceEngine<float> whole(overflows.training, overflows.engine, to_scalar<float>(overflows.initial_parameters), 1, false);
  ASSERT_FALSE(drive(whole, overflows).applied.at(0).has_value());  // its window overflows fp16: the step is skipped
  ReferenceEngine<float> reused(overflows.training, overflows.engine, to_scalar<float>(overflows.initial_parameters), 1, false);
  drive(reused, overflows, 1);  // reset after the first micro-batch, which overflowed
  reused.reset(fits.training, fits.engine, to_scalar<float>(fits.initial_parameters), 1, false);
  const Driven<float> run = drive(reused, fits);
  ASSERT_EQ(run.applied.size(), 1U);
  EXPECT_TRUE(run.applied[0].has_value());
}

TEST(ReferenceEngine, trace_lines_name_the_events_and_differ_with_offload) {
  Scenario s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.rank_count = 2, .accumulation_steps = 3, .zero_stage = 2});
  for (auto& mb : s.steps[0].micro_batches) mb.rank_sequences.push_back(mb.rank_sequences[0]);
  const RunResult plain = make_target("reference")->run(s, RunOptions{.keep_trace_lines = true});
  s.engine.offload = true;
  const RunResult offload = make_target("reference")->run(s, RunOptions{.keep_trace_lines = true});
  EXPECT_NE(plain.trace_digest, offload.trace_digest);
  EXPECT_EQ(plain.steps[0].gradient.tensors[0](0, 0), Rational(37));
  EXPECT_EQ(offload.steps[0].gradient.tensors[0](0, 0), Rational(37));
  EXPECT_NE(std::find_if(offload.trace_lines.begin(), offload.trace_lines.end(),
                         [](const std::string& l) { return l.starts_with("copy_complete"); }),
            offload.trace_lines.end());
}

// The canary must fail: the host optimizer reads the accumulator before its copies land.
TEST(ReferenceEngine, canary_without_synchronisation_gives_wrong_values_for_some_schedule) {
  Scenario s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.accumulation_steps = 3, .zero_stage = 2, .offload = true});
  int wrong = 0;
  for (std::uint64_t seed = 0; seed < 32; ++seed) {
    s.schedule_seed = seed;
    const RunResult r = make_target("canary-offload-nosync")->run(s, RunOptions{.scalar = ScalarKind::rational});
    wrong += r.steps[0].gradient.tensors[0](0, 0) != Rational(37);
  }
  EXPECT_GT(wrong, 0);
}

TEST(ReferenceEngine, impossible_configurations_are_rejected_with_a_message) {
  auto message = [](Scenario s) {
    try {
      make_target("reference")->run(s, RunOptions{});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  Scenario s = properties::scalar_scenario({{1, 10}}, EngineConfig{.accumulation_steps = 3});
  EXPECT_NE(message(s).find("exactly G = 3"), std::string::npos);
  s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.accumulation_steps = 3, .zero_stage = 4});
  EXPECT_NE(message(s).find("zero_stage = 4"), std::string::npos);
  s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.rank_count = 2, .accumulation_steps = 3});
  EXPECT_NE(message(s).find("expected R = 2"), std::string::npos);
  s = properties::scalar_scenario({{1}}, EngineConfig{.accumulation_steps = 2, .boundary = BoundaryMode::automatic,
                                                      .step_after_every_backward = false});
  EXPECT_NE(message(s).find("step() must follow every backward"), std::string::npos);
}

}  // namespace
}  // namespace accumcheck::sim

namespace accumcheck::sim {
namespace {

// bf16 storage of parameters and gradients, fp32 master weights and accumulator: g_k = c_k / 3 rounded to
// bf16 (8 significant bits) before the fp32 sum, so the result is within 3 bf16 roundings of 37.
TEST(ReferenceEngine, bf16_storage_rounds_each_micro_batch_gradient_once) {
  Scenario s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.accumulation_steps = 3, .zero_stage = 2});
  s.engine.precision = Precision::bf16;
  const double g = make_target("reference")->run(s, RunOptions{.scalar = ScalarKind::fp32}).steps[0].gradient.tensors[0](0, 0).to_double();
  // bf16(1/3) + bf16(10/3) + bf16(100/3) = 0.333984375 + 3.328125 + 33.25, summed in fp32.
  EXPECT_EQ(g, static_cast<double>(0.333984375f + 3.328125f + 33.25f));
  EXPECT_NEAR(g, 37.0, 37.0 * 3 * std::ldexp(1.0, -9));
  EXPECT_THROW(make_target("reference")->run(s, RunOptions{.scalar = ScalarKind::rational}), std::invalid_argument);
}

// fp16 with a dynamic loss scale: 100/1 * 1024 overflows fp16 (max 65504), the step is skipped and the scale
// halves; the next step at scale 512 applies.
TEST(ReferenceEngine, fp16_overflow_skips_the_step_and_the_next_one_applies_at_half_the_scale) {
  Scenario s = properties::scalar_scenario({{100}, {100}}, EngineConfig{.accumulation_steps = 1, .zero_stage = 1});
  s.engine.precision = Precision::fp16;
  s.engine.loss_scaler = models::LossScalerSpec{.initial_scale = Rational(1024)};
  s.training.optimizer.lr = Rational(1LL, 100LL);
  const RunResult r = make_target("reference")->run(s, RunOptions{.scalar = ScalarKind::fp32, .keep_trace_lines = true});
  EXPECT_FALSE(r.steps[0].applied);
  ASSERT_TRUE(r.steps[1].applied);
  EXPECT_EQ(r.steps[1].gradient.tensors[0](0, 0), Rational(100));  // 51200 is exact in fp16, unscaled by 512
  EXPECT_EQ(r.parameters.tensors[0](0, 0), Rational::from_double(static_cast<double>(-0.01f * 100.0f)));
  EXPECT_NE(std::find(r.trace_lines.begin(), r.trace_lines.end(), "skip_step 1 0 0"), r.trace_lines.end());
}

}  // namespace
}  // namespace accumcheck::sim
