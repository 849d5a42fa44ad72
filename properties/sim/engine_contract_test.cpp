// The engine contract of sim/engine.h as a user's engine meets it: register_engine_model refuses an engine that
// places boundaries by counting backward() calls (engine_contract_violation), the scenario an engine gets carries
// its own model's missing-gradient policy, engine_state survives a checkpoint, an engine model may run in fewer
// scalars, and the framework layer's coefficients already hold the G R compensation on a short window.
#include <gtest/gtest.h>

#include <any>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "properties/sim/scalar_catalogue.h"
#include "sim/engine_contract.h"
#include "sim/examples/naive_ddp_engine.h"
#include "sim/loss_normaliser.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

using models::Rational;

// A user's engine around the correct naive-ddp one, changed in one way each (below).
enum class Change { none, count_backward_calls, ignore_override, keep_engine_state, trace_a_counter };

// What the engines of these tests saw, for the assertions.
struct Seen {
  std::vector<bool> missing_gradient_is_zero;  // per engine created
  std::vector<long> engine_state_loaded;       // per load_checkpoint, -1 when engine_state was empty
  std::vector<std::uint64_t> seeds;            // per engine created
};

template <class S>
class ChangedEngine final : public Engine<S> {
 public:
  ChangedEngine(const Scenario& s, const models::Parameters<S>& p, Change change, Seen* seen)
      : inner_(s.training, s.engine, p, false), change_(change), seen_(seen), g_(s.engine.accumulation_steps) {}
  void backward(const RankSequences<S>& data, const RankCoefficients<S>& coefficients) override {
    // The PyTorch loop's rule, `if (i + 1) % G == 0`, with i counting backward() calls.
    if (change_ == Change::count_backward_calls) inner_.set_gradient_accumulation_boundary(++backwards_ % g_ == 0);
    inner_.backward(data, coefficients);
  }
  void set_gradient_accumulation_boundary(bool b) override {
    if (change_ != Change::ignore_override) inner_.set_gradient_accumulation_boundary(b);
  }
  void step() override {
    // A trace that is not a function of scenario, parameters and seed: a process-wide counter.
    if (change_ == Change::trace_a_counter) {
      static long calls = 0;
      own_trace_.record(EventKind::step, ++calls);
    }
    if (change_ == Change::count_backward_calls && backwards_ == 0) inner_.set_gradient_accumulation_boundary(false);
    inner_.step();
    ++steps_;
  }
  void zero_grad() override { inner_.zero_grad(); }
  EngineCheckpoint<S> save_checkpoint() override {
    EngineCheckpoint<S> c = inner_.save_checkpoint();
    if (change_ == Change::keep_engine_state) c.engine_state = 1000 + steps_;
    return c;
  }
  void load_checkpoint(const EngineCheckpoint<S>& c) override {
    inner_.load_checkpoint(c);
    if (seen_) seen_->engine_state_loaded.push_back(c.engine_state.has_value() ? std::any_cast<long>(c.engine_state) : -1);
  }
  std::optional<AppliedStep<S>> take_applied_step() override { return inner_.take_applied_step(); }
  models::Parameters<S> parameters() const override { return inner_.parameters(); }
  models::OptimizerState<S> optimizer_state() const override { return inner_.optimizer_state(); }
  const Trace& trace() const override { return change_ == Change::trace_a_counter ? own_trace_ : inner_.trace(); }

 private:
  examples::NaiveDdpEngine<S> inner_;
  Trace own_trace_{false};
  Change change_;
  Seen* seen_;
  int g_;
  long backwards_ = 0, steps_ = 0;
};

class ChangedModel : public EngineModelOf<ChangedModel> {
 public:
  ChangedModel(std::string name, Change change, Seen* seen = nullptr, bool zeros = false)
      : name_(std::move(name)), change_(change), seen_(seen), zeros_(zeros) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test engine around naive-ddp"; }
  std::string unsupported(const EngineConfig& c) const override {
    return c.zero_stage == 0 && !c.offload && c.precision == Precision::full ? "" : "zero_stage 0 only";
  }
  bool optimizer_steps_missing_gradients_as_zero() const override { return zeros_; }
  template <class S>
  std::unique_ptr<Engine<S>> create(const Scenario& s, const models::Parameters<S>& p, std::uint64_t seed, bool) const {
    if (seen_) seen_->missing_gradient_is_zero.push_back(s.training.optimizer.missing_gradient_is_zero);
    if (seen_) seen_->seeds.push_back(seed);
    return std::make_unique<ChangedEngine<S>>(s, p, change_, seen_);
  }

