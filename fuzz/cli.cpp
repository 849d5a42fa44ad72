// Subcommands: fuzz, replay, list, demo (and explain/export, see reproducer.h).
#include "fuzz/cli.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include "fuzz/campaign.h"
#include "fuzz/demo.h"
#include "fuzz/explain.h"
#include "fuzz/finding.h"
#include "fuzz/reproducer.h"

namespace accumcheck::fuzz {

namespace {

// Durations: "90", "90s", "5m", "1h".
double parse_duration(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("--time '" + text + "' is not a duration (e.g. 30s, 5m, 1h)");
  }
  const std::string unit = text.substr(used);
  if (unit.empty() || unit == "s") return value;
  if (unit == "m") return value * 60;
  if (unit == "h") return value * 3600;
  throw std::invalid_argument("--time '" + text + "' has an unknown unit '" + unit + "' (s, m or h)");
}

std::uint64_t parse_seed(const std::string& text) {
  try {
    std::size_t used = 0;
    const auto v = std::stoull(text, &used, 0);
    if (used != text.size() || text[0] == '-') throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument("--seed '" + text + "' is not a 64-bit unsigned integer");
  }
}

class ProgressPrinter {
 public:
  ProgressPrinter() : terminal_(::isatty(STDERR_FILENO) != 0) {}
  void operator()(const Progress& p) {
    const std::string total = p.trials_total ? fmt::format("/{}", *p.trials_total) : std::string();
    const std::string line = fmt::format("trials {}{}  findings {}  open pairs {}  {:.1f}s", p.trials_done, total,
                                         p.findings, p.open_pairs, p.seconds);
    if (terminal_) {
      std::string bar;
      if (p.trials_total && *p.trials_total > 0) {
        const auto filled = static_cast<int>(30.0 * static_cast<double>(p.trials_done) / static_cast<double>(*p.trials_total));
        bar = "[" + std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(30 - filled), '.') + "] ";
      }
      fmt::print(stderr, "\r{}{}   ", bar, line);
    } else if (p.seconds - last_ >= 5.0 || p.open_pairs == 0) {
      fmt::print(stderr, "{}\n", line);
      last_ = p.seconds;
    }
  }
  void finish() {
    if (terminal_) fmt::print(stderr, "\n");
  }

 private:
  bool terminal_;
  double last_ = -1e9;
};

int run_fuzz(const CampaignConfig& config, const std::string& seed_text, const std::string& report_path, bool quiet) {
  fmt::print("accumcheck fuzz: seed {}\n", seed_text);
  std::fflush(stdout);
  ProgressPrinter printer;
  const CampaignReport report = run_campaign(config, quiet ? std::function<void(const Progress&)>{} : std::function<void(const Progress&)>(std::ref(printer)));
  if (!quiet) printer.finish();
  if (!report_path.empty()) write_json_atomically(report_path, to_json(report));
  for (const auto& p : report.pairs) {
    if (p.finding) {
      fmt::print("FOUND  {}  {}  after {} trials{}\n", p.target, p.property, p.trials, p.from_corpus ? " (corpus)" : "");
      fmt::print("       {}\n", p.finding->verdict.message);
      if (p.finding_path) fmt::print("       replay: accumcheck replay {}\n", p.finding_path->string());
    } else {
      fmt::print("clean  {}  {}  {} trials ({} could not run)\n", p.target, p.property, p.trials, p.cannot_run);
    }
  }
  fmt::print("{} trials in {:.2f}s ({:.0f}/s), {} finding(s)\n", report.trials, report.seconds,
             report.seconds > 0 ? static_cast<double>(report.trials) / report.seconds : 0.0, report.findings());
  return report.findings() > 0 ? kExitFindings : kExitClean;
}

