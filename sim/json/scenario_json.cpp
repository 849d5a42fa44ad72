// Scenario <-> JSON.
#include "sim/json/scenario_json.h"

#include <stdexcept>
#include <string>

#include "models/json/json_reader.h"
#include "models/json/model_spec_json.h"

namespace accumcheck::sim {

using nlohmann::json;
namespace mj = models::json;

using mj::bool_of;
using mj::fail;
using mj::field;
using mj::named;
using mj::string_of;

namespace {
int int_of(const json& j, const std::string& path) { return mj::int_of(j, path, 1000000); }
}  // namespace

json to_json(const sim::EngineConfig& e) {
  json out{{"rank_count", e.rank_count},
           {"accumulation_steps", e.accumulation_steps},
           {"zero_stage", e.zero_stage},
           {"offload", e.offload},
           {"bucket_element_count", e.bucket_element_count},
           {"boundary", std::string(sim::to_string(e.boundary))},
           {"step_after_every_backward", e.step_after_every_backward},
           {"precision", std::string(sim::to_string(e.precision))},
           {"loss_scaler", nullptr}};
  if (e.loss_scaler)
    out["loss_scaler"] = json{{"initial_scale", mj::to_json(e.loss_scaler->initial_scale)},
                              {"dynamic", e.loss_scaler->dynamic},
                              {"growth_interval", e.loss_scaler->growth_interval},
                              {"growth_factor", mj::to_json(e.loss_scaler->growth_factor)},
                              {"backoff_factor", mj::to_json(e.loss_scaler->backoff_factor)},
                              {"min_scale", mj::to_json(e.loss_scaler->min_scale)}};
  return out;
}

sim::EngineConfig engine_config_from_json(const json& j) {
  const std::string p = "scenario.engine";
  sim::EngineConfig e;
  e.rank_count = int_of(field(j, p, "rank_count"), p + ".rank_count");
  e.accumulation_steps = int_of(field(j, p, "accumulation_steps"), p + ".accumulation_steps");
  e.zero_stage = int_of(field(j, p, "zero_stage"), p + ".zero_stage");
  e.offload = bool_of(field(j, p, "offload"), p + ".offload");
  if (j.contains("bucket_element_count")) e.bucket_element_count = int_of(j.at("bucket_element_count"), p + ".bucket_element_count");
  if (j.contains("boundary"))
    e.boundary = named(p + ".boundary", [&] { return sim::parse_boundary_mode(string_of(j.at("boundary"), p + ".boundary")); });
  if (j.contains("step_after_every_backward"))
    e.step_after_every_backward = bool_of(j.at("step_after_every_backward"), p + ".step_after_every_backward");
  if (j.contains("precision"))
    e.precision = named(p + ".precision", [&] { return sim::parse_precision(string_of(j.at("precision"), p + ".precision")); });
  if (j.contains("loss_scaler") && !j.at("loss_scaler").is_null()) {
    const json& ls = j.at("loss_scaler");
    const std::string q = p + ".loss_scaler";
    models::LossScalerSpec spec;
    spec.initial_scale = mj::rational_from_json(field(ls, q, "initial_scale"), q + ".initial_scale");
    spec.dynamic = bool_of(field(ls, q, "dynamic"), q + ".dynamic");
    spec.growth_interval = int_of(field(ls, q, "growth_interval"), q + ".growth_interval");
    spec.growth_factor = mj::rational_from_json(field(ls, q, "growth_factor"), q + ".growth_factor");
    spec.backoff_factor = mj::rational_from_json(field(ls, q, "backoff_factor"), q + ".backoff_factor");
    spec.min_scale = mj::rational_from_json(field(ls, q, "min_scale"), q + ".min_scale");
    e.loss_scaler = spec;
  }
  return e;
}

json to_json(const sim::Scenario& s) {
  json steps = json::array();
  for (const auto& plan : s.steps) {
    json window = json::array();
    for (const auto& mb : plan.micro_batches) {
      json ranks = json::array();
      for (const auto& rank : mb.rank_sequences) {
        json seqs = json::array();
        for (const auto& seq : rank) seqs.push_back(mj::to_json(seq));
        ranks.push_back(std::move(seqs));
      }
      window.push_back(std::move(ranks));
    }
    steps.push_back(std::move(window));
  }
  return json{{"training", mj::to_json(s.training)},
              {"engine", to_json(s.engine)},
              {"initial_parameters", mj::to_json(s.training.model, s.initial_parameters)},
              {"steps", std::move(steps)},
              {"checkpoint_after_step", s.checkpoint_after_step ? json(*s.checkpoint_after_step) : json(nullptr)},
              {"schedule_seed", std::to_string(s.schedule_seed)}};
}

sim::Scenario scenario_from_json(const json& j) {
  const std::string p = "scenario";
  sim::Scenario s;
  s.training = mj::training_spec_from_json(field(j, p, "training"));
  s.engine = engine_config_from_json(field(j, p, "engine"));
  s.initial_parameters = mj::parameters_from_json(s.training.model, field(j, p, "initial_parameters"));
  const json& steps = field(j, p, "steps");
  if (!steps.is_array()) fail(p + ".steps", "expected an array of windows");
  if (steps.size() > static_cast<std::size_t>(sim::kStepCountMax)) fail(p + ".steps", "too many steps");
  for (std::size_t st = 0; st < steps.size(); ++st) {
    const std::string sp = p + ".steps[" + std::to_string(st) + "]";
    if (!steps[st].is_array()) fail(sp, "expected an array of micro-batches");
    sim::StepPlan plan;
    for (std::size_t k = 0; k < steps[st].size(); ++k) {
      const std::string kp = sp + "[" + std::to_string(k) + "]";
      const json& ranks = steps[st][k];
      if (!ranks.is_array()) fail(kp, "expected an array with one list of sequences per rank");
      sim::MicroBatch mb;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        const std::string rp = kp + "[" + std::to_string(r) + "]";
        if (!ranks[r].is_array()) fail(rp, "expected an array of sequences");
        std::vector<models::Sequence<models::Rational>> seqs;
        for (std::size_t i = 0; i < ranks[r].size(); ++i)
          seqs.push_back(mj::sequence_from_json(s.training.model, ranks[r][i], rp + "[" + std::to_string(i) + "]"));
        mb.rank_sequences.push_back(std::move(seqs));
      }
      plan.micro_batches.push_back(std::move(mb));
    }
    s.steps.push_back(std::move(plan));
  }
  if (j.contains("checkpoint_after_step") && !j.at("checkpoint_after_step").is_null())
    s.checkpoint_after_step = int_of(j.at("checkpoint_after_step"), p + ".checkpoint_after_step");
  s.schedule_seed = mj::u64_of(field(j, p, "schedule_seed"), p + ".schedule_seed");
  named(p, [&] {
    sim::validate(s);
    return 0;
  });
  return s;
}

}  // namespace accumcheck::sim
