// ComposedTarget's driver, the engine-model and framework registries, and target-name parsing.
#include "sim/target.h"

#include <mutex>
#include <stdexcept>
#include <utility>

#include "sim/convert.h"
#include "sim/deepspeed_zero.h"
#include "sim/engine_contract.h"
#include "sim/reference_engine.h"
#include "sim/sequence_pool.h"

namespace accumcheck::sim {

std::string_view to_string(ScalarKind kind) {
  switch (kind) {
    case ScalarKind::rational: return "rational";
    case ScalarKind::fast_rational: return "fast-rational";
    case ScalarKind::fixed32: return "fixed32";
    case ScalarKind::fp64: return "fp64";
    case ScalarKind::fp32: return "fp32";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown ScalarKind");
}

ScalarKind parse_scalar_kind(std::string_view text) {
  for (ScalarKind k : {ScalarKind::rational, ScalarKind::fast_rational, ScalarKind::fixed32, ScalarKind::fp64, ScalarKind::fp32})
    if (to_string(k) == text) return k;
  throw std::invalid_argument("unknown scalar '" + std::string(text) +
                              "' (expected rational, fast-rational, fixed32, fp64 or fp32)");
}

namespace {
template <class S>
ScalarKind options_scalar() {
  if constexpr (std::is_same_v<S, Rational>) return ScalarKind::rational;
  else if constexpr (std::is_same_v<S, models::FastRational>) return ScalarKind::fast_rational;
  else if constexpr (std::is_same_v<S, models::Fixed32>) return ScalarKind::fixed32;
  else if constexpr (std::is_same_v<S, double> || std::is_same_v<S, Bound64>) return ScalarKind::fp64;
  else return ScalarKind::fp32;
}

template <class S>
constexpr bool is_bound_v = std::is_same_v<S, Bound32> || std::is_same_v<S, Bound64> || std::is_same_v<S, BoundBf16>;
}  // namespace

std::optional<BoundedRunResult> Target::run_bounded(const Scenario&, ScalarKind) const { return std::nullopt; }


namespace {

// This thread's finished engine of the built-in type E (ReferenceEngine<S> or DeepSpeedZeroEngine<S>), which the
// next create of that type resets instead of making one (E::reset). run_as hands its engine here when it is done
// with it; nothing is shared between threads, and a reset engine is what a new one would be.
template <class E>
std::unique_ptr<E>& spare_engine() {
  thread_local std::unique_ptr<E> spare;
  return spare;
}

template <class E, class S>
bool keep_as_spare(std::unique_ptr<Engine<S>>& engine) {
  auto* typed = dynamic_cast<E*>(engine.get());
  if (!typed) return false;
  engine.release();
  spare_engine<E>().reset(typed);
  return true;
}

// Keeps a finished engine for this thread's next run where it is a built-in one; any other is freed.
template <class S>
void give_back_engine(std::unique_ptr<Engine<S>> engine) {
  if (!keep_as_spare<ReferenceEngine<S>>(engine)) keep_as_spare<DeepSpeedZeroEngine<S>>(engine);
}

// This thread's coefficient lists of a finished exact run, for its next one to write over (run_as takes them and
// hands them back; a run inside another finds none and starts with empty lists).
FastWindowCoefficients& spare_fast_coefficients() {
  thread_local FastWindowCoefficients spare;
  return spare;
}

// This thread's initial parameters in S of a run, converted into for its next run (run_as takes them and hands them
// back once its engine has copied them, as with the coefficient lists).
template <class S>
models::Parameters<S>& spare_initial_parameters() {
  thread_local models::Parameters<S> spare;
  return spare;
}

// The correct engine, and a canary built from it with one deliberate fault.
class ReferenceEngineModel final : public EngineModelOf<ReferenceEngineModel> {
 public:
  explicit ReferenceEngineModel(bool canary) : canary_(canary) {}
  std::string name() const override { return canary_ ? "canary-offload-nosync" : "reference"; }
  std::string description() const override {
    return canary_ ? "CANARY: the reference engine with the host optimizer reading gradients before their "
                     "device-to-host copies have landed; with offload on it fails for the copy schedules that "
                     "leave a copy pending at the step"
                   : "correct by construction: ZeRO 0-3, buckets, offload with synchronised copies";
  }
  std::string unsupported(const EngineConfig&) const override { return {}; }
  template <class S>
  std::unique_ptr<Engine<S>> create(const Scenario& s, const models::Parameters<S>& p, std::uint64_t seed, bool lines) const {
    const ReferenceFaults faults{.skip_synchronize_before_step = canary_};
    if (std::unique_ptr<ReferenceEngine<S>> engine = std::move(spare_engine<ReferenceEngine<S>>())) {
      engine->reset(s.training, s.engine, p, seed, lines, faults);
      return engine;
    }
    return std::make_unique<ReferenceEngine<S>>(s.training, s.engine, p, seed, lines, faults);
  }

 private:
  bool canary_;
};

class DeepSpeedEngineModel final : public EngineModelOf<DeepSpeedEngineModel> {
 public:
  explicit DeepSpeedEngineModel(DeepSpeedVersion version) : version_(version) {}
  std::string name() const override { return "deepspeed@" + version_.to_string(); }
  std::string description() const override { return deepspeed_description(version_); }
  bool optimizer_steps_missing_gradients_as_zero() const override { return true; }
  std::string unsupported(const EngineConfig& config) const override {
    if (config.precision == Precision::fp16 || config.loss_scaler)
      return "fp16 loss scaling and its overflow check are not modelled for DeepSpeed yet (bf16 and full are)";
    if (config.zero_stage == 1 || config.zero_stage == 2) return {};
    return "the DeepSpeed model covers ZeRO stages 1 and 2 (stage_1_and_2.py); zero_stage = " +
           std::to_string(config.zero_stage) + " is not modelled";
  }
  template <class S>
  std::unique_ptr<Engine<S>> create(const Scenario& s, const models::Parameters<S>& p, std::uint64_t seed, bool lines) const {
    if (std::unique_ptr<DeepSpeedZeroEngine<S>> engine = std::move(spare_engine<DeepSpeedZeroEngine<S>>())) {
      engine->reset(version_, s.training, s.engine, p, seed, lines);
      return engine;
    }
    return std::make_unique<DeepSpeedZeroEngine<S>>(version_, s.training, s.engine, p, seed, lines);
  }

 private:
  DeepSpeedVersion version_;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"llamafactory", "LLaMA-Factory's shipped examples/deepspeed/ds_z2_offload_config.json: ZeRO-2, optimizer on CPU", 2, true},
      {"trl", "TRL passes the user's DeepSpeed config through unchanged", std::nullopt, std::nullopt},
  };
  return all;
}

std::shared_ptr<const EngineModel> find_builtin_engine_model(std::string_view name) {
  if (name == "reference") return std::make_shared<ReferenceEngineModel>(false);
  if (name == "canary-offload-nosync") return std::make_shared<ReferenceEngineModel>(true);
  if (name.starts_with("deepspeed@")) {
    const auto version = DeepSpeedVersion::parse(name.substr(10));
    if (!version) return nullptr;
    return std::make_shared<DeepSpeedEngineModel>(*version);
  }
  return nullptr;
}

// Users' engine models, by the name each reported when it was registered. Registration happens at start-up and
// lookups once per make_target, so one mutex is enough.
struct EngineRegistry {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::shared_ptr<const EngineModel>>> models;
};

EngineRegistry& engine_registry() {
  static EngineRegistry registry;
  return registry;
}

}  // namespace

