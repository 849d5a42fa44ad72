// surface/reproducer.h, the deepspeed format and the markdown of real-DeepSpeed findings: what the script embeds
// (the pinned config, the engine calls, the exact expected values), which findings it refuses and why, and what
// an upstream issue gets. The scripts themselves run against installed releases in deepspeed_export_test.sh.
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "surface/reproducer.h"
#include "properties/surface/catalogue_finding.h"
#include "sim/json/scenario_json.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives
namespace {

using nlohmann::json;
using properties::catalogue_finding;

constexpr const char* kProperty1 = "accumulated_update_equals_full_batch_update";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Finding checked_in(const std::string& name) {
  const std::string path = std::string(ACCUMCHECK_DEEPSPEED_FINDINGS_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return finding_from_json(json::parse(text.str()));
}

// The FINDING JSON a deepspeed script embeds.
json embedded(const std::string& script) {
  const std::string open = "FINDING = json.loads(r'''";
  const std::size_t begin = script.find(open);
  if (begin == std::string::npos) throw std::runtime_error("no embedded FINDING");
  const std::size_t end = script.find("''')", begin);
  return json::parse(script.substr(begin + open.size(), end - begin - open.size()));
}

// The message std::invalid_argument carries when `f` is exported as deepspeed; empty when it exports.
std::string refusal(const Finding& f) {
  try {
    export_deepspeed(f);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

TEST(ExportDeepSpeed, is_a_format_with_its_own_suffix) {
  EXPECT_EQ(parse_export_format("deepspeed"), ExportFormat::deepspeed);
  EXPECT_EQ(to_string(ExportFormat::deepspeed), "deepspeed");
  EXPECT_EQ(file_suffix(ExportFormat::deepspeed), "_deepspeed.py");
  const Finding f = catalogue_finding(kProperty1);
  EXPECT_EQ(export_finding(f, ExportFormat::deepspeed), export_deepspeed(f));
}

TEST(ExportDeepSpeed, embeds_the_pinned_config_the_engine_calls_and_the_exact_expected_values) {
  const Finding f = checked_in("drop_0.16.4.json");
  const std::string script = export_deepspeed(f);
  EXPECT_TRUE(script.starts_with("#!/usr/bin/env python3\n")) << script;
  EXPECT_TRUE(contains(script, "DeepSpeed 0.16.4, ZeRO-2 with CPU offload, gradient_accumulation_steps = 3")) << script;
  EXPECT_TRUE(contains(script, "PYTHONPATH=.venv/deepspeed/0.16.4:.venv/deepspeed/_deps .venv/torch/bin/python")) << script;
  EXPECT_TRUE(contains(script, "os.environ[\"DS_ACCELERATOR\"] = \"cpu\"")) << script;
  EXPECT_TRUE(contains(script, "sys.modules[\"triton\"] = None")) << script;
  EXPECT_TRUE(contains(script, "os.environ[\"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD\"] = \"1\"")) << script;
  EXPECT_TRUE(contains(script, "__compatible_ops__[SHM_COMM_OP] = False")) << script;
  EXPECT_TRUE(contains(script, "register_step_pre_hook")) << script;
  EXPECT_TRUE(contains(script, "def window_global_coefficients(sequences):")) << script;  // the shared model code

  const json data = embedded(script);
  const json& config = data.at("deepspeed_config");
  EXPECT_EQ(config.at("gradient_accumulation_steps"), 3);
  EXPECT_EQ(config.at("train_batch_size"), 3);
  EXPECT_EQ(config.at("gradient_clipping"), 0.0);
  EXPECT_FALSE(config.contains("fp16"));
  EXPECT_FALSE(config.contains("bf16"));
  EXPECT_FALSE(config.contains("sparse_gradients"));  // 0.19.8 rejects the key
  const json& zero = config.at("zero_optimization");
  EXPECT_EQ(zero.at("stage"), 2);
  EXPECT_EQ(zero.at("reduce_bucket_size"), 1024);
  EXPECT_EQ(zero.at("allgather_bucket_size"), 1024);
  EXPECT_EQ(zero.at("offload_optimizer"),
            (json{{"device", "cpu"}, {"pin_memory", false}, {"buffer_count", 4}, {"fast_init", false}, {"ratio", 1.0}}));
  EXPECT_FALSE(zero.contains("compute_grad_norm"));  // added by the script where the release knows it
  EXPECT_EQ(data.at("calls"), json::parse(R"([{"call":"backward","micro_batch":0,"step":0},{"call":"step"},
      {"call":"backward","micro_batch":1,"step":0},{"call":"step"},{"call":"backward","micro_batch":2,"step":0},
      {"call":"step"},{"call":"end_window","step":0}])"));
  EXPECT_EQ(data.at("recorded_expected"), json::parse(R"([{"where":"step 0 / gradient / weight[0,0]","expected":"-1"}])"));
  EXPECT_EQ(data.at("missing_gradient_is_zero"), true);
  EXPECT_EQ(data.at("release"), "0.16.4");
  EXPECT_EQ(data.at("release_is_real"), true);
  EXPECT_EQ(data.at("scenario"), sim::to_json(f.scenario));
}

TEST(ExportDeepSpeed, follows_manual_boundaries_checkpoints_and_two_ranks) {
  Finding f = checked_in("drop_two_ranks_0.16.4.json");
  f.scenario.engine.boundary = sim::BoundaryMode::manual;
  f.scenario.engine.step_after_every_backward = false;
  f.scenario.steps.push_back(f.scenario.steps.front());
  f.scenario.checkpoint_after_step = 0;
  f.scenario.training.max_grad_norm = models::Rational(1, 2);
  const std::string script = export_deepspeed(f);
  EXPECT_TRUE(contains(script, "in 2 processes (world size 2")) << script;
  const json data = embedded(script);
  EXPECT_EQ(data.at("deepspeed_config").at("train_batch_size"), 6);
  EXPECT_EQ(data.at("deepspeed_config").at("gradient_clipping"), 0.5);
  const json& calls = data.at("calls");
  ASSERT_EQ(calls.size(), 2 * 8 + 1);  // per window: 3 x (set_boundary, backward), step, end_window; one checkpoint
  EXPECT_EQ(calls[0], (json{{"call", "set_boundary"}, {"value", false}}));
  EXPECT_EQ(calls[4], (json{{"call", "set_boundary"}, {"value", true}}));
  EXPECT_EQ(calls[6], (json{{"call", "step"}}));
  EXPECT_EQ(calls[8], (json{{"call", "checkpoint"}, {"step", 0}}));
}

TEST(ExportDeepSpeed, takes_simulated_deepspeed_targets_and_refuses_every_other_target) {
  const Finding f = catalogue_finding(kProperty1);  // deepspeed@0.16.0, accumcheck's model
  const std::string script = export_deepspeed(f);
  EXPECT_TRUE(contains(script, "DeepSpeed 0.16.0 (accumcheck's model of it)")) << script;
  EXPECT_EQ(embedded(script).at("recorded_expected")[0].at("expected"), "37");

  Finding other = f;
  other.target = "openrlhf@0.10.2+deepspeed@0.18.9";
  const std::string why = refusal(other);
  EXPECT_TRUE(contains(why, "cannot export a DeepSpeed script for target 'openrlhf@0.10.2+deepspeed@0.18.9'")) << why;
  EXPECT_TRUE(contains(why, "use --format pytorch")) << why;
  other.target = "adapter:torch-loop";
  EXPECT_FALSE(refusal(other).empty());
  other.target = "adapter:deepspeed-0.16.4@fp32";
  EXPECT_EQ(refusal(other), "");
}

TEST(ExportDeepSpeed, refuses_scenarios_deepspeed_cannot_express_and_names_the_reason) {
  const Finding base = checked_in("drop_0.16.4.json");
  struct Case {
    const char* reason;
    std::function<void(sim::Scenario&)> edit;
  };
  const std::vector<Case> cases = {
      {"optimizer offload with ZeRO stage 0: DeepSpeed offloads the optimizer of ZeRO stages 1 and 2 only",
       [](sim::Scenario& s) { s.engine.zero_stage = 0; }},
      {"ZeRO stage 3: it partitions the parameters", [](sim::Scenario& s) { s.engine.zero_stage = 3; }},
      {"precision bf16: the script builds an fp32 DeepSpeed config", [](sim::Scenario& s) { s.engine.precision = sim::Precision::bf16; }},
      {"every parameter is frozen", [](sim::Scenario& s) { s.training.model.frozen = {"weight", "bias"}; }},
      {"9 ranks: the script runs world sizes 1 to 8", [](sim::Scenario& s) { s.engine.rank_count = 9; }},
  };
  for (const auto& c : cases) {
    Finding f = base;
    c.edit(f.scenario);
    const std::string why = refusal(f);
    EXPECT_TRUE(why.starts_with("cannot export a DeepSpeed script for this finding: ")) << why;
    EXPECT_TRUE(contains(why, c.reason)) << "want '" << c.reason << "', got: " << why;
  }
  // Routed experts: ZeRO-0 steps torch.optim directly; a micro-batch that reaches only a frozen expert cannot run.
  Finding experts = base;
  sim::Scenario& s = experts.scenario;
  s.training.model.expert_count = 2;
  s.training.model.frozen = {"expert1.weight", "expert1.bias"};
  s.initial_parameters.tensors.resize(4, s.initial_parameters.tensors.front());
  for (auto& step : s.steps)
    for (auto& mb : step.micro_batches)
      for (auto& rank : mb.rank_sequences)
        for (auto& seq : rank) seq.expert_index.assign(seq.token_count(), 0);
  EXPECT_EQ(refusal(experts), "");
  s.steps[0].micro_batches[1].rank_sequences[0][0].expert_index.assign(1, 1);
  EXPECT_TRUE(contains(refusal(experts), "micro-batch 1 of step 0 on rank 0 reaches no trainable parameter")) << refusal(experts);
  s.engine.zero_stage = 0;
  s.engine.offload = false;
  EXPECT_TRUE(contains(refusal(experts), "routed experts with ZeRO stage 0")) << refusal(experts);
}

TEST(ExportMarkdown, of_a_real_deepspeed_finding_has_what_an_upstream_issue_needs) {
  const Finding f = checked_in("drop_0.16.4.json");
  const std::string text = export_markdown(f);
  EXPECT_TRUE(text.starts_with("# DeepSpeed 0.16.4, ZeRO-2 with CPU offload, gradient_accumulation_steps = 3, "
                               "engine.step() after every backward: the optimizer steps a gradient that differs from "
                               "the full-batch gradient\n"))
      << text;
  EXPECT_TRUE(contains(text, "`step 0 / gradient / weight[0,0]` should be -1 and is 0.")) << text;
  EXPECT_TRUE(contains(text, "resembles catalogue section 1")) << text;
  EXPECT_TRUE(contains(text, "- DeepSpeed 0.16.4, the PyPI release, unmodified (`pip install deepspeed==0.16.4`")) << text;
  EXPECT_TRUE(contains(text, "- torch 2.6.0")) << text;
  EXPECT_TRUE(contains(text, "## DeepSpeed config\n\n```json\n{\n")) << text;
  EXPECT_TRUE(contains(text, "    \"offload_optimizer\": {\"buffer_count\":4,\"device\":\"cpu\",\"fast_init\":false,\"pin_memory\":false,\"ratio\":1.0},"))
      << text;
  EXPECT_TRUE(contains(text, "| step 0 / gradient / weight[0,0] | -1 (-1) | 0 (0) | 1 | 0 (exact here) |")) << text;
  EXPECT_TRUE(contains(text, "        engine.backward(loss)\n        engine.step()\n")) << text;
  const std::string file = finding_file_name(f);
  EXPECT_TRUE(file.starts_with("adapter_deepspeed-0.16.4--accumulated_update_equals_full_batch_update--s")) << file;
  EXPECT_TRUE(contains(text, "PYTHONPATH=.venv/deepspeed/0.16.4:.venv/deepspeed/_deps .venv/torch/bin/python " +
                                 file.substr(0, file.size() - 5) + "_deepspeed.py"))
      << text;
  // The script inline, exactly as --format deepspeed writes it.
  EXPECT_TRUE(contains(text, "```python\n" + export_deepspeed(f) + "```\n")) << text;
  EXPECT_TRUE(contains(text, "| 0.15.1 | predicted: passes |")) << text;
  EXPECT_TRUE(contains(text, "| 0.16.4 | **fails** (measured: this finding); predicted: fails |")) << text;
  EXPECT_TRUE(contains(text, "Predicted to pass: 0.15.1, 0.19.0, 0.19.8.")) << text;
  // Not the simulation's wording.
  EXPECT_FALSE(contains(text, "accumcheck's behavioural model of this stack, not the software itself")) << text;

  const std::string boundary = export_markdown(checked_in("boundary_every_backward_0.19.8.json"));
  EXPECT_TRUE(contains(boundary, "ZeRO-1 without offload, gradient_accumulation_steps = 1, one engine.step() per window of 2 backwards")) << boundary;
  EXPECT_TRUE(contains(boundary, "    engine.step()\n```")) << boundary;
  EXPECT_TRUE(contains(boundary, "Predicted to pass: 0.15.1, 0.16.4.")) << boundary;
}

TEST(ExportMarkdown, of_a_simulated_deepspeed_finding_keeps_the_simulation_form) {
  const std::string text = export_markdown(catalogue_finding(kProperty1));
  EXPECT_TRUE(text.starts_with("# `deepspeed@0.16.0` fails `accumulated_update_equals_full_batch_update`")) << text;
  EXPECT_FALSE(contains(text, "## DeepSpeed config")) << text;
}

}  // namespace
}  // namespace accumcheck::surface
