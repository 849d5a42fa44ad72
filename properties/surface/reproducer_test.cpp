// surface/reproducer.h: each export of the catalogue finding carries the scenario and the numbers (37 versus
// 101/3); the PyTorch script runs with /usr/bin/python3 when torch imports and agrees with accumcheck's exact
// oracle. (The GoogleTest export is compiled and run by properties/fuzz/CMakeLists.txt.)
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include <unistd.h>

#include <gtest/gtest.h>

#include "fuzz/generator.h"
#include "surface/reproducer.h"
#include "sim/json/scenario_json.h"
#include "properties/comparison.h"
#include "properties/surface/catalogue_finding.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives
namespace {

namespace fs = std::filesystem;
using properties::catalogue_finding;

constexpr const char* kProperty1 = "accumulated_update_equals_full_batch_update";
constexpr const char* kProperty5 = "applied_gradient_holds_each_micro_batch_once";
// The PyTorch environment scripts/adapters-env.sh builds (scripts/test.sh does), else Debian's python3-torch.
const std::string kPython = fs::exists(ACCUMCHECK_TORCH_PYTHON) ? ACCUMCHECK_TORCH_PYTHON : "/usr/bin/python3";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct Process {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Process run_shell(const std::string& command) {
  Process p;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return p;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) p.output += buffer.data();
  const int status = ::pclose(pipe);
  p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return p;
}

bool torch_available() {
  static const bool available = fs::exists(kPython) && run_shell(kPython + " -c 'import torch'").exit_code == 0;
  return available;
}

// Writes the PyTorch export to a temporary file and runs it.
Process run_pytorch_export(const Finding& f, const std::string& name) {
  const fs::path script = fs::temp_directory_path() / ("accumcheck-" + name + "-" + std::to_string(::getpid()) + ".py");
  {
    std::ofstream out(script);
    out << export_pytorch(f);
  }
  Process p = run_shell(std::string(kPython) + " " + script.string());
  fs::remove(script);
  return p;
}

// The float printed after `label` on the line that starts with `where`.
std::optional<double> printed_value(const std::string& output, const std::string& where, const std::string& label) {
  const std::regex pattern("\n  " + std::regex_replace(where, std::regex(R"([\[\]\.\/])"), R"(\$&)") + ": " + label +
                           " ([-+0-9.eE]+)");
  std::smatch m;
  if (!std::regex_search(output, m, pattern)) return std::nullopt;
  return std::stod(m[1].str());
}

TEST(ExportFormat, parses_every_name_and_names_the_accepted_ones_otherwise) {
  for (auto f : {ExportFormat::json, ExportFormat::gtest, ExportFormat::pytorch, ExportFormat::markdown})
    EXPECT_EQ(parse_export_format(to_string(f)), f);
  try {
    parse_export_format("yaml");
    FAIL() << "yaml parsed";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "'yaml'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "json, gtest, pytorch or markdown")) << e.what();
  }
}

TEST(ExportJson, is_the_finding_file_and_reads_back) {
  const Finding f = catalogue_finding(kProperty1);
  const std::string text = export_json(f);
  EXPECT_EQ(text, to_json(f).dump(2));
  EXPECT_EQ(export_finding(f, ExportFormat::json), text);
  EXPECT_EQ(to_json(finding_from_json(nlohmann::json::parse(text))), to_json(f));
}

TEST(ExportGtest, embeds_the_scenario_and_expects_the_property_to_hold) {
  const Finding f = catalogue_finding(kProperty1);
  const std::string text = export_gtest(f);
  EXPECT_TRUE(contains(text, "constexpr const char* kScenarioJson = R\"accumcheck(\n{\n")) << text;
  EXPECT_TRUE(contains(text, "\"targets\":[[\"-100\"]]")) << text;
  EXPECT_TRUE(contains(text, "sim::scenario_from_json(nlohmann::json::parse(kScenarioJson))")) << text;
  EXPECT_TRUE(contains(text, "sim::make_target(\"deepspeed@0.16.0\")")) << text;
  EXPECT_TRUE(contains(text, "properties::find_property(\"accumulated_update_equals_full_batch_update\")")) << text;
  EXPECT_TRUE(contains(text, "fuzz::check_pair(")) << text;
  EXPECT_TRUE(contains(text, "EXPECT_EQ(std::string(properties::to_string(verdict.outcome)), \"pass\")")) << text;
  EXPECT_TRUE(contains(text, "FAILS while the bug is present and PASSES once the target is")) << text;
  EXPECT_TRUE(contains(text, "//   target_link_libraries(finding_test PRIVATE accumcheck::fuzz GTest::gtest_main)")) << text;
  EXPECT_TRUE(contains(text, "//   set(CMAKE_CXX_STANDARD 20)")) << text;
  EXPECT_TRUE(contains(text, "//   find_package(GTest REQUIRED)")) << text;
  EXPECT_TRUE(contains(text, "//   step 0 / gradient / weight[0,0]: expected 37 (37), actual 101/3")) << text;
  EXPECT_TRUE(contains(text, "TEST(AccumcheckFinding, accumulated_update_equals_full_batch_update_on_deepspeed_0_16_0_trial_17)"))
      << text;
  // The embedded text is the scenario, exactly.
  const std::size_t begin = text.find("R\"accumcheck(") + 13, end = text.find(")accumcheck\"");
  EXPECT_EQ(to_json(sim::scenario_from_json(nlohmann::json::parse(text.substr(begin, end - begin)))), to_json(f.scenario));
}

TEST(ExportMarkdown, has_the_configuration_the_numbers_and_the_way_to_reproduce) {
  const std::string text = export_markdown(catalogue_finding(kProperty1));
  EXPECT_TRUE(text.starts_with("# `deepspeed@0.16.0` fails `accumulated_update_equals_full_batch_update`")) << text;
  EXPECT_TRUE(contains(text, "| step 0 / gradient / weight[0,0] | 37 | 101/3 | 37 | 33.666666666666664 | -10/3 |")) << text;
  EXPECT_TRUE(contains(text, "| step 1 / gradient / weight[0,0] | 37000 | 101000/3 |")) << text;
  EXPECT_TRUE(contains(text, "ZeRO-2 offload drops micro-batches 1..G-2 when G >= 3 (PR #6550)")) << text;
  EXPECT_TRUE(contains(text, "| accumulation steps (G) | 3 |")) << text;
  EXPECT_TRUE(contains(text, "| ZeRO stage | 2 |")) << text;
  EXPECT_TRUE(contains(text, "| optimizer offload | on |")) << text;
  EXPECT_TRUE(contains(text, "| 0 | 1 | 0 | 0 | x=(1) y=(-10) |")) << text;
  const std::string file = finding_file_name(catalogue_finding(kProperty1));
  const std::string stem = file.substr(0, file.size() - 5);
  EXPECT_TRUE(contains(text, "accumcheck replay " + file)) << text;
  EXPECT_TRUE(contains(text, "python3 " + stem + ".py")) << text;
  EXPECT_TRUE(contains(text, "All values are exact rationals computed by accumcheck's deterministic simulation")) << text;
  EXPECT_TRUE(contains(text, "resembles catalogue section 1")) << text;

  const std::string membership = export_markdown(catalogue_finding(kProperty5));
  EXPECT_TRUE(contains(membership, "## Membership")) << membership;
  EXPECT_TRUE(contains(membership, "Summary: step 0: micro-batch 1 (rank 0) of step 0 dropped")) << membership;
  EXPECT_TRUE(contains(membership, "| 0 | 1 | 0 | 0 | 0 | 1 | dropped |")) << membership;
}

TEST(ExportPytorch, names_what_it_cannot_do_and_embeds_exact_values) {
  const std::string text = export_pytorch(catalogue_finding(kProperty1));
  EXPECT_TRUE(text.starts_with("#!/usr/bin/python3\n")) << text;
  EXPECT_TRUE(contains(text, "it does not run DeepSpeed, or any other framework")) << text;
  EXPECT_TRUE(contains(text, "\"framework_layer\": \"reference\"")) << text;
  EXPECT_TRUE(contains(text, "\"missing_gradient_is_zero\": true")) << text;
  EXPECT_TRUE(contains(text, "\"-100\"")) << text;  // the target of micro-batch 2, exact
  // The embedded JSON holds no quote that could end the Python raw string literal early.
  const std::size_t begin = text.find("json.loads(r'''") + 15, end = text.find("''')", begin);
  ASSERT_NE(end, std::string::npos);
  EXPECT_FALSE(contains(text.substr(begin, end - begin), "'"));
}

TEST(ExportPytorch, runs_and_prints_37_expected_next_to_the_recorded_101_thirds) {
  if (!torch_available()) GTEST_SKIP() << kPython << " cannot import torch";
  const Process p = run_pytorch_export(catalogue_finding(kProperty1), "catalogue");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto expected = printed_value(p.output, "step 0 / gradient / weight[0,0]", "full-batch expected");
  ASSERT_TRUE(expected) << p.output;
  EXPECT_NEAR(*expected, 37.0, 1e-12) << p.output;  // 1/3 rounds to a double: 37 to float precision
  const auto plain = printed_value(p.output, "step 0 / gradient / weight[0,0]", "full-batch expected [^ ]+   plain loop");
  ASSERT_TRUE(plain) << p.output;
  EXPECT_NEAR(*plain, 37.0, 1e-12) << p.output;
  const auto expected_1 = printed_value(p.output, "step 1 / gradient / weight[0,0]", "full-batch expected");
  ASSERT_TRUE(expected_1) << p.output;
  EXPECT_NEAR(*expected_1, 37000.0, 1e-9) << p.output;
  EXPECT_TRUE(contains(p.output, "step 0 / gradient / bias: frozen (requires_grad=False), no gradient")) << p.output;
  EXPECT_TRUE(contains(p.output, "step 0 / gradient / weight[0,0]: expected 37 (37.0)   "
                                 "what deepspeed@0.16.0 produced in accumcheck: 101/3 (33.666666666666664)"))
      << p.output;
  EXPECT_TRUE(contains(p.output, "agrees with accumcheck's exact expected value")) << p.output;
  EXPECT_FALSE(contains(p.output, "DISAGREES")) << p.output;
}

TEST(ExportPytorch, runs_for_the_membership_property_and_prints_the_summary) {
  if (!torch_available()) GTEST_SKIP() << kPython << " cannot import torch";
  const Process p = run_pytorch_export(catalogue_finding(kProperty5), "membership");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_TRUE(contains(p.output, "membership: step 0: micro-batch 1 (rank 0) of step 0 dropped")) << p.output;
}

// Generated scenarios that cover every model kind and the features the script must rebuild (routed experts,
// masks, frozen parameters, several ranks and steps, uneven windows, Adam and AdamW, clipping): every full-batch
// expected value the script prints, in every step, equals accumcheck's exact oracle to float precision, and its
// plain loop with the framework layer's coefficients equals what the target applied, where the framework layer is
// the only fault (openrlhf@0.10.2 over the reference engine).
TEST(ExportPytorch, matches_the_exact_oracle_and_the_target_on_generated_scenarios_of_every_model_kind) {
  if (!torch_available()) GTEST_SKIP() << kPython << " cannot import torch";
  const auto target = sim::make_target("openrlhf@0.10.2+reference");
  const properties::Property* property = properties::find_property(kProperty1);
  using Check = std::function<bool(const sim::Scenario&)>;
  auto adam = [](const sim::Scenario& s) { return s.training.optimizer.kind != models::OptimizerKind::sgd; };
  auto masked = [](const sim::Scenario& s) {
    for (const auto& step : s.steps)
      for (const auto& mb : step.micro_batches)
        for (const auto& rank : mb.rank_sequences)
          for (const auto& seq : rank)
            if (seq.valid_token_count() < seq.token_count()) return true;
    return false;
  };
  const std::vector<std::pair<models::ModelKind, Check>> slots = {
      {models::ModelKind::linear, [](const sim::Scenario& s) { return s.training.model.expert_count > 1 && s.steps.size() >= 2; }},
      {models::ModelKind::linear, [&](const sim::Scenario& s) { return adam(s) && s.training.max_grad_norm.has_value(); }},
      {models::ModelKind::mlp, [](const sim::Scenario& s) { return s.engine.rank_count >= 2 && s.steps.size() >= 2; }},
      {models::ModelKind::mlp, [&](const sim::Scenario& s) { return adam(s) && masked(s); }},
      {models::ModelKind::tied_embedding, [&](const sim::Scenario& s) { return s.steps.size() >= 2 && masked(s); }},
      {models::ModelKind::tied_embedding, [&](const sim::Scenario& s) { return adam(s) && s.training.max_grad_norm.has_value(); }},
      {models::ModelKind::linear, [](const sim::Scenario& s) {
         if (s.engine.boundary != sim::BoundaryMode::manual) return false;
         for (const auto& step : s.steps)
           if (static_cast<int>(step.micro_batches.size()) != s.engine.accumulation_steps) return true;
         return false;
       }},
      {models::ModelKind::mlp, [](const sim::Scenario& s) { return !s.training.model.frozen.empty() && s.steps.size() >= 2; }},
  };
  for (std::size_t slot = 0; slot < slots.size(); ++slot) {
    std::optional<sim::Scenario> scenario;
    std::uint64_t seed = 1;
    for (; seed < 5000 && !scenario; ++seed) {
      sim::Scenario s = generate_scenario(seed, GeneratorOptions{.model = slots[slot].first});
      if (s.engine.precision != sim::Precision::full || s.engine.loss_scaler || !slots[slot].second(s)) continue;
      scenario = std::move(s);
    }
    ASSERT_TRUE(scenario) << "no generated scenario for slot " << slot;
    Finding f;
    f.target = target->name();
    f.property = kProperty1;
    f.trial = static_cast<std::int64_t>(seed);
    f.scenario = *scenario;
    ASSERT_TRUE(fit_to_target(f.scenario, *target));  // as campaigns do: the mode the framework implements
    f.verdict = check_pair(*target, *property, f.scenario, sim::ScalarKind::fast_rational);
    const Process p = run_pytorch_export(f, "slot" + std::to_string(slot));
    ASSERT_EQ(p.exit_code, 0) << p.output;
    EXPECT_FALSE(contains(p.output, "DISAGREES")) << p.output;

    const auto oracle = properties::run_oracle_exact(properties::oracle_training_for(*target, f.scenario), f.scenario);
    const sim::RunResult run = target->run(f.scenario, sim::RunOptions{.scalar = sim::ScalarKind::fast_rational});
    const auto names = models::parameter_names(f.scenario.training.model);
    const std::regex line(R"(\n  step (\d+) / gradient / ([^\[\n]+)\[(\d+),(\d+)\]: full-batch expected (\S+)   plain loop (\S+))");
    int values = 0;
    auto check = [&](const std::string& printed, const models::Gradient<models::Rational>& exact, std::size_t p, int r, int c,
                     const std::string& what) {
      if (!exact.present[p]) {
        EXPECT_EQ(printed, "None") << what;
        return;
      }
      ASSERT_NE(printed, "None") << what;
      const double want = exact.tensors[p](r, c).to_double();
      EXPECT_NEAR(std::stod(printed), want, 1e-9 * std::max(1.0, std::abs(want))) << what;
    };
    for (auto it = std::sregex_iterator(p.output.begin(), p.output.end(), line); it != std::sregex_iterator(); ++it) {
      const auto& m = *it;
      const auto step = static_cast<std::size_t>(std::stoi(m[1].str()));
      const auto param = static_cast<std::size_t>(std::find(names.begin(), names.end(), m[2].str()) - names.begin());
      ASSERT_LT(param, names.size()) << m[0].str();
      ASSERT_LT(step, oracle.steps.size()) << m[0].str();
      const int r = std::stoi(m[3].str()), c = std::stoi(m[4].str());
      const std::string what = "slot " + std::to_string(slot) + " seed " + std::to_string(seed) + ":" + m[0].str();
      check(m[5].str(), oracle.steps[step].applied_gradient, param, r, c, what + " (expected vs oracle)");
      if (run.steps[step].applied) check(m[6].str(), run.steps[step].gradient, param, r, c, what + " (plain loop vs target)");
      ++values;
    }
    EXPECT_GT(values, 0) << p.output;
  }
}

// Every finding of the regression corpus exports in every format; its PyTorch script runs, agrees with the exact
// oracle where the finding recorded one, and, where the engine is the correct reference engine (the framework
// layer the only fault), its plain loop reproduces the recorded actual values.
TEST(Export, every_corpus_finding_exports_and_its_pytorch_script_agrees) {
  const fs::path corpus = ACCUMCHECK_CORPUS_DIR;
  if (!fs::exists(corpus)) GTEST_SKIP() << "no corpus at " << corpus;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(corpus))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  for (const auto& file : files) {
    const Finding f = finding_from_json(read_json_file(file));
    for (auto format : {ExportFormat::json, ExportFormat::gtest, ExportFormat::pytorch, ExportFormat::markdown})
      EXPECT_EQ(export_finding(f, format), export_finding(f, format)) << file << " " << to_string(format);
    if (!torch_available() || f.property != kProperty1) continue;
    const Process p = run_pytorch_export(f, "corpus");
    ASSERT_EQ(p.exit_code, 0) << file << "\n" << p.output;
    EXPECT_TRUE(contains(p.output, "agrees with accumcheck's exact expected value")) << file << "\n" << p.output;
    EXPECT_FALSE(contains(p.output, "DISAGREES")) << file << "\n" << p.output;
    if (!f.target.ends_with("+reference")) continue;
    for (const auto& m : f.verdict.mismatches) {
      const auto plain = printed_value(p.output, m.where, "full-batch expected [^ ]+   plain loop");
      ASSERT_TRUE(plain) << file << " " << m.where << "\n" << p.output;
      EXPECT_NEAR(*plain, m.actual.to_double(), 1e-9 * std::max(1.0, std::abs(m.actual.to_double()))) << file << " " << m.where;
    }
  }
}

}  // namespace
}  // namespace accumcheck::surface