 private:
  std::string name_;
  Change change_;
  Seen* seen_;
  bool zeros_;
};

TEST(EngineContract, the_correct_engines_keep_the_boundary_rule) {
  EXPECT_EQ(engine_contract_violation(examples::NaiveDdpEngineModel()), "");
  EXPECT_EQ(engine_contract_violation(ChangedModel("plain", Change::none)), "");
  for (const char* builtin : {"reference", "deepspeed@0.15.1", "deepspeed@0.16.0", "deepspeed@0.18.9", "deepspeed@0.19.0"})
    EXPECT_EQ(engine_contract_violation(*find_engine_model(builtin)), "") << builtin;
}

TEST(EngineContract, an_engine_that_counts_backward_calls_is_refused_at_registration) {
  const ChangedModel counting("counts-backwards", Change::count_backward_calls);
  const std::string why = engine_contract_violation(counting);
  EXPECT_NE(why.find("automatic boundary"), std::string::npos) << why;
  EXPECT_NE(why.find("step() call 2"), std::string::npos) << why;
  EXPECT_NE(why.find("counting step() calls"), std::string::npos) << why;
  try {
    register_engine_model(std::make_shared<ChangedModel>("counts-backwards", Change::count_backward_calls));
    FAIL() << "registered";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'counts-backwards' breaks the engine contract"), std::string::npos) << e.what();
  }
  EXPECT_EQ(find_engine_model("counts-backwards"), nullptr);
}

TEST(EngineContract, an_engine_whose_trace_is_not_deterministic_is_refused) {
  const std::string why = engine_contract_violation(ChangedModel("counter-trace", Change::trace_a_counter));
  EXPECT_NE(why.find("recorded different traces"), std::string::npos) << why;
}

TEST(EngineContract, an_engine_that_ignores_the_callers_override_is_refused) {
  const std::string why = engine_contract_violation(ChangedModel("ignores-override", Change::ignore_override));
  EXPECT_NE(why.find("manual boundary"), std::string::npos) << why;
  EXPECT_NE(why.find("sticky"), std::string::npos) << why;
}

// The scenario a test engine is created with says what its model declares, whatever the scenario file said.
TEST(EngineContract, the_missing_gradient_policy_an_engine_sees_is_its_models) {
  Scenario s = properties::scalar_scenario({{1, 2}}, EngineConfig{.accumulation_steps = 2});
  for (const bool declared : {false, true})
    for (const bool in_file : {false, true}) {
      Seen seen;
      s.training.optimizer.missing_gradient_is_zero = in_file;
      const ComposedTarget target(std::nullopt, find_normaliser("reference"),
                                  std::make_shared<ChangedModel>("policy", Change::none, &seen, declared));
      target.run(s, RunOptions{.scalar = ScalarKind::rational});
      ASSERT_EQ(seen.missing_gradient_is_zero.size(), 1u);
      EXPECT_EQ(seen.missing_gradient_is_zero[0], declared) << "declared " << declared << ", file " << in_file;
    }
}

TEST(EngineContract, engine_state_reaches_the_engine_that_resumes_from_the_checkpoint) {
  Scenario s = properties::scalar_scenario({{1, 2}, {3, 4}, {5, 6}}, EngineConfig{.accumulation_steps = 2});
  s.checkpoint_after_step = 0;
  for (const Change change : {Change::keep_engine_state, Change::none}) {
    Seen seen;
    const ComposedTarget target(std::nullopt, find_normaliser("reference"), std::make_shared<ChangedModel>("state", change, &seen));
    target.run(s, RunOptions{.scalar = ScalarKind::rational});
    ASSERT_EQ(seen.engine_state_loaded.size(), 1u);
    // Two step() calls (one window of G = 2) before the checkpoint.
    EXPECT_EQ(seen.engine_state_loaded[0], change == Change::keep_engine_state ? 1002 : -1);
  }
}

