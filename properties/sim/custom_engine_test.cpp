// register_engine_model (sim/target.h) with the example user engine of sim/examples/naive_ddp_engine.h: a
// registered engine is found by name, composes with framework layers and presets like a built-in one, equals the
// full-batch oracle exactly when it is correct, and is caught when it is not (a loop that forgets zero_grad()).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "models/oracle.h"
#include "properties/generators/scenario_generators.h"
#include "properties/sim/scalar_catalogue.h"
#include "sim/examples/naive_ddp_engine.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

using models::Rational;
using properties::scalar_scenario;
using properties::scalar_tokens;

// The registry is process-wide and gtest may run every test in one process: register once.
void register_example_engines() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_engine_model(std::make_shared<examples::NaiveDdpEngineModel>());
    register_engine_model(std::make_shared<examples::NaiveDdpEngineModel>(
        "naive-ddp-leaky", examples::NaiveDdpFaults{.skip_zero_grad_after_step = true}));
  });
}

models::OracleResult<Rational> oracle_of(const Scenario& s) {
  const auto batches = oracle_batches(s);
  return models::run_oracle(s.training, s.initial_parameters, std::span<const models::StepBatch<Rational>>(batches));
}

// Empty when the run equals the oracle on every step and in its final state, else the first difference.
std::string difference_from_oracle(const Scenario& s, const RunResult& run) {
  const auto oracle = oracle_of(s);
  if (run.steps.size() != oracle.steps.size()) return "step count differs";
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    const std::string where = "step " + std::to_string(i) + ": ";
    if (!run.steps[i].applied) return where + "no step applied";
    if (!(run.steps[i].gradient == oracle.steps[i].applied_gradient)) return where + "applied gradient differs";
    if (run.steps[i].grad_norm != oracle.steps[i].grad_norm)
      return where + "grad norm " + run.steps[i].grad_norm.to_string() + ", oracle " + oracle.steps[i].grad_norm.to_string();
    if (run.steps[i].clip_coefficient != oracle.steps[i].clip_coefficient) return where + "clip coefficient differs";
  }
  if (!(run.parameters == oracle.parameters)) return "final parameters differ";
  if (!(run.optimizer_state == oracle.state)) return "final optimizer state differs";
  return {};
}

RunResult run_exact(const std::string& target, const Scenario& s) {
  return make_target(target)->run(s, RunOptions{.scalar = ScalarKind::rational});
}

const std::vector<std::vector<long long>> kG3 = {{1, 10, 100}, {1000, 10000, 100000}};

TEST(CustomEngine, registered_engine_is_found_by_name_and_composes_like_a_builtin_one) {
  register_example_engines();
  ASSERT_NE(find_engine_model("naive-ddp"), nullptr);
  EXPECT_EQ(find_engine_model("naive-ddp")->name(), "naive-ddp");
  EXPECT_EQ(find_engine_model("naive-ddp-unregistered"), nullptr);
  for (const char* name : {"naive-ddp", "openrlhf@0.10.2+naive-ddp", "transformers@4.46+naive-ddp",
                           "trl+transformers@4.46+naive-ddp"})
    EXPECT_EQ(make_target(name)->name(), name);
}

TEST(CustomEngine, naive_ddp_equals_the_oracle_on_the_catalogue_scalar_trace) {
  register_example_engines();
  const Scenario s = scalar_scenario(kG3, EngineConfig{.accumulation_steps = 3});
  const RunResult run = run_exact("naive-ddp", s);
  EXPECT_EQ(difference_from_oracle(s, run), "");
  EXPECT_EQ(run.steps[0].gradient.tensors[0](0, 0), Rational(37));     // 111 / 3: every micro-batch counted
  EXPECT_EQ(run.steps[1].gradient.tensors[0](0, 0), Rational(37000));  // nothing from step 1
}

TEST(CustomEngine, naive_ddp_equals_the_oracle_with_ranks_uneven_manual_windows_adam_clipping_and_resume) {
  register_example_engines();
  // Two ranks, manual boundary over windows of 3 and 1 micro-batches, step() only at the end of a window.
  Scenario s = scalar_scenario({{1, 10, 100}, {7}},
                               EngineConfig{.rank_count = 2, .accumulation_steps = 2, .boundary = BoundaryMode::manual,
                                            .step_after_every_backward = false});
  for (auto& step : s.steps)
    for (auto& mb : step.micro_batches) mb.rank_sequences.push_back({scalar_tokens({Rational(3), Rational(-5)})});
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  s.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::adamw, .lr = Rational(1LL, 10LL),
                                               .weight_decay = Rational(1LL, 100LL)};
  s.training.max_grad_norm = Rational(1);
  s.checkpoint_after_step = 0;
  EXPECT_EQ(difference_from_oracle(s, run_exact("naive-ddp", s)), "");
}