std::shared_ptr<const EngineModel> find_engine_model(std::string_view name) {
  if (auto builtin = find_builtin_engine_model(name)) return builtin;
  EngineRegistry& registry = engine_registry();
  const std::lock_guard lock(registry.mutex);
  for (const auto& [registered, model] : registry.models)
    if (registered == name) return model;
  return nullptr;
}

void register_engine_model(std::shared_ptr<const EngineModel> model) {
  if (!model) throw std::invalid_argument("register_engine_model: the model is null");
  const std::string name = model->name();
  if (name.empty() || name.find('+') != std::string::npos)
    throw std::invalid_argument("register_engine_model: the name '" + name +
                                "' must be non-empty and hold no '+' (it separates the parts of a target name)");
  // The whole deepspeed@ family is built in, including versions that do not parse, so that a typo in a version
  // never silently picks up a user's model.
  if (find_builtin_engine_model(name) || name.starts_with("deepspeed@"))
    throw std::invalid_argument("register_engine_model: the name '" + name + "' clashes with a built-in engine model");
  if (const std::string why = engine_contract_violation(*model); !why.empty())
    throw std::invalid_argument("register_engine_model: the engine model '" + name + "' breaks the engine contract: " + why);
  EngineRegistry& registry = engine_registry();
  const std::lock_guard lock(registry.mutex);
  for (const auto& entry : registry.models)
    if (entry.first == name)
      throw std::invalid_argument("register_engine_model: the name '" + name +
                                  "' clashes with an engine model registered earlier (" + entry.second->description() + ")");
  registry.models.emplace_back(name, std::move(model));
}

