// engine_contract_violation: the boundary rule of sim/engine.h, probed on one weight.
#include "sim/engine_contract.h"

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "sim/convert.h"
#include "sim/target.h"

namespace accumcheck::sim {
namespace {

constexpr int kProbeAccumulationSteps = 2;

// The probe's world: w (1x1, bias frozen), SGD with lr = 0, one one-token sequence per micro-batch on one rank.
Scenario probe_scenario(const EngineConfig& config) {
  Scenario s;
  s.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  s.training.model.frozen = {"bias"};
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  s.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = Rational(0)};
  s.engine = config;
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  return s;
}

// One call of the probe: optionally the override, optionally a backward, then step(); and whether the
// contract says that step() applies an update.
struct Call {
  std::optional<bool> boundary_override;
  bool backward = true;
  bool applies = false;
  std::string what;
};

template <class S>
std::string probe_once(Engine<S>& engine, const Scenario& scenario, const std::vector<Call>& calls);

// Nullopt when the model makes no engine in S.
template <class S>
std::optional<std::string> probe(const EngineModel& model, const Scenario& scenario, const std::vector<Call>& calls) {
  // Twice, with the same seed: the second run must record the same trace (its digest enters every result).
  std::uint64_t digest = 0;
  for (int run = 0; run < 2; ++run) {
    const std::unique_ptr<Engine<S>> engine =
        model.make<S>(scenario, to_scalar<S>(scenario.initial_parameters), scenario.schedule_seed, false);
    if (!engine) return std::nullopt;
    if (std::string why = probe_once(*engine, scenario, calls); !why.empty()) return why;
    if (run == 1 && engine->trace().digest() != digest)
      return "two engines created alike and driven alike recorded different traces (digests " + std::to_string(digest) + " and " +
             std::to_string(engine->trace().digest()) + "): an engine must be a deterministic function of scenario, parameters "
             "and seed (sim/engine.h)";
    digest = engine->trace().digest();
  }
  return "";
}

template <class S>
std::string probe_once(Engine<S>& engine, const Scenario& scenario, const std::vector<Call>& calls) {
  models::Sequence<Rational> token;
  token.features = models::Matrix<Rational>::Constant(1, 1, Rational(1));
  token.targets = models::Matrix<Rational>::Constant(1, 1, Rational(-1));
  token.loss_mask = {1};
  const RankSequences<S> data = {{to_scalar<S>(token)}};
  // The reference layer's coefficient for a token mean over a full window of G one-token micro-batches: G R c.
  const RankCoefficients<S> coefficients = {{S(1)}};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& call = calls[i];
    if (call.boundary_override) engine.set_gradient_accumulation_boundary(*call.boundary_override);
    if (call.backward) engine.backward(data, coefficients);
    engine.step();
    const bool applied = engine.take_applied_step().has_value();
    if (applied != call.applies)
      return "step() call " + std::to_string(i + 1) + " (" + call.what + ") " +
             (applied ? "applied an update where the contract has none" : "applied no update where the contract has one") +
             "; with G = " + std::to_string(scenario.engine.accumulation_steps) +
             " the boundary is the caller's override when set, else (micro_steps + 1) % G == 0 with micro_steps "
             "counting step() calls, with or without a backward before them (sim/engine.h)";
  }
  return "";
}

// The probe in the first scalar the model makes an engine for (exact ones first); nullopt when it makes none.
std::optional<std::string> probe_in_some_scalar(const EngineModel& model, const Scenario& scenario,
                                                const std::vector<Call>& calls) {
  std::optional<std::string> out;
  auto attempt = [&]<class S>() {
    if (!out) out = probe<S>(model, scenario, calls);
  };
  attempt.template operator()<Rational>();
  attempt.template operator()<models::FastRational>();
  attempt.template operator()<double>();
  attempt.template operator()<float>();
  attempt.template operator()<models::Fixed32>();
  return out;
}

}  // namespace

std::string engine_contract_violation(const EngineModel& model) {
  std::optional<EngineConfig> accepted;
  for (const auto& [stage, offload] : std::vector<std::pair<int, bool>>{{0, false}, {1, false}, {2, false}, {3, false},
                                                                       {1, true}, {2, true}, {3, true}}) {
    EngineConfig automatic{.rank_count = 1, .accumulation_steps = kProbeAccumulationSteps, .zero_stage = stage, .offload = offload};
    if (model.unsupported(automatic).empty()) {
      accepted = automatic;
      break;
    }
  }
  if (!accepted) return "";
  const std::vector<Call> automatic_calls = {
      {.backward = false, .applies = false, .what = "micro-step 0, no backward"},
      {.backward = true, .applies = true, .what = "micro-step 1 after one backward: the boundary by step() count"},
      {.backward = true, .applies = false, .what = "micro-step 2"},
      {.backward = true, .applies = true, .what = "micro-step 3"},
  };
  EngineConfig manual = *accepted;
  manual.boundary = BoundaryMode::manual;
  const std::vector<Call> manual_calls = {
      {.boundary_override = false, .applies = false, .what = "override false at micro-step 0"},
      {.boundary_override = true, .applies = true, .what = "override true at micro-step 1"},
      {.boundary_override = std::nullopt, .applies = true, .what = "micro-step 2: the override true is sticky"},
      {.boundary_override = false, .applies = false, .what = "override false at micro-step 3, a boundary by count"},
  };
  try {
    for (const auto& [config, calls] : {std::pair{*accepted, automatic_calls}, std::pair{manual, manual_calls}}) {
      if (!model.unsupported(config).empty()) continue;
      const std::optional<std::string> why = probe_in_some_scalar(model, probe_scenario(config), calls);
      if (!why) return "";
      if (!why->empty())
        return std::string(config.boundary == BoundaryMode::automatic ? "automatic" : "manual") + " boundary, zero_stage " +
               std::to_string(config.zero_stage) + (config.offload ? " with offload" : "") + ": " + *why;
    }
  } catch (const std::exception& e) {
    return std::string("the engine raised during the check: ") + e.what();
  }
  return "";
}

}  // namespace accumcheck::sim