// create()'s seed (docs/targets.md 10.1): a function of the scenario's schedule_seed, another one for the engine
// created after a checkpoint, the same for the same scenario.
TEST(EngineContract, the_seed_follows_the_schedule_seed_and_differs_after_a_checkpoint) {
  Scenario s = properties::scalar_scenario({{1, 2}, {3, 4}}, EngineConfig{.accumulation_steps = 2});
  s.checkpoint_after_step = 0;
  auto seeds_of = [](const Scenario& scenario) {
    Seen seen;
    const ComposedTarget target(std::nullopt, find_normaliser("reference"), std::make_shared<ChangedModel>("seeds", Change::none, &seen));
    target.run(scenario, RunOptions{.scalar = ScalarKind::rational});
    return seen.seeds;
  };
  const auto first = seeds_of(s);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_NE(first[0], first[1]);
  EXPECT_EQ(seeds_of(s), first);
  s.schedule_seed += 1;
  const auto other = seeds_of(s);
  EXPECT_NE(other[0], first[0]);
  EXPECT_NE(other[1], first[1]);
}

// An engine model that lists its scalars is only instantiated for them (create<S> would not compile for others).
class RationalOnlyModel final : public EngineModelOf<RationalOnlyModel> {
 public:
  using scalars = Scalars<Rational>;
  std::string name() const override { return "rational-only"; }
  std::string description() const override { return "naive-ddp in Rational only"; }
  std::string unsupported(const EngineConfig&) const override { return ""; }
  template <class S>
  std::unique_ptr<Engine<S>> create(const Scenario& s, const models::Parameters<S>& p, std::uint64_t, bool) const {
    static_assert(std::is_same_v<S, Rational>, "instantiated for a scalar the model does not list");
    return std::make_unique<examples::NaiveDdpEngine<S>>(s.training, s.engine, p, false);
  }
};

TEST(EngineContract, an_engine_model_may_run_in_fewer_scalars_and_the_others_are_refused_by_name) {
  const RationalOnlyModel model;
  EXPECT_EQ(model.scalar_names(), "rational");
  EXPECT_EQ(examples::NaiveDdpEngineModel().scalar_names(), "rational, fast-rational, fixed32, fp64, fp32");
  EXPECT_EQ(engine_contract_violation(model), "");
  const ComposedTarget target(std::nullopt, find_normaliser("reference"), std::make_shared<RationalOnlyModel>());
  const Scenario s = properties::scalar_scenario({{1, 2}}, EngineConfig{.accumulation_steps = 2});
  EXPECT_EQ(target.run(s, RunOptions{.scalar = ScalarKind::rational}).steps[0].gradient.tensors[0](0, 0), Rational(3LL, 2LL));
  try {
    target.run(s, RunOptions{.scalar = ScalarKind::fast_rational});
    FAIL() << "ran in fast-rational";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not run in fast-rational; it runs in rational"), std::string::npos) << e.what();
  }
  EXPECT_THROW(target.run_bounded(s, ScalarKind::fp32), NoRoundingBound);
}

// docs/targets.md section 10: the layer hands rank r's sequence i the coefficient G R c_i, G as configured even on a
// window of fewer micro-batches, so the engine's 1/G and rank average give the window's objective.
TEST(EngineContract, the_layers_coefficients_carry_g_and_r_on_a_short_window) {
  EngineConfig config{.rank_count = 2, .accumulation_steps = 4, .boundary = BoundaryMode::manual};
  StepPlan window;
  for (int k = 0; k < 2; ++k)
    window.micro_batches.push_back(MicroBatch{{{properties::scalar_tokens({Rational(1)})}, {properties::scalar_tokens({Rational(1)})}}});
  const WindowCoefficients c = find_normaliser("reference")->coefficients(
      window, config, models::AggregationSpec{.mode = models::LossAggregation::token_mean});
  // Four tokens in the window: c_i = 1/4, times G R = 8.
  for (const auto& micro_batch : c)
    for (const auto& rank : micro_batch) EXPECT_EQ(rank, std::vector<Rational>{Rational(2)});
  Scenario s = properties::scalar_scenario({{1, 2}}, config);
  s.steps[0] = window;
  EXPECT_TRUE(make_target("reference")->run(s, RunOptions{.scalar = ScalarKind::rational}).steps[0].applied);
}

}  // namespace
}  // namespace accumcheck::sim
