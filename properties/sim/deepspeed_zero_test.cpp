// sim/deepspeed_zero.h against the hand traces of the catalogue (section 1) and docs/upstream-notes.md
// (section 1.7, 1.8): scalar w, one rank, c = (1, 10, 100) then c' = (1000, 10000, 100000), g_k = c_k / G.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties/generators/scenario_generators.h"
#include "properties/sim/engine_drive.h"
#include "properties/sim/scalar_catalogue.h"
#include "sim/deepspeed_zero.h"
#include "sim/json/scenario_json.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

using models::Rational;
using properties::scalar_scenario;

struct Trace2 {
  Rational step1, step2;
};

Trace2 run_scalar(const std::string& target, const std::vector<std::vector<long long>>& c, EngineConfig engine) {
  const RunResult result = make_target(target)->run(scalar_scenario(c, engine), RunOptions{.scalar = ScalarKind::rational});
  EXPECT_EQ(result.steps.size(), c.size());
  EXPECT_TRUE(result.steps[0].applied) << target;
  return {result.steps[0].gradient.tensors[0](0, 0),
          result.steps.size() > 1 ? result.steps[1].gradient.tensors[0](0, 0) : Rational(0)};
}

EngineConfig zero(int stage, bool offload, int G) {
  return EngineConfig{.rank_count = 1, .accumulation_steps = G, .zero_stage = stage, .offload = offload};
}

const std::vector<std::vector<long long>> kG3 = {{1, 10, 100}, {1000, 10000, 100000}};
const std::vector<std::vector<long long>> kG2 = {{1, 10}, {1000, 10000}};

TEST(DeepSpeedZero, zero2_offload_g3_drops_the_middle_micro_batch_in_bands_b1_and_b2) {
  for (const char* v : {"deepspeed@0.15.2", "deepspeed@0.16.0", "deepspeed@0.16.4", "deepspeed@0.16.5", "deepspeed@0.17.0",
                        "deepspeed@0.18.0", "deepspeed@0.18.9"}) {
    const Trace2 t = run_scalar(v, kG3, zero(2, true, 3));
    EXPECT_EQ(t.step1, Rational(101LL, 3LL)) << v;     // g0 + g2
    EXPECT_EQ(t.step2, Rational(101000LL, 3LL)) << v;  // no leak from step 1
  }
}

TEST(DeepSpeedZero, zero2_offload_g3_is_correct_in_bands_a_and_c) {
  for (const char* v : {"deepspeed@0.14.0", "deepspeed@0.15.1", "deepspeed@0.19.0", "deepspeed@0.19.5"}) {
    const Trace2 t = run_scalar(v, kG3, zero(2, true, 3));
    EXPECT_EQ(t.step1, Rational(37)) << v;
    EXPECT_EQ(t.step2, Rational(37000)) << v;
  }
}

TEST(DeepSpeedZero, g2_is_correct_in_every_band_with_and_without_offload) {
  for (const char* v : {"deepspeed@0.15.1", "deepspeed@0.16.0", "deepspeed@0.17.0", "deepspeed@0.18.9", "deepspeed@0.19.0"})
    for (int stage : {1, 2})
      for (bool offload : {false, true}) {
        const Trace2 t = run_scalar(v, kG2, zero(stage, offload, 2));
        EXPECT_EQ(t.step1, Rational(11LL, 2LL)) << v << " stage " << stage << " offload " << offload;
        EXPECT_EQ(t.step2, Rational(11000LL, 2LL)) << v << " stage " << stage << " offload " << offload;
      }
}

// ZeRO-1 reduces once per window, on autograd's sum, so the offload rule never sees a partial sum.
TEST(DeepSpeedZero, zero1_offload_is_correct_for_ordinary_accumulation_in_every_band) {
  for (const char* v : {"deepspeed@0.15.1", "deepspeed@0.16.0", "deepspeed@0.17.0", "deepspeed@0.18.9", "deepspeed@0.19.0"}) {
    const Trace2 t = run_scalar(v, kG3, zero(1, true, 3));
    EXPECT_EQ(t.step1, Rational(37)) << v;
    EXPECT_EQ(t.step2, Rational(37000)) << v;
  }
}