int run_replay(const std::string& file) {
  const Finding f = finding_from_json(read_json_file(file));
  const auto target = sim::make_target(f.target);
  const auto* property = properties::find_property(f.property);
  if (!property) throw std::invalid_argument(file + ": unknown property '" + f.property + "'");
  const properties::Verdict now = check_pair(*target, *property, f.scenario, f.scalar);
  const bool same = now.outcome == f.verdict.outcome && now.message == f.verdict.message &&
                    now.mismatches.size() == f.verdict.mismatches.size() &&
                    std::equal(now.mismatches.begin(), now.mismatches.end(), f.verdict.mismatches.begin(),
                               [](const properties::Mismatch& a, const properties::Mismatch& b) {
                                 return a.where == b.where && a.expected == b.expected && a.actual == b.actual;
                               });
  fmt::print("replay {}: {} on {}\n", file, f.property, f.target);
  fmt::print("  now: {} — {}\n", properties::to_string(now.outcome), now.message);
  for (const auto& m : now.mismatches) fmt::print("    {}: expected {} actual {}\n", m.where, m.expected.to_string(), m.actual.to_string());
  if (now.outcome == properties::Outcome::fail) {
    fmt::print("  {}\n", same ? "reproduced bit for bit" : "still fails, but differently from the recorded verdict");
    return kExitFindings;
  }
  fmt::print("  the recorded failure no longer reproduces\n");
  return kExitClean;
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"accumcheck: checks that accumulated gradient updates equal full-batch updates"};
  app.require_subcommand(1);

  auto* demo = app.add_subcommand("demo", "Campaigns against every built-in buggy target and its fixed counterpart");

  auto* fuzz = app.add_subcommand("fuzz", "Run a seeded campaign against one or more targets");
  std::vector<std::string> targets, props;
  std::string seed_text = "0", time_text, report_path, findings_dir = "findings", corpus_dir, state_path, scalar_text = "fast-rational",
              model_text;
  std::uint64_t trials = 0;
  int jobs = 1;
  bool quiet = false, ordinary = false;
  fuzz->add_option("--target", targets, "Target name (repeatable); accumcheck list targets")->required();
  fuzz->add_option("--property", props, "Property name (repeatable; default all); accumcheck list properties");
  fuzz->add_option("--seed", seed_text, "Root seed of the campaign (printed first)");
  auto* trials_opt = fuzz->add_option("--trials", trials, "Number of trials");
  auto* time_opt = fuzz->add_option("--time", time_text, "Time budget: 30s, 5m, 1h");
  fuzz->add_option("--jobs", jobs, "Worker threads (results do not depend on it)")->check(CLI::Range(1, 256));
  fuzz->add_option("--report", report_path, "Write the JSON campaign report here");
  fuzz->add_option("--findings", findings_dir, "Folder for finding files");
  corpus_dir = ACCUMCHECK_DEFAULT_CORPUS;
  bool no_corpus = false;
  fuzz->add_option("--corpus", corpus_dir, "Folder of past findings to replay first (default: the built-in regression corpus)");
  fuzz->add_flag("--no-corpus", no_corpus, "Do not replay any corpus");
  fuzz->add_option("--state", state_path, "Campaign state file: resume from it if it exists");
  fuzz->add_option("--scalar", scalar_text, "rational or fast-rational");
  fuzz->add_option("--model", model_text, "Only this model kind: linear, mlp, tied_embedding");
  fuzz->add_flag("--ordinary", ordinary, "Ordinary loops only: no boundary on every backward, no unused parameters");
  fuzz->add_flag("--quiet", quiet, "No progress output");
  std::string offload_text = "any";
  fuzz->add_option("--offload", offload_text, "Generated scenarios with optimizer offload: on, off or any")
      ->check(CLI::IsMember({"on", "off", "any"}));

  auto* replay = app.add_subcommand("replay", "Re-run a finding file and check it reproduces bit for bit");
  std::string replay_file;
  replay->add_option("FILE", replay_file, "Finding file")->required();

  auto* explain_cmd = app.add_subcommand("explain", "Tell a finding's story in words");
  std::string explain_file;
  explain_cmd->add_option("FILE", explain_file, "Finding file")->required();

  auto* export_cmd = app.add_subcommand("export", "Export a finding as a reproducer: json, gtest, pytorch or markdown");
  std::string export_file, export_format_text = "markdown", export_out;
  export_cmd->add_option("FILE", export_file, "Finding file")->required();
  export_cmd->add_option("--format", export_format_text, "json, gtest, pytorch or markdown");
  export_cmd->add_option("-o,--output", export_out, "Write here instead of standard output");

  auto* list = app.add_subcommand("list", "List targets or properties");
  std::string what;
  list->add_option("WHAT", what, "targets or properties")->required()->check(CLI::IsMember({"targets", "properties"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitClean : kExitUsage;
  }
  try {
    if (demo->parsed()) return run_demo(std::cout);
    if (list->parsed()) {
      if (what == "targets") {
        for (const auto& name : sim::builtin_target_names()) fmt::print("{:<52} {}\n", name, sim::make_target(name)->description());
        fmt::print("\nAny deepspeed@X.Y.Z is accepted; compose as [preset+]framework+engine (docs/targets.md).\n");
      } else {
        for (const auto& p : properties::all_properties()) fmt::print("{:<56} {}\n", p->name(), p->description());
      }
      return kExitClean;
    }
    if (replay->parsed()) return run_replay(replay_file);
    if (explain_cmd->parsed()) {
      fmt::print("{}", explain(finding_from_json(read_json_file(explain_file))));
      return kExitClean;
    }
    if (export_cmd->parsed()) {
      const ExportFormat format = parse_export_format(export_format_text);
      const std::string text = export_finding(finding_from_json(read_json_file(export_file)), format);
      if (export_out.empty()) {
        fmt::print("{}", text);
      } else {
        std::ofstream out(export_out);
        if (!(out << text)) throw std::runtime_error("cannot write " + export_out);
        fmt::print(stderr, "wrote {} ({})\n", export_out, to_string(format));
      }
      return kExitClean;
    }
    if (fuzz->parsed()) {
      CampaignConfig config;
      config.targets = targets;
      for (const auto& t : targets) (void)sim::make_target(t);  // unknown names fail here, with the part named
      config.properties = props;
      config.seed = parse_seed(seed_text);
      if (trials_opt->count() > 0) config.trials = trials;
      if (time_opt->count() > 0) config.seconds = parse_duration(time_text);
      if (!config.trials && !config.seconds) throw std::invalid_argument("no budget: pass --trials N or --time DURATION");
      config.jobs = jobs;
      config.scalar = sim::parse_scalar_kind(scalar_text);
      if (config.scalar != sim::ScalarKind::rational && config.scalar != sim::ScalarKind::fast_rational)
        throw std::invalid_argument("--scalar " + scalar_text + ": the properties compare exactly and need rational or fast-rational");
      if (!model_text.empty()) config.generator.model = models::parse_model_kind(model_text);
      config.generator.ordinary_only = ordinary;
      if (offload_text != "any") config.generator.offload = offload_text == "on";
      if (!findings_dir.empty()) config.findings_dir = findings_dir;
      if (!corpus_dir.empty() && !no_corpus) config.corpus_dir = corpus_dir;
      if (!state_path.empty()) config.state_path = state_path;
      return run_fuzz(config, seed_text, report_path, quiet);
    }
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "accumcheck: error: {}\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "accumcheck: error: {}\n", e.what());
    return kExitUsage;
  }
  return kExitUsage;
}

}  // namespace accumcheck::fuzz