std::vector<std::string> registered_engine_model_names() {
  EngineRegistry& registry = engine_registry();
  const std::lock_guard lock(registry.mutex);
  std::vector<std::string> names;
  names.reserve(registry.models.size());
  for (const auto& entry : registry.models) names.push_back(entry.first);
  return names;
}

ComposedTarget::ComposedTarget(std::optional<Preset> preset, std::shared_ptr<const LossNormaliser> normaliser,
                               std::shared_ptr<const EngineModel> engine)
    : preset_(std::move(preset)), normaliser_(std::move(normaliser)), engine_(std::move(engine)) {
  ACCUMCHECK_ASSERT(normaliser_ != nullptr && engine_ != nullptr);
  // Every "deepspeed@" name is a built-in DeepSpeed model (register_engine_model refuses the family).
  if (engine_->name().starts_with("deepspeed@"))
    if (auto variant = normaliser_->under_deepspeed()) normaliser_ = std::move(variant);
}

std::string ComposedTarget::name() const {
  std::string out = preset_ ? preset_->name + "+" : "";
  if (normaliser_->name() != "reference" || preset_) out += std::string(normaliser_->name()) + "+";
  return out + engine_->name();
}

std::string ComposedTarget::description() const {
  std::string out;
  if (preset_) out += preset_->description + "; ";
  return out + "loss: " + std::string(normaliser_->description()) + "; engine: " + engine_->description();
}

EngineConfig ComposedTarget::engine_as_run(const EngineConfig& config) const {
  EngineConfig c = config;
  if (preset_ && preset_->zero_stage) c.zero_stage = *preset_->zero_stage;
  if (preset_ && preset_->offload) c.offload = *preset_->offload;
  return c;
}

Scenario ComposedTarget::as_run(const Scenario& scenario) const {
  Scenario s = scenario;
  s.engine = engine_as_run(scenario.engine);
  return s;
}

// Reads only the configuration: campaigns ask this of every trial, and a copy of the scenario (its data in exact
// rationals) cost more than the question.
std::string ComposedTarget::unsupported(const Scenario& scenario) const {
  if (std::string why = normaliser_->unsupported(scenario.training.aggregation); !why.empty()) return why;
  return engine_->unsupported(engine_as_run(scenario.engine));
}