// v0.17.6 - v0.18.2 (PR #7509, issue #7718): each ZeRO-2 epilogue overwrites the accumulator.
TEST(DeepSpeedZero, zero2_without_offload_keeps_only_the_last_micro_batch_from_0_17_6_to_0_18_2) {
  for (const char* v : {"deepspeed@0.17.6", "deepspeed@0.18.0", "deepspeed@0.18.2"}) {
    EXPECT_EQ(run_scalar(v, kG3, zero(2, false, 3)).step1, Rational(100LL, 3LL)) << v;
    EXPECT_EQ(run_scalar(v, kG2, zero(2, false, 2)).step1, Rational(5)) << v;
    EXPECT_EQ(run_scalar(v, kG3, zero(1, false, 3)).step1, Rational(37)) << v;  // ZeRO-1: one epilogue
  }
  for (const char* v : {"deepspeed@0.17.5", "deepspeed@0.18.3"})
    EXPECT_EQ(run_scalar(v, kG3, zero(2, false, 3)).step1, Rational(37)) << v;
}

// PR #7981's pattern: configured G = 1, the caller sets the boundary on the last of 3 backwards.
TEST(DeepSpeedZero, manual_boundary_with_configured_g1_keeps_only_the_last_backward_before_band_c) {
  EngineConfig e = zero(2, true, 1);
  e.boundary = BoundaryMode::manual;
  const std::vector<std::vector<long long>> c = {{1, 10, 100}};
  for (const char* v : {"deepspeed@0.15.1", "deepspeed@0.16.0", "deepspeed@0.18.9"})
    EXPECT_EQ(run_scalar(v, c, e).step1, Rational(100LL, 3LL)) << v;
  EXPECT_EQ(run_scalar("deepspeed@0.19.0", c, e).step1, Rational(37));
  e.zero_stage = 1;  // ZeRO-1 copies once, with autograd's sum
  for (const char* v : {"deepspeed@0.15.1", "deepspeed@0.16.0", "deepspeed@0.18.9", "deepspeed@0.19.0"})
    EXPECT_EQ(run_scalar(v, c, e).step1, Rational(37)) << v;
}

// Upstream notes 1.8.2 (by reading, not yet executed upstream): G = 1, every backward a boundary, one step()
// per window of 3 backwards. Band C with offload loses g0 and its cpu buffer leaks into the next step.
TEST(DeepSpeedZero, boundary_on_every_backward_follows_the_reading_of_each_band) {
  EngineConfig e = zero(2, true, 1);
  e.step_after_every_backward = false;
  EXPECT_EQ(run_scalar("deepspeed@0.16.0", kG3, e).step1, Rational(100LL, 3LL));
  const Trace2 c = run_scalar("deepspeed@0.19.0", kG3, e);
  EXPECT_EQ(c.step1, Rational(110LL, 3LL));
  EXPECT_EQ(c.step2, Rational(110110LL, 3LL));
  e.offload = false;
  EXPECT_EQ(run_scalar("deepspeed@0.17.0", kG3, e).step1, Rational(37));          // accumulates until step()
  EXPECT_EQ(run_scalar("deepspeed@0.18.3", kG3, e).step1, Rational(100LL, 3LL));  // rebuilt at every boundary
  EXPECT_THROW(run_scalar("deepspeed@0.18.0", kG3, e), EngineCrash);             // TypeError upstream
}

// 0.19.8 in bf16 (fp32 gradient accumulation): every reduction adds into the compact fp32 partition, which step()
// drops. So the boundary on every backward keeps every backward, with and without offload, where fp32 keeps
// the last (without offload) or loses the first and leaks (with offload). Found by the differential property
// on the real 0.19.8: bf16 ZeRO-2 without offload, G = 1, backwards of gradient 1 then 0 applied 1, not 0.
TEST(DeepSpeedZero, bf16_on_0_19_8_accumulates_every_reduction_until_step) {
  const std::vector<std::vector<long long>> c = {{1, 10, 100}, {2, 20, 40}};  // exact in bf16
  for (bool offload : {false, true}) {
    EngineConfig e = zero(2, offload, 1);
    e.step_after_every_backward = false;
    e.precision = Precision::bf16;
    Scenario s = scalar_scenario(c, e);
    s.training.aggregation.mode = models::LossAggregation::sum;  // gradients c_k, exact in bf16
    const RunResult r = make_target("deepspeed@0.19.8")->run(s, RunOptions{.scalar = ScalarKind::fp32});
    EXPECT_EQ(r.steps.at(0).gradient.tensors[0](0, 0), Rational(111)) << "offload " << offload;
    EXPECT_EQ(r.steps.at(1).gradient.tensors[0](0, 0), Rational(62)) << "offload " << offload;
    s.engine.precision = Precision::full;
    const RunResult full = make_target("deepspeed@0.19.8")->run(s, RunOptions{.scalar = ScalarKind::fp32});
    EXPECT_EQ(full.steps.at(0).gradient.tensors[0](0, 0), Rational(offload ? 110 : 100)) << "offload " << offload;
  }
}

