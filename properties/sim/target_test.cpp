// sim/target.h: name parsing and composition, the built-in list, presets, and runs on a thread's kept engine.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "fuzz/generator.h"
#include "properties/comparison.h"
#include "properties/sim/scalar_catalogue.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

TEST(Target, every_builtin_name_parses_back_to_itself) {
  for (const auto& name : builtin_target_names()) {
    const auto target = make_target(name);
    EXPECT_EQ(target->name(), name);
    EXPECT_FALSE(target->description().empty());
  }
}

TEST(Target, unknown_parts_are_named_in_the_error) {
  auto message = [](const char* name) {
    try {
      make_target(name);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("deepspeed@0.16").find("'deepspeed@0.16'"), std::string::npos);
  EXPECT_NE(message("megatron+reference").find("'megatron'"), std::string::npos);
  EXPECT_NE(message("a+b+c+d").find("unknown target"), std::string::npos);
}

TEST(Target, llamafactory_preset_runs_zero2_with_offload_whatever_the_scenario_says) {
  const auto stack = make_target("llamafactory+transformers@4.46+deepspeed@0.16.0");
  const Scenario s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.accumulation_steps = 3, .zero_stage = 1});
  const RunResult r = stack->run(s, RunOptions{.scalar = ScalarKind::rational});
  // The drop (micro-batch 1 of 3 lost) and, the Trainer being 4.46, DeepSpeed's 1/G not undone: 101/3, over 3.
  EXPECT_EQ(r.steps[0].gradient.tensors[0](0, 0), models::Rational(101LL, 9LL));
  const RunResult fixed = make_target("llamafactory+transformers@4.49+deepspeed@0.19.0")->run(s, RunOptions{.scalar = ScalarKind::rational});
  EXPECT_EQ(fixed.steps[0].gradient.tensors[0](0, 0), models::Rational(37));
}

TEST(Target, scalar_kinds_agree_on_exact_inputs) {
  const Scenario s = properties::scalar_scenario({{1, 10, 100}}, EngineConfig{.accumulation_steps = 3, .zero_stage = 2, .offload = true});
  const auto target = make_target("deepspeed@0.16.0");
  for (ScalarKind k : {ScalarKind::rational, ScalarKind::fast_rational})
    EXPECT_EQ(target->run(s, RunOptions{.scalar = k}).steps[0].gradient.tensors[0](0, 0), models::Rational(101LL, 3LL))
        << to_string(k);
  const double fp = target->run(s, RunOptions{.scalar = ScalarKind::fp64}).steps[0].gradient.tensors[0](0, 0).to_double();
  EXPECT_NEAR(fp, 101.0 / 3.0, 1e-12);
  EXPECT_EQ(parse_scalar_kind("fixed32"), ScalarKind::fixed32);
  EXPECT_THROW(parse_scalar_kind("int8"), std::invalid_argument);
}

// A thread keeps its finished engine and resets it for its next run (sim/target.cpp): a run on an engine last used for
// other model sizes, kinds and configurations gives what a run on a thread that has kept nothing gives, for the
// reference and the DeepSpeed engines.
TEST(Target, a_run_on_a_kept_engine_equals_a_run_on_a_new_one) {
  fuzz::GeneratorOptions options;
  options.token_count_max = 3;
  for (const char* name : {"reference", "deepspeed@0.16.4"}) {
    const auto target = make_target(name);
    int compared = 0;
    for (std::uint64_t seed = 1; seed <= 150; ++seed) {
      const Scenario s = fuzz::generate_scenario(seed, options);
      if (!target->unsupported(s).empty()) continue;
      const RunResult kept = target->run(s, {});
      RunResult fresh;
      std::thread([&] { fresh = target->run(s, {}); }).join();
      ASSERT_TRUE(properties::compare_runs(s.training.model, fresh, kept).empty()) << name << ", seed " << seed;
      ASSERT_EQ(kept.trace_digest, fresh.trace_digest) << name << ", seed " << seed;
      ASSERT_EQ(kept.trace_event_count, fresh.trace_event_count) << name << ", seed " << seed;
      ASSERT_EQ(kept.steps.size(), fresh.steps.size()) << name << ", seed " << seed;
      for (std::size_t k = 0; k < kept.steps.size(); ++k) {
        SCOPED_TRACE(std::string(name) + ", seed " + std::to_string(seed) + ", step " + std::to_string(k));
        EXPECT_EQ(kept.steps[k].applied, fresh.steps[k].applied);
        EXPECT_EQ(kept.steps[k].gradient.present, fresh.steps[k].gradient.present);
        EXPECT_EQ(kept.steps[k].grad_norm, fresh.steps[k].grad_norm);
        EXPECT_EQ(kept.steps[k].clip_coefficient, fresh.steps[k].clip_coefficient);
      }
      ++compared;
    }
    EXPECT_GE(compared, 50) << name;
  }
}

}  // namespace
}  // namespace accumcheck::sim
