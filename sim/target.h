// Target: runs a scenario the way some stack does and returns a result in exact values.
//
// A built-in target is a composition, named by its parts joined with '+':
//   [preset+]framework+engine        e.g. "openrlhf@0.10.2+deepspeed@0.18.9",
//                                          "llamafactory+transformers@4.46+deepspeed@0.16.0"
// where the framework is a LossNormaliser (how each micro-batch's loss is normalised), the engine an
// EngineModel (how gradients are accumulated, reduced and applied), and a preset fixes the parts of the
// engine configuration a stack ships (LLaMA-Factory's ZeRO-2 CPU-offload config). A bare engine name
// ("deepspeed@0.16.0", "reference") uses the reference framework layer.
//
// Users plug in their own engine by implementing EngineModel (or Target directly); see docs/targets.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "models/fast_rational.h"
#include "models/fixed_point.h"
#include "sim/engine.h"
#include "sim/loss_normaliser.h"
#include "sim/result_bounds.h"
#include "sim/scenario.h"

namespace accumcheck::sim {

// The scalar a target computes in. Results always come back as exact rationals of what was computed.
enum class ScalarKind { rational, fast_rational, fixed32, fp64, fp32 };
std::string_view to_string(ScalarKind kind);
ScalarKind parse_scalar_kind(std::string_view text);  // throws std::invalid_argument

struct RunOptions {
  ScalarKind scalar = ScalarKind::fast_rational;
  bool keep_trace_lines = false;
  // Keep the parameters after every optimizer step (RunResult::parameters_after_step), for curves over a long
  // run (the gallery's losses); simulated targets only, external ones leave it empty.
  bool keep_step_parameters = false;
  // The caller reads only the steps' applied gradients and clip coefficients (property 1): a simulated target
  // may then skip the optimizer's update in the last window, whose parameters nobody reads, and leaves the
  // result's `parameters` and `optimizer_state` empty; where its engine left that window's norm untaken (no
  // clipping needed it), the result reports no norm (`reported.grad_norm` false). A run shared between
  // properties never has it (fuzz::SharedRunsTarget clears it).
  bool applied_gradients_only = false;

  friend bool operator==(const RunOptions&, const RunOptions&) = default;
};

struct StepOutcome {
  bool applied = false;                    // the engine applied an optimizer step in this window
  models::Gradient<Rational> gradient;     // what the optimizer consumed (zeros when not applied)
  Rational grad_norm;                      // the norm the engine reported
  Rational clip_coefficient = Rational(1);
};

// Which parts of a result the target actually reports. Simulated targets report everything; an external
// adapter may not see its optimizer's state or the applied gradient (docs/adapter-protocol.md, `reports`), and
// a property that needs an unreported part says it could not run instead of comparing zeros.
struct ResultCoverage {
  bool applied_gradient = true, grad_norm = true, clip_coefficient = true, optimizer_state = true;
  friend bool operator==(const ResultCoverage&, const ResultCoverage&) = default;
};

struct RunResult {
  std::vector<StepOutcome> steps;  // one per window of the scenario
  ResultCoverage reported;
  models::Parameters<Rational> parameters;
  models::OptimizerState<Rational> optimizer_state;
  std::uint64_t trace_digest = 0;
  std::uint64_t trace_event_count = 0;
  std::vector<std::string> trace_lines;  // when RunOptions::keep_trace_lines
  std::vector<models::Parameters<Rational>> parameters_after_step;  // [step], when RunOptions::keep_step_parameters
};

// A target that misbehaved instead of answering: an external adapter that crashed, hung, broke the protocol or
// raised while training. Neither a pass nor a property failure: campaigns record it as a target fault, with
// the message (and the adapter's stderr tail), and go on.
class TargetFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A target fault in which the target's own training code raised, every attempt (an adapter's "failed" reply):
// still a fault for the accumulation properties; the differential property counts it as agreement with a
// behavioural model that raises too.
class TargetRaised : public TargetFault {
 public:
  using TargetFault::TargetFault;
};