TEST(DeepSpeedZero, reported_norm_comes_from_the_truncated_sum) {
  EngineConfig e = zero(2, true, 3);
  const RunResult buggy = make_target("deepspeed@0.16.0")->run(scalar_scenario(kG3, e), RunOptions{.scalar = ScalarKind::rational});
  EXPECT_EQ(buggy.steps[0].grad_norm, Rational(101LL, 3LL));
  const RunResult fixed = make_target("deepspeed@0.19.0")->run(scalar_scenario(kG3, e), RunOptions{.scalar = ScalarKind::rational});
  EXPECT_EQ(fixed.steps[0].grad_norm, Rational(37));
}

// ZeRO-1 + offload in bf16 before 0.19.8: the reduced bucket is discarded and each rank's partition steps on its
// own rank's unreduced gradient (grad_accum). The expected values are what the real releases gave through
// adapters/deepspeed (docs/upstream/deepspeed-bf16-zero1-offload-unreduced.md): two ranks, G = 1 or 2, sum
// aggregation, SGD, the reference layer's coefficient R = 2 on every token, weight at 0 (gradient -y x).
Scenario two_rank_bf16_zero1_offload(int input_size, int G, const nlohmann::json& steps, int output_size = 1) {
  nlohmann::json j = {
      {"checkpoint_after_step", nullptr},
      {"engine", {{"accumulation_steps", G}, {"boundary", "automatic"}, {"bucket_element_count", 0}, {"loss_scaler", nullptr},
                  {"offload", true}, {"precision", "bf16"}, {"rank_count", 2}, {"step_after_every_backward", true},
                  {"zero_stage", 1}}},
      {"initial_parameters",
       {{"bias", std::vector<std::vector<std::string>>(static_cast<std::size_t>(output_size), {"0"})},
        {"weight", std::vector<std::vector<std::string>>(static_cast<std::size_t>(output_size),
                                                         std::vector<std::string>(static_cast<std::size_t>(input_size), "0"))}}},
      {"schedule_seed", "0"},
      {"steps", steps},
      {"training", {{"aggregation", {{"mode", "sum"}, {"norm_constant", "1"}}}, {"max_grad_norm", nullptr},
                    {"model", {{"embed_size", 0}, {"expert_count", 1}, {"frozen", {"bias"}}, {"hidden_size", 0},
                               {"input_size", input_size}, {"kind", "linear"}, {"output_size", output_size}, {"vocab_size", 0}}},
                    {"optimizer", {{"beta1", "9/10"}, {"beta2", "999/1000"}, {"dampening", "0"}, {"eps", "1/100000000"},
                                   {"kind", "sgd"}, {"lr", "1/2"}, {"missing_gradient_is_zero", false}, {"momentum", "0"},
                                   {"nesterov", false}, {"weight_decay", "0"}}}}}};
  return scenario_from_json(j);
}

nlohmann::json token(std::vector<std::string> x, std::vector<std::string> y) {
  nlohmann::json t;
  t["expert_index"] = nlohmann::json::array();
  t["features"] = nlohmann::json::array({nlohmann::json(x)});
  t["loss_mask"] = nlohmann::json::array({1});
  t["targets"] = nlohmann::json::array({nlohmann::json(y)});
  t["token_ids"] = nlohmann::json::array();
  return t;
}
nlohmann::json token(std::vector<std::string> x, const std::string& y) { return token(std::move(x), std::vector<std::string>{y}); }

std::vector<double> applied_gradient(const std::string& target, const Scenario& s) {
  const RunResult r = make_target(target)->run(s, RunOptions{.scalar = ScalarKind::fp32});
  EXPECT_EQ(r.steps.size(), 1u);
  std::vector<double> out;
  for (Eigen::Index i = 0; i < r.steps.at(0).gradient.tensors[0].size(); ++i)
    out.push_back(r.steps.at(0).gradient.tensors[0](i).to_double());
  return out;
}