RunResult ComposedTarget::run(const Scenario& scenario, const RunOptions& options) const {
  switch (options.scalar) {
    case ScalarKind::rational: return run_as<Rational>(scenario, options);
    case ScalarKind::fast_rational: return run_as<models::FastRational>(scenario, options);
    case ScalarKind::fixed32: return run_as<models::Fixed32>(scenario, options);
    case ScalarKind::fp64: return run_as<double>(scenario, options);
    case ScalarKind::fp32: return run_as<float>(scenario, options);
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown ScalarKind");
}

namespace {

// One applied step's bounds. The grad norm takes the larger of its form as computed and the norm of tensor
// norms of the gradient before clipping (the applied gradient divided back by the clip coefficient: the same
// exact value, with a bound no smaller than the unclipped gradient's own).
template <class S>
void add_step_bounds(ResultBounds& bounds, const AppliedStep<S>& applied, const std::string& step) {
  constexpr auto F = S::kFormatKind;
  bounds.step_gradient.push_back(bounds_of<F>(applied.gradient.tensors, step + " / gradient"));
  models::Gradient<S> before_clip = applied.gradient;
  if (applied.clip_coefficient.exact() != models::FastRational(1))
    for (auto& t : before_clip.tensors)
      for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = t(i) / applied.clip_coefficient;
  bounds.step_grad_norm.push_back(grad_norm_bound<F>(applied.grad_norm, before_clip, step + " / grad_norm"));
  bounds.step_clip_coefficient.push_back(bound_of(applied.clip_coefficient, step + " / clip_coefficient"));
}

inline void add_zero_step_bounds(ResultBounds& bounds, const models::ModelSpec& spec) {
  const ResultBounds zero = ResultBounds::zero(spec, 1);
  bounds.step_gradient.push_back(zero.step_gradient[0]);
  bounds.step_grad_norm.push_back(Rational(0));
  bounds.step_clip_coefficient.push_back(Rational(0));
}

}  // namespace

std::optional<BoundedRunResult> ComposedTarget::run_bounded(const Scenario& scenario, ScalarKind format) const {
  if (format != ScalarKind::fp32 && format != ScalarKind::fp64)
    throw std::invalid_argument("run_bounded: the format must be fp32 or fp64, not " + std::string(to_string(format)));
  if (scenario.engine.loss_scaler)
    throw NoRoundingBound("no rounding bound: loss scaling skips steps on overflow, which FloatBound does not model");
  const Precision precision = engine_as_run(scenario.engine).precision;
  if (precision == Precision::fp16)
    throw NoRoundingBound("no rounding bound: fp16 storage in a simulated target's own run is not bounded yet "
                          "(overflow to inf is not modelled by FloatBound)");
  BoundedRunResult out;
  const RunOptions options{.scalar = format};
  try {
    // bf16 storage: the run in bf16's unit roundoff whatever the arithmetic's format, as the oracle's bound.
    out.result = precision == Precision::bf16 ? run_as<BoundBf16>(scenario, options, &out.bounds)
                 : format == ScalarKind::fp32 ? run_as<Bound32>(scenario, options, &out.bounds)
                                              : run_as<Bound64>(scenario, options, &out.bounds);
  } catch (const models::AmbiguousComparison& e) {
    throw NoRoundingBound(ambiguous_comparison_reason(e));
  }
  return out;
}

template <class S>
RunResult ComposedTarget::run_as(const Scenario& original, const RunOptions& options, ResultBounds* bounds) const {
  // The missing-gradient policy has one source, the engine model's declaration, which the oracle follows too
  // (properties::oracle_training_for): the scenario the engine gets says the same, whatever the input said.
  // Copied only when something changes: the data of a scenario is most of a small run's cost to copy.
  const bool missing_as_zero = engine_->optimizer_steps_missing_gradients_as_zero();
  std::optional<Scenario> adjusted;
  if (engine_as_run(original.engine) != original.engine || original.training.optimizer.missing_gradient_is_zero != missing_as_zero) {
    adjusted = as_run(original);
    adjusted->training.optimizer.missing_gradient_is_zero = missing_as_zero;
  }
  const Scenario& scenario = adjusted ? *adjusted : original;
  validate(scenario);
  if (const std::string why = unsupported(scenario); !why.empty())
    throw std::invalid_argument("target " + name() + " cannot run this scenario: " + why);
  const EngineConfig& config = scenario.engine;
  if (!std::is_floating_point_v<S> && config.precision != Precision::full &&
      !(std::is_same_v<S, BoundBf16> && config.precision == Precision::bf16))
    throw std::invalid_argument("precision " + std::string(to_string(config.precision)) +
                                " stores values in a 16-bit float type; run it with a float scalar (fp32), not " +
                                std::string(to_string(options_scalar<S>())));

  // Data in S once, up front: [step][k] -> per-rank sequences, in storage this thread's earlier runs gave back
  // (sim/sequence_pool.h), and given back when the run ends (after the engine, declared below, is gone).
  SequencePool<S>& pool = SequencePool<S>::local();
  std::vector<std::vector<RankSequences<S>>> data;
  const GiveBackOnExit<S, decltype(data)> give_back(pool, data);
  data.reserve(scenario.steps.size());
  for (const auto& plan : scenario.steps) {
    std::vector<RankSequences<S>> window;
    window.reserve(plan.micro_batches.size());
    for (const auto& mb : plan.micro_batches) {
      RankSequences<S> ranks;
      ranks.reserve(mb.rank_sequences.size());
      for (const auto& seqs : mb.rank_sequences) {
        std::vector<models::Sequence<S>> converted;
        converted.reserve(seqs.size());
        for (const auto& seq : seqs) converted.push_back(pool.convert(seq));
        ranks.push_back(std::move(converted));
      }
      window.push_back(std::move(ranks));
    }
    data.push_back(std::move(window));
  }

  std::uint64_t incarnation = 0;
  auto fresh_engine = [&](const models::Parameters<S>& params) {
    auto made = engine_->make<S>(scenario, params, scenario.schedule_seed + 0x9E3779B97F4A7C15ULL * incarnation++,
                                 options.keep_trace_lines);
    if (!made) {
      if constexpr (is_bound_v<S>)
        throw NoRoundingBound("the engine model " + engine_->name() + " does not run in " +
                              std::string(models::ScalarTraits<S>::name) + " (EngineModel::make_fp32_bound)");
      else
        throw std::invalid_argument("the engine model " + engine_->name() + " does not run in " +
                                    std::string(models::ScalarTraits<S>::name) + "; it runs in " +
                                    engine_->scalar_names() + " (EngineModelOf's `scalars`, docs/targets.md section 10)");
    }
    return made;
  };
  models::Parameters<S> initial = std::move(spare_initial_parameters<S>());
  convert_tensors_into(scenario.initial_parameters.tensors, initial.tensors);
  std::unique_ptr<Engine<S>> engine = fresh_engine(initial);
  spare_initial_parameters<S>() = std::move(initial);  // make() copied them: an engine keeps no reference to its argument
  RunResult result;
  result.steps.reserve(scenario.steps.size());
  std::uint64_t digest = 0xCBF29CE484222325ULL;
  auto retire_trace = [&](const Engine<S>& e) {
    digest = (digest ^ e.trace().digest()) * 0x100000001B3ULL;
    result.trace_event_count += e.trace().event_count();
    if (options.keep_trace_lines)
      result.trace_lines.insert(result.trace_lines.end(), e.trace().lines().begin(), e.trace().lines().end());
  };

  // One set of coefficient lists for the whole run, refilled per micro-batch (the engine reads them during its
  // backward only): their storage is kept from one micro-batch to the next. An exact run has the normaliser
  // write them in FastRational directly, a window at a time, into lists this thread's runs hand on.
  RankCoefficients<S> coefficients;
  [[maybe_unused]] FastWindowCoefficients fast;
  if constexpr (std::is_same_v<S, models::FastRational>) fast = std::move(spare_fast_coefficients());
  for (std::size_t s = 0; s < scenario.steps.size(); ++s) {
    WindowCoefficients exact;
    if constexpr (std::is_same_v<S, models::FastRational>)
      normaliser_->fast_coefficients_into(scenario.steps[s], config, scenario.training.aggregation, fast);
    else
      exact = normaliser_->coefficients(scenario.steps[s], config, scenario.training.aggregation);
    const auto& window = data[s];
    if (options.applied_gradients_only && s + 1 == scenario.steps.size()) engine->skip_updates();
    for (std::size_t k = 0; k < window.size(); ++k) {
      const RankCoefficients<S>* micro_batch_coefficients = &coefficients;
      if constexpr (std::is_same_v<S, models::FastRational>) {
        micro_batch_coefficients = &fast[k];
      } else {
        coefficients.resize(exact[k].size());
        for (std::size_t r = 0; r < exact[k].size(); ++r) {
          std::vector<S>& c = coefficients[r];
          c.clear();
          c.reserve(exact[k][r].size());
          for (const Rational& q : exact[k][r]) c.push_back(models::from_rational<S>(q));
        }
      }
      if (config.boundary == BoundaryMode::manual) engine->set_gradient_accumulation_boundary(k + 1 == window.size());
      engine->backward(window[k], *micro_batch_coefficients);
      if (config.step_after_every_backward) engine->step();
    }
    if (!config.step_after_every_backward) engine->step();
    StepOutcome outcome;
    if (auto applied = engine->take_applied_step()) {
      outcome = StepOutcome{true, to_exact(applied->gradient), models::to_rational(applied->grad_norm),
                            models::to_rational(applied->clip_coefficient)};
      if (!applied->grad_norm_taken) result.reported.grad_norm = false;
      if constexpr (is_bound_v<S>)
        if (bounds) add_step_bounds(*bounds, *applied, "step " + std::to_string(s));
      engine->give_back(std::move(*applied));  // read: its tensors are the next step's to write over
    } else {
      if constexpr (is_bound_v<S>)
        if (bounds) add_zero_step_bounds(*bounds, scenario.training.model);
      outcome.gradient = models::zero_gradient<Rational>(scenario.training.model);
      outcome.grad_norm = Rational(0);
    }
    result.steps.push_back(std::move(outcome));
    if (options.keep_step_parameters) result.parameters_after_step.push_back(to_exact(engine->parameters()));
    if (scenario.checkpoint_after_step && *scenario.checkpoint_after_step == static_cast<int>(s)) {
      const EngineCheckpoint<S> checkpoint = engine->save_checkpoint();
      retire_trace(*engine);
      give_back_engine(std::move(engine));
      engine = fresh_engine(checkpoint.parameters);
      engine->load_checkpoint(checkpoint);
    }
  }
  if (!options.applied_gradients_only) {
    result.parameters = to_exact(engine->parameters());
    result.optimizer_state = to_exact(engine->optimizer_state());
  }
  if constexpr (is_bound_v<S>)
    if (bounds) {
      constexpr auto F = S::kFormatKind;
      bounds->parameters = bounds_of<F>(engine->parameters().tensors, "final / parameters");
      const auto state = engine->optimizer_state();
      bounds->first_moment = bounds_of<F>(state.first_moment, "final / first_moment");
      bounds->second_moment = bounds_of<F>(state.second_moment, "final / second_moment");
    }
  retire_trace(*engine);
  give_back_engine(std::move(engine));
  if constexpr (std::is_same_v<S, models::FastRational>) spare_fast_coefficients() = std::move(fast);
  result.trace_digest = digest;
  return result;
}

std::vector<std::string> split_target_name(std::string_view name) {
  std::vector<std::string> parts(1);
  for (char c : name) {
    if (c == '+') parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

namespace {
struct ResolverRegistry {
  std::mutex mutex;
  std::vector<std::pair<std::string, TargetResolver>> resolvers;
};
ResolverRegistry& resolver_registry() {
  static ResolverRegistry registry;
  return registry;
}
}  // namespace

void register_target_resolver(std::string prefix, TargetResolver resolver) {
  ACCUMCHECK_ASSERT(!prefix.empty() && resolver);
  ResolverRegistry& registry = resolver_registry();
  const std::lock_guard lock(registry.mutex);
  for (auto& entry : registry.resolvers)
    if (entry.first == prefix) {
      entry.second = std::move(resolver);
      return;
    }
  registry.resolvers.emplace_back(std::move(prefix), std::move(resolver));
}

std::unique_ptr<Target> make_target(std::string_view name) {
  {
    TargetResolver resolver;
    {
      ResolverRegistry& registry = resolver_registry();
      const std::lock_guard lock(registry.mutex);
      for (const auto& [prefix, r] : registry.resolvers)
        if (name.starts_with(prefix)) resolver = r;
    }
    if (resolver) return resolver(name);
  }
  const std::vector<std::string> parts = split_target_name(name);
  auto unknown = [&](const std::string& part, const std::string& what) -> std::unique_ptr<Target> {
    throw std::invalid_argument("unknown " + what + " '" + part + "' in target '" + std::string(name) +
                                "' (accumcheck list targets shows the names)");
  };
  if (parts.empty() || parts.size() > 3) return unknown(std::string(name), "target");
  auto engine = find_engine_model(parts.back());
  if (!engine) return unknown(parts.back(), "engine");
  std::shared_ptr<const LossNormaliser> normaliser = find_normaliser("reference");
  std::optional<Preset> preset;
  std::size_t next = 0;
  if (parts.size() >= 2) {
    for (const auto& p : presets())
      if (p.name == parts[0]) preset = p;
    if (preset) next = 1;
    if (parts.size() == 3 && !preset) return unknown(parts[0], "preset");
    if (next < parts.size() - 1) {
      normaliser = find_normaliser(parts[next]);
      if (!normaliser) return unknown(parts[next], "framework");
    }
  }
  return std::make_unique<ComposedTarget>(std::move(preset), std::move(normaliser), std::move(engine));
}

const std::vector<std::string>& builtin_target_names() {
  static const std::vector<std::string> names = {
      "reference",
      "canary-offload-nosync",
      "deepspeed@0.15.1",
      "deepspeed@0.16.0",
      "deepspeed@0.17.0",
      "deepspeed@0.18.0",
      "deepspeed@0.18.9",
      "deepspeed@0.19.0",
      "openrlhf@0.10.2+deepspeed@0.18.9",
      "openrlhf@0.10.3+deepspeed@0.18.9",
      "openrlhf@0.10.4+deepspeed@0.19.1",
      "openrlhf@0.10.2+reference",
      "openrlhf@0.10.3+reference",
      "openrlhf@0.10.4+reference",
      "transformers@4.45+reference",
      "transformers@4.46+reference",
      "transformers@4.46+deepspeed@0.16.0",
      "transformers@4.49+deepspeed@0.19.0",
      "transformers@4.54+reference",
      "transformers@4.54+deepspeed@0.19.0",
      "trl+transformers@4.46+deepspeed@0.16.0",
      "trl+transformers@4.49+deepspeed@0.19.0",
      "llamafactory+transformers@4.46+deepspeed@0.16.0",
      "llamafactory+transformers@4.49+deepspeed@0.19.0",
  };
  return names;
}

}  // namespace accumcheck::sim