RC_GTEST_PROP(CustomEngine, naive_ddp_equals_the_full_batch_oracle_on_every_ddp_configuration, ()) {
  register_example_engines();
  Scenario s = *properties::gen_scenario();
  // Plain DDP in the run's scalar: replicated, no offload, no 16-bit storage (naive-ddp refuses the rest).
  s.engine.zero_stage = 0;
  s.engine.offload = false;
  s.engine.precision = Precision::full;
  s.engine.loss_scaler.reset();
  RC_TAG(s.engine.rank_count > 1, to_string(s.engine.boundary), s.engine.step_after_every_backward);
  const std::string difference = difference_from_oracle(s, run_exact("naive-ddp", s));
  RC_ASSERT(difference == "");
}

// A layer composed over a user engine changes the objective exactly as it does over the reference engine.
TEST(CustomEngine, framework_layers_over_naive_ddp_give_the_catalogue_values) {
  register_example_engines();
  Scenario s = scalar_scenario({}, EngineConfig{.accumulation_steps = 2});
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  s.steps = {StepPlan{{MicroBatch{{{scalar_tokens({Rational(-2)})}}},
                       MicroBatch{{{scalar_tokens({Rational(-4), Rational(-4), Rational(-4)})}}}}}};
  EXPECT_EQ(run_exact("openrlhf@0.10.2+naive-ddp", s).steps[0].gradient.tensors[0](0, 0), Rational(3));  // (a+b)/2
  EXPECT_EQ(run_exact("openrlhf@0.10.4+naive-ddp", s).steps[0].gradient.tensors[0](0, 0), Rational(7LL, 2LL));
  for (const char* layer : {"openrlhf@0.10.2", "openrlhf@0.10.4", "transformers@4.45", "transformers@4.46"})
    EXPECT_EQ(run_exact(std::string(layer) + "+naive-ddp", s).steps[0].gradient,
              run_exact(std::string(layer) + "+reference", s).steps[0].gradient)
        << layer;
}

TEST(CustomEngine, naive_ddp_refuses_zero_stages_offload_and_16_bit_storage_with_a_reason) {
  register_example_engines();
  const Scenario s = scalar_scenario(kG3, EngineConfig{.accumulation_steps = 3, .zero_stage = 2});
  EXPECT_NE(make_target("naive-ddp")->unsupported(s).find("zero_stage = 2"), std::string::npos);
  EXPECT_THROW(run_exact("naive-ddp", s), std::invalid_argument);
  // The LLaMA-Factory preset turns on ZeRO-2 with offload whatever the scenario says.
  const Scenario plain = scalar_scenario(kG3, EngineConfig{.accumulation_steps = 3});
  EXPECT_NE(make_target("llamafactory+transformers@4.46+naive-ddp")->unsupported(plain).find("offload"), std::string::npos);
  Scenario bf16 = plain;
  bf16.engine.precision = Precision::bf16;
  EXPECT_NE(make_target("naive-ddp")->unsupported(bf16).find("16-bit"), std::string::npos);
}

// The plug-in path catches a bug: without zero_grad() after step, step 1's gradient leaks into step 2.
TEST(CustomEngine, leaky_user_engine_differs_from_the_oracle) {
  register_example_engines();
  const Scenario s = scalar_scenario(kG3, EngineConfig{.accumulation_steps = 3});
  const RunResult run = run_exact("naive-ddp-leaky", s);
  EXPECT_EQ(run.steps[0].gradient.tensors[0](0, 0), Rational(37));           // the first window is still right
  EXPECT_EQ(run.steps[1].gradient.tensors[0](0, 0), Rational(37000 + 37));  // step 1 leaks into step 2
  EXPECT_EQ(difference_from_oracle(s, run), "step 1: applied gradient differs");
}

TEST(CustomEngine, registering_a_clashing_name_throws_naming_the_clash) {
  register_example_engines();
  auto message = [](std::shared_ptr<const EngineModel> model) {
    try {
      register_engine_model(std::move(model));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  using examples::NaiveDdpEngineModel;
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("naive-ddp")).find("'naive-ddp' clashes with an engine model registered earlier"),
            std::string::npos);
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("reference")).find("'reference' clashes with a built-in"),
            std::string::npos);
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("canary-offload-nosync")).find("clashes with a built-in"),
            std::string::npos);
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("deepspeed@0.16.0")).find("clashes with a built-in"),
            std::string::npos);
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("deepspeed@mine")).find("clashes with a built-in"),
            std::string::npos);
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("mine+ddp")).find("'+'"), std::string::npos);
  EXPECT_NE(message(std::make_shared<NaiveDdpEngineModel>("")).find("non-empty"), std::string::npos);
  EXPECT_NE(message(nullptr).find("null"), std::string::npos);
  // A failed registration leaves the earlier one in place.
  EXPECT_EQ(find_engine_model("naive-ddp")->description(), NaiveDdpEngineModel().description());
}

}  // namespace
}  // namespace accumcheck::sim