TEST(DeepSpeedZero, zero1_offload_bf16_steps_each_partition_on_its_own_ranks_gradient_before_0_19_8) {
  // The finding docs/upstream/deepspeed-bf16-zero1-offload-unreduced.finding.json: rank 0 one token (x 1, y -1), rank 1 an empty micro-batch.
  const Scenario empty_rank = two_rank_bf16_zero1_offload(
      1, 1, nlohmann::json::array({nlohmann::json::array({nlohmann::json::array({nlohmann::json::array({token({"1"}, "-1")}),
                                                                                 nlohmann::json::array()})})}));
  // Three trainable elements over two ranks: padded to 4, rank 0 owns elements 0 and 1, rank 1 element 2; G = 2.
  const nlohmann::json wide_steps = nlohmann::json::array({nlohmann::json::array({
      nlohmann::json::array({nlohmann::json::array({token({"1", "2", "-1"}, "-1")}), nlohmann::json::array({token({"2", "1", "1"}, "3")})}),
      nlohmann::json::array({nlohmann::json::array({token({"1", "1", "1"}, "1")}), nlohmann::json::array({token({"-1", "2", "1"}, "2")})}),
  })});
  const Scenario wide = two_rank_bf16_zero1_offload(3, 2, wide_steps);
  // A 2 x 2 weight: ZeRO's buffer is row-major, so rank 1 owns row 1 (w[1,0], w[1,1]), which Eigen's flat index
  // would not say. Rank 0's token is all zeros; rank 1's gradient is (0, 0 | -1, 0) times R = 2.
  const Scenario square = two_rank_bf16_zero1_offload(
      2, 1,
      nlohmann::json::array({nlohmann::json::array({nlohmann::json::array(
          {nlohmann::json::array({token(std::vector<std::string>{"0", "0"}, std::vector<std::string>{"0", "0"})}), nlohmann::json::array({token(std::vector<std::string>{"1", "0"}, std::vector<std::string>{"0", "1"})})})})}),
      2);
  for (const char* v : {"deepspeed@0.15.1", "deepspeed@0.16.4", "deepspeed@0.17.6", "deepspeed@0.18.9", "deepspeed@0.19.0",
                        "deepspeed@0.19.7"}) {
    EXPECT_EQ(applied_gradient(v, empty_rank), std::vector<double>{2}) << v;   // rank 0's own 2 x 1, not (2 + 0) / 2
    EXPECT_EQ(applied_gradient(v, wide), (std::vector<double>{0, 2, -10})) << v;  // 2 x (0, 1, -2) | 2 x (-4, -7, -5)
    EXPECT_EQ(applied_gradient(v, square), (std::vector<double>{0, -2, 0, 0})) << v;  // column-major: w10 = -2
  }
  EXPECT_EQ(applied_gradient("deepspeed@0.19.8", square), (std::vector<double>{0, -1, 0, 0}));
  EXPECT_EQ(applied_gradient("deepspeed@0.19.8", empty_rank), std::vector<double>{1});
  EXPECT_EQ(applied_gradient("deepspeed@0.19.8", wide), (std::vector<double>{-4, -6, -7}));
  // Only that path: fp32, and ZeRO-2 in bf16, reduce as they should on the same releases.
  Scenario full = wide, zero2 = wide;
  full.engine.precision = Precision::full;
  zero2.engine.zero_stage = 2;
  for (const char* v : {"deepspeed@0.15.1", "deepspeed@0.18.9"}) {
    EXPECT_EQ(applied_gradient(v, full), (std::vector<double>{-4, -6, -7})) << v;
    EXPECT_EQ(applied_gradient(v, zero2), (std::vector<double>{-4, -6, -7})) << v;
  }
}

// A generated scenario the DeepSpeed model runs: ZeRO-1 or 2, no fp16 loss scaling (DeepSpeedEngineModel::unsupported).
Scenario gen_deepspeed_scenario() {
  Scenario s = *properties::gen_scenario();
  s.engine.zero_stage = *rc::gen::inRange(1, 3);
  if (s.engine.precision == Precision::fp16) s.engine.precision = Precision::full;
  s.engine.loss_scaler.reset();
  return s;
}