// A target that declined the scenario while running it although unsupported() allowed it (an adapter's
// "unsupported" error reply): the property could not run on it.
class TargetUnsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run in models::FloatBound<F>: the exact values of what the target computes (bit for bit its fast-rational
// run) with, beside each, the bound on any float evaluation of that same computation in F.
struct BoundedRunResult {
  RunResult result;
  ResultBounds bounds;
};

using Bound32 = models::FloatBound<models::FloatFormatKind::fp32>;
using Bound64 = models::FloatBound<models::FloatFormatKind::fp64>;
// A run with bf16 storage (precision bf16): every operation charged in bf16's unit roundoff, as the oracle's
// bound of such a run is (properties/rounding_bounds.cpp); sim/precision.h says why the casts to storage are
// covered.
using BoundBf16 = models::FloatBound<models::FloatFormatKind::bf16>;

// Makes engines of one kind for each supported scalar. Implement create<S> once in a class derived from
// EngineModelOf<Derived> (below) instead of these seven factories. A factory returns nullptr for a scalar the
// engine does not run in: Target::run then refuses that scalar with std::invalid_argument (a property says it
// could not run), and run_bounded throws NoRoundingBound.
class EngineModel {
 public:
  virtual ~EngineModel() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // Empty when this engine can run the configuration, else why not (e.g. a ZeRO stage it does not model).
  virtual std::string unsupported(const EngineConfig& config) const = 0;
  // True when the engine's optimizer steps a trainable parameter that got no gradient as if the gradient were
  // zeros (flat-partition optimizers such as DeepSpeed ZeRO's), instead of skipping it as PyTorch does. The
  // oracle a property compares against follows the same rule (models::OptimizerSpec::missing_gradient_is_zero).
  virtual bool optimizer_steps_missing_gradients_as_zero() const { return false; }
  // True when two runs of the same scenario give the same result: the engine computes from the scenario, the
  // parameters and its seed alone, as every simulated engine does. A campaign then runs a scenario once per trial
  // and hands the result to every property that asks for it (fuzz/trial_runs.h). An engine whose runs may differ
  // (hardware, threads, timing) says false, and each property runs it afresh: each run is another sample.
  virtual bool deterministic() const { return true; }
  // The scalar this engine computes in whatever a campaign asks for (Target::fixed_scalar), or none when it runs in
  // the scalar it is given (every built-in engine). A float pipeline on hardware says fp32.
  virtual std::optional<ScalarKind> fixed_scalar() const { return std::nullopt; }
  // Where a registered engine comes from, as `accumcheck list targets` tags it: "user engine" for a user binary's
  // own, "cuda" for the CUDA offload pipeline's (cuda/offload_engine.h). Built-in engines are not tagged.
  virtual std::string origin() const { return "user engine"; }
  // The scalars make_* returns an engine for, by ScalarKind name ("rational, fast-rational, fp32"), for messages only.
  virtual std::string scalar_names() const { return "rational, fast-rational, fixed32, fp64, fp32"; }
  virtual std::unique_ptr<Engine<Rational>> make_rational(const Scenario& s, const models::Parameters<Rational>& p, std::uint64_t seed, bool lines) const = 0;
  virtual std::unique_ptr<Engine<models::FastRational>> make_fast_rational(const Scenario& s, const models::Parameters<models::FastRational>& p, std::uint64_t seed, bool lines) const = 0;
  virtual std::unique_ptr<Engine<models::Fixed32>> make_fixed32(const Scenario& s, const models::Parameters<models::Fixed32>& p, std::uint64_t seed, bool lines) const = 0;
  virtual std::unique_ptr<Engine<double>> make_fp64(const Scenario& s, const models::Parameters<double>& p, std::uint64_t seed, bool lines) const = 0;
  virtual std::unique_ptr<Engine<float>> make_fp32(const Scenario& s, const models::Parameters<float>& p, std::uint64_t seed, bool lines) const = 0;
  // The same engine in FloatBound, for differential checks of a float implementation against this model
  // (Target::run_bounded). Optional: nullptr means the model does not run in FloatBound.
  virtual std::unique_ptr<Engine<Bound32>> make_fp32_bound(const Scenario&, const models::Parameters<Bound32>&, std::uint64_t, bool) const { return nullptr; }
  virtual std::unique_ptr<Engine<Bound64>> make_fp64_bound(const Scenario&, const models::Parameters<Bound64>&, std::uint64_t, bool) const { return nullptr; }
  virtual std::unique_ptr<Engine<BoundBf16>> make_bf16_bound(const Scenario&, const models::Parameters<BoundBf16>&, std::uint64_t, bool) const { return nullptr; }

  template <class S>
  std::unique_ptr<Engine<S>> make(const Scenario& s, const models::Parameters<S>& p, std::uint64_t seed, bool lines) const;
};

// The scalars an engine runs in, for EngineModelOf: `using scalars = Scalars<Rational, models::FastRational, float>;`
template <class... S>
struct Scalars {
  template <class T>
  static constexpr bool has = (std::is_same_v<T, S> || ...);
};

// CRTP helper: Derived provides `template <class S> std::unique_ptr<Engine<S>> create(const Scenario&,
// const models::Parameters<S>&, std::uint64_t seed, bool keep_trace_lines) const`, instantiated for every
// scalar unless Derived lists the ones it supports as `using scalars = Scalars<...>;` (then create<S> is only
// instantiated for those, and the others' factories return nullptr). Campaigns run in fast-rational by default
// (`--scalar`), in fp32 for 16-bit storage and float adapters; rational is what the tests' exact runs use, and
// Bound32/Bound64 (models::FloatBound) only the differential property's check of a float implementation
// against this model. docs/targets.md section 10 lists what create<S> may do with S.
template <class Derived>
class EngineModelOf : public EngineModel {
 public:
  std::unique_ptr<Engine<Rational>> make_rational(const Scenario& s, const models::Parameters<Rational>& p, std::uint64_t seed, bool lines) const override { return made<Rational>(s, p, seed, lines); }
  std::unique_ptr<Engine<models::FastRational>> make_fast_rational(const Scenario& s, const models::Parameters<models::FastRational>& p, std::uint64_t seed, bool lines) const override { return made<models::FastRational>(s, p, seed, lines); }
  std::unique_ptr<Engine<models::Fixed32>> make_fixed32(const Scenario& s, const models::Parameters<models::Fixed32>& p, std::uint64_t seed, bool lines) const override { return made<models::Fixed32>(s, p, seed, lines); }
  std::unique_ptr<Engine<double>> make_fp64(const Scenario& s, const models::Parameters<double>& p, std::uint64_t seed, bool lines) const override { return made<double>(s, p, seed, lines); }
  std::unique_ptr<Engine<float>> make_fp32(const Scenario& s, const models::Parameters<float>& p, std::uint64_t seed, bool lines) const override { return made<float>(s, p, seed, lines); }
  std::unique_ptr<Engine<Bound32>> make_fp32_bound(const Scenario& s, const models::Parameters<Bound32>& p, std::uint64_t seed, bool lines) const override { return made<Bound32>(s, p, seed, lines); }
  std::unique_ptr<Engine<Bound64>> make_fp64_bound(const Scenario& s, const models::Parameters<Bound64>& p, std::uint64_t seed, bool lines) const override { return made<Bound64>(s, p, seed, lines); }
  std::unique_ptr<Engine<BoundBf16>> make_bf16_bound(const Scenario& s, const models::Parameters<BoundBf16>& p, std::uint64_t seed, bool lines) const override { return made<BoundBf16>(s, p, seed, lines); }
  std::string scalar_names() const override {
    std::string out;
    auto add = [&](bool runs, ScalarKind kind) {
      if (runs) out += (out.empty() ? "" : ", ") + std::string(to_string(kind));
    };
    add(runs_in<Rational>(), ScalarKind::rational);
    add(runs_in<models::FastRational>(), ScalarKind::fast_rational);
    add(runs_in<models::Fixed32>(), ScalarKind::fixed32);
    add(runs_in<double>(), ScalarKind::fp64);
    add(runs_in<float>(), ScalarKind::fp32);
    return out.empty() ? "no scalar" : out;
  }

 private:
  template <class S>
  static constexpr bool runs_in() {
    if constexpr (requires { typename Derived::scalars; }) return Derived::scalars::template has<S>;
    else return true;
  }
  template <class S>
  std::unique_ptr<Engine<S>> made(const Scenario& s, const models::Parameters<S>& p, std::uint64_t seed, bool lines) const {
    if constexpr (runs_in<S>()) return self().template create<S>(s, p, seed, lines);
    else return nullptr;
  }
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

template <class S>
std::unique_ptr<Engine<S>> EngineModel::make(const Scenario& s, const models::Parameters<S>& p, std::uint64_t seed,
                                             bool lines) const {
  if constexpr (std::is_same_v<S, Rational>) return make_rational(s, p, seed, lines);
  else if constexpr (std::is_same_v<S, models::FastRational>) return make_fast_rational(s, p, seed, lines);
  else if constexpr (std::is_same_v<S, models::Fixed32>) return make_fixed32(s, p, seed, lines);
  else if constexpr (std::is_same_v<S, double>) return make_fp64(s, p, seed, lines);
  else if constexpr (std::is_same_v<S, Bound32>) return make_fp32_bound(s, p, seed, lines);
  else if constexpr (std::is_same_v<S, Bound64>) return make_fp64_bound(s, p, seed, lines);
  else if constexpr (std::is_same_v<S, BoundBf16>) return make_bf16_bound(s, p, seed, lines);
  else return make_fp32(s, p, seed, lines);
}

// Fixes parts of the engine configuration the way a stack ships them.
struct Preset {
  std::string name;
  std::string description;
  std::optional<int> zero_stage;
  std::optional<bool> offload;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // Empty when the target can run the scenario's configuration, else why not.
  virtual std::string unsupported(const Scenario& scenario) const = 0;
  // See EngineModel::optimizer_steps_missing_gradients_as_zero.
  virtual bool optimizer_steps_missing_gradients_as_zero() const { return false; }
  // The scenario as this target runs it (a preset fixes parts of the engine configuration).
  virtual Scenario as_run(const Scenario& scenario) const { return scenario; }
  // The scalar this target computes in whatever a campaign asks for (an external adapter's dtype), or none
  // when it runs in the scalar it is given (every simulated target).
  virtual std::optional<ScalarKind> fixed_scalar() const { return std::nullopt; }
  // Validates the scenario (std::invalid_argument on bad input or an unsupported configuration), then runs it.
  virtual RunResult run(const Scenario& scenario, const RunOptions& options) const = 0;
  // run(), as a result that may be shared with other callers (fuzz::SharedRunsTarget hands every property of a
  // trial the one stored result instead of a copy each).
  virtual std::shared_ptr<const RunResult> run_shared(const Scenario& scenario, const RunOptions& options) const {
    return std::make_shared<const RunResult>(run(scenario, options));
  }
  // The run in models::FloatBound of `format` (fp32 or fp64): what this target computes, exactly, with the bound
  // on any float evaluation of the same computation. Throws NoRoundingBound when a value has none; std::nullopt
  // when the target cannot run in FloatBound (external targets, engine models without make_*_bound).
  virtual std::optional<BoundedRunResult> run_bounded(const Scenario& scenario, ScalarKind format) const;
  // The simulated target that models this one, such as "deepspeed@0.16.4" for the real DeepSpeed 0.16.4
  // (an adapter's "model"), or none. The differential property compares the two.
  virtual std::optional<std::string> behavioural_model() const { return std::nullopt; }
  // True when run() is a pure function of its arguments (see EngineModel::deterministic): a campaign may then
  // share one run among the properties of a trial. False for anything whose repeated runs are samples, such as
  // an external program.
  virtual bool deterministic() const { return false; }
};

// preset (optional) + framework layer + engine model.
class ComposedTarget final : public Target {
 public:
  ComposedTarget(std::optional<Preset> preset, std::shared_ptr<const LossNormaliser> normaliser,
                 std::shared_ptr<const EngineModel> engine);
  std::string name() const override;
  std::string description() const override;
  std::string unsupported(const Scenario& scenario) const override;
  bool optimizer_steps_missing_gradients_as_zero() const override { return engine_->optimizer_steps_missing_gradients_as_zero(); }
  bool deterministic() const override { return engine_->deterministic(); }
  std::optional<ScalarKind> fixed_scalar() const override { return engine_->fixed_scalar(); }
  RunResult run(const Scenario& scenario, const RunOptions& options) const override;
  std::optional<BoundedRunResult> run_bounded(const Scenario& scenario, ScalarKind format) const override;

  // The scenario as this target runs it: the preset applied to its engine configuration.
  Scenario as_run(const Scenario& scenario) const override;

 private:
  EngineConfig engine_as_run(const EngineConfig& config) const;  // the preset applied
  // With `bounds` (S a FloatBound), also the bound of every reported value.
  template <class S>
  RunResult run_as(const Scenario& scenario, const RunOptions& options, ResultBounds* bounds = nullptr) const;

  std::optional<Preset> preset_;
  std::shared_ptr<const LossNormaliser> normaliser_;
  std::shared_ptr<const EngineModel> engine_;
};

// Engine models by name: "reference", "deepspeed@<version>" (any release; its band is derived from the
// version), the canaries, then the models registered with register_engine_model. nullptr if unknown.
std::shared_ptr<const EngineModel> find_engine_model(std::string_view name);
// Makes a user's engine model findable by its name() in find_engine_model and make_target, so that it composes
// like a built-in one ("openrlhf@0.10.2+myteam-engine"). Meant for start-up; safe to call from several threads.
// Throws std::invalid_argument for a null model, a name that is empty or holds '+', or a name that clashes with
// a built-in engine (the whole "deepspeed@" family included) or an earlier registration.
void register_engine_model(std::shared_ptr<const EngineModel> model);
// The names of the engine models registered with register_engine_model, in registration order (each is also a
// target name; `accumcheck list targets` lists them as user engines).
std::vector<std::string> registered_engine_model_names();
// The '+'-separated parts of a target name, in order ("a+b" -> {"a", "b"}; "" -> {""}).
std::vector<std::string> split_target_name(std::string_view name);
// Resolves target names that sim/ does not own, such as "adapter:torch-loop" (sim/external/): a name that starts
// with `prefix` is handed to `resolver`. Installed by the layers above at start-up; safe from several threads.
using TargetResolver = std::function<std::unique_ptr<Target>(std::string_view name)>;
void register_target_resolver(std::string prefix, TargetResolver resolver);
// Parses "[preset+]framework+engine" or a bare engine name. Throws std::invalid_argument naming the unknown part.
std::unique_ptr<Target> make_target(std::string_view name);
// The named targets `accumcheck list targets` shows: the reference, every DeepSpeed band, the seed's stacks.
const std::vector<std::string>& builtin_target_names();

}  // namespace accumcheck::sim