// An engine made for one scenario and release and left anywhere in it, then reset for another, must run that other
// exactly as an engine made for it, crashes and refusals of the modelled release included.
template <class S>
void assert_reset_runs_as_new() {
  const std::vector<DeepSpeedVersion> versions = {{0, 15, 1}, {0, 16, 0}, {0, 16, 5}, {0, 17, 6}, {0, 18, 3}, {0, 19, 8}};
  const Scenario first = gen_deepspeed_scenario();
  const Scenario second = *rc::gen::arbitrary<bool>() ? first : gen_deepspeed_scenario();
  const DeepSpeedVersion version_first = *rc::gen::elementOf(versions), version_second = *rc::gen::elementOf(versions);
  const bool lines = *rc::gen::arbitrary<bool>();
  const std::size_t stop = gen_reset_point(first);
  RC_TAG(stop < drive_length(first) ? "reset mid-run" : "reset after a whole run", version_first == version_second ? "same release" : "another release");

  DeepSpeedZeroEngine<S> reused(version_first, first.training, first.engine, to_scalar<S>(first.initial_parameters), 3, !lines);
  drive(reused, first, stop);
  reused.reset(version_second, second.training, second.engine, to_scalar<S>(second.initial_parameters), 5, lines);
  DeepSpeedZeroEngine<S> fresh(version_second, second.training, second.engine, to_scalar<S>(second.initial_parameters), 5, lines);
  const Driven<S> a = drive(reused, second), b = drive(fresh, second);
  RC_CLASSIFY(!b.error.empty(), "the release crashes or refuses");
  assert_same_run(a, b);
}

RC_GTEST_PROP(DeepSpeedZero, a_reset_engine_runs_as_a_new_one_in_fast_rationals, ()) {
  assert_reset_runs_as_new<models::FastRational>();
}

RC_GTEST_PROP(DeepSpeedZero, a_reset_engine_runs_as_a_new_one_in_fp32, ()) { assert_reset_runs_as_new<float>(); }

// Generated scenarios rarely leave v0.17.6+'s all_grad_tensors set at a reset (ZeRO-2 without offload, mid-window):
// the next run must not add into it.
TEST(DeepSpeedZero, a_reset_engine_forgets_the_gradients_of_its_unfinished_window) {
  const Scenario s = scalar_scenario(kG2, zero(2, false, 2));
  for (const DeepSpeedVersion version : {DeepSpeedVersion{0, 17, 6}, DeepSpeedVersion{0, 18, 3}}) {
    DeepSpeedZeroEngine<Rational> reused(version, s.training, s.engine, s.initial_parameters, 1, false);
    drive(reused, s, 1);  // one backward of a window of two: its reduced gradient is held for the next
    reused.reset(version, s.training, s.engine, s.initial_parameters, 1, false);
    DeepSpeedZeroEngine<Rational> fresh(version, s.training, s.engine, s.initial_parameters, 1, false);
    const Driven<Rational> a = drive(reused, s), b = drive(fresh, s);
    ASSERT_EQ(a.applied.size(), b.applied.size()) << version.to_string();
    for (std::size_t i = 0; i < a.applied.size(); ++i) {
      ASSERT_EQ(a.applied[i].has_value(), b.applied[i].has_value()) << version.to_string();
      if (a.applied[i]) {
        EXPECT_EQ(a.applied[i]->gradient.tensors[0](0, 0), b.applied[i]->gradient.tensors[0](0, 0)) << version.to_string();
      }
    }
  }
}

TEST(DeepSpeedZero, unmodelled_stages_are_refused_with_a_reason) {
  const auto target = make_target("deepspeed@0.16.0");
  const Scenario s = scalar_scenario(kG3, zero(3, true, 3));
  EXPECT_NE(target->unsupported(s).find("zero_stage = 3"), std::string::npos);
  EXPECT_THROW(target->run(s, RunOptions{}), std::invalid_argument);
}

TEST(DeepSpeedZero, versions_parse_into_bands) {
  EXPECT_EQ(band_of(*DeepSpeedVersion::parse("0.15.1")), DeepSpeedBand::A);
  EXPECT_EQ(band_of(*DeepSpeedVersion::parse("0.15.2")), DeepSpeedBand::B1);
  EXPECT_EQ(band_of(*DeepSpeedVersion::parse("0.16.4")), DeepSpeedBand::B1);
  EXPECT_EQ(band_of(*DeepSpeedVersion::parse("0.16.5")), DeepSpeedBand::B2);
  EXPECT_EQ(band_of(*DeepSpeedVersion::parse("0.18.9")), DeepSpeedBand::B2);
  EXPECT_EQ(band_of(*DeepSpeedVersion::parse("0.19.0")), DeepSpeedBand::C);
  EXPECT_FALSE(DeepSpeedVersion::parse("0.16"));
  EXPECT_FALSE(DeepSpeedVersion::parse("0.16.0rc1"));
  EXPECT_THROW(make_target("deepspeed@latest"), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::sim
