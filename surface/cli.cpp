// Subcommands: fuzz, replay, list, demo (and explain/export, see reproducer.h).
#include "surface/cli.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "fuzz/build_info.h"
#include "fuzz/campaign.h"
#include "surface/audit.h"
#include "surface/demo.h"
#include "surface/explain.h"
#include "surface/gallery.h"
#include "surface/report.h"
#include "fuzz/finding.h"
#include "surface/reproducer.h"
#include "sim/external/adapter_target.h"
#include "sim/json/scenario_json.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives

namespace {

// Durations: "90", "90s", "5m", "1h".
double parse_duration(const std::string& text) {
  // Digits with an optional fraction, then the unit: no sign, exponent, hex, inf or nan (std::stod takes them all).
  std::size_t used = 0;
  while (used < text.size() && std::isdigit(static_cast<unsigned char>(text[used]))) ++used;
  const std::size_t whole = used;
  if (used < text.size() && text[used] == '.')
    for (++used; used < text.size() && std::isdigit(static_cast<unsigned char>(text[used]));) ++used;
  if (whole == 0) throw std::invalid_argument("--time '" + text + "' is not a duration (a positive number and s, m or h: 30s, 5m, 1h)");
  const double value = std::strtod(text.substr(0, used).c_str(), nullptr);
  const std::string unit = text.substr(used);
  double seconds = 0;
  if (unit.empty() || unit == "s") seconds = value;
  else if (unit == "m") seconds = value * 60;
  else if (unit == "h") seconds = value * 3600;
  else throw std::invalid_argument("--time '" + text + "' has an unknown unit '" + unit + "' (s, m or h)");
  if (!(seconds > 0) || !std::isfinite(seconds))
    throw std::invalid_argument("--time '" + text + "' must be a positive, finite duration: a campaign of no time checks nothing");
  return seconds;
}

// Decimal digits only: "010" is ten (std::stoull with base 0 would read it as octal eight).
std::uint64_t parse_decimal(const std::string& text, const std::string& flag, const std::string& what) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  try {
    std::size_t used = 0;
    if (digits) {
      const auto v = std::stoull(text, &used, 10);
      if (used == text.size()) return v;
    }
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + " '" + text + "' is not " + what);
}

std::uint64_t parse_seed(const std::string& text) {
  return parse_decimal(text, "--seed", "a decimal 64-bit unsigned integer (0 to 18446744073709551615)");
}

std::uint64_t parse_trials(const std::string& text) {
  const std::uint64_t n = parse_decimal(text, "--trials", "a decimal count of trials, at least 1");
  if (n == 0) throw std::invalid_argument("--trials 0: a campaign of no trials checks nothing; pass at least 1");
  return n;
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

// The built-in regression corpus: installed beside the program (<prefix>/share/accumcheck/corpus, for
// <prefix>/bin/accumcheck or a user's binary installed in the same prefix), else the source tree this library was
// built from; none when neither exists (then campaigns say no corpus was replayed).
std::optional<std::filesystem::path> default_corpus_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "accumcheck" / "corpus");
  candidates.emplace_back(ACCUMCHECK_DEFAULT_CORPUS);
  for (const auto& dir : candidates)
    if (std::filesystem::is_directory(dir, ec)) return dir;
  return std::nullopt;
}

// The Python kit's reader of torch.save files (audit): installed beside the corpus, else the source tree's.
std::filesystem::path default_saved_run_script() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share" / "accumcheck" / "saved_run.py";
    if (std::filesystem::is_regular_file(installed, ec)) return installed;
  }
  return ACCUMCHECK_SAVED_RUN_SCRIPT;
}

struct AuditRequest {
  std::vector<std::string> paths;
  std::vector<std::string> packages;  // "deepspeed==0.16.4"
  std::string framework, offload, precision, deepspeed, python = "python3";
  std::optional<int> world_size, accumulation_steps, zero_stage;
  bool json = false, confirm = false;
  std::string findings_dir = "findings";
};

// The flags are stated first, as one more input of every run: a file that says otherwise is a contradiction.
void apply_audit_flags(RunConfiguration& run, const AuditRequest& r) {
  if (!r.packages.empty()) {
    std::string text;
    for (const auto& p : r.packages) {
      if (p.find("==") == std::string::npos) throw AuditInputError("--package '" + p + "' is not NAME==VERSION");
      text += p + "\n";
    }
    read_package_versions(run, text, "--package");
    run.inputs.pop_back();
  }
  if (!r.framework.empty()) {
    const auto f = parse_framework(r.framework);
    if (!f) throw AuditInputError("--framework '" + r.framework + "' is not deepspeed, transformers, trl, openrlhf or llamafactory");
    run.framework = Stated<Framework>{*f, "--framework"};
    if (*f == Framework::openrlhf) state(run.uses_deepspeed, true, "--framework openrlhf", "the use of DeepSpeed");
  }
  if (!r.offload.empty()) {
    const auto d = parse_offload_device(r.offload);
    if (!d) throw AuditInputError("--offload '" + r.offload + "' is not none, cpu or nvme");
    state(run.optimizer_offload, *d, "--offload", "the optimizer offload");
  }
  if (!r.precision.empty()) state(run.precision, r.precision, "--precision", "precision");
  if (!r.deepspeed.empty()) state(run.uses_deepspeed, r.deepspeed == "yes", "--deepspeed", "the use of DeepSpeed");
  if (r.world_size) state(run.world_size, *r.world_size, "--world-size", "the world size");
  if (r.accumulation_steps) state(run.accumulation_steps, *r.accumulation_steps, "--accumulation-steps", "gradient_accumulation_steps");
  if (r.zero_stage) {
    state(run.zero_stage, *r.zero_stage, "--zero-stage", "the ZeRO stage");
    state(run.uses_deepspeed, true, "--zero-stage", "the use of DeepSpeed");
  }
}

int run_audit(const AuditRequest& r) {
  std::vector<RunAudit> audits;
  const ReadOptions options{.python = r.python, .kit_script = default_saved_run_script()};
  try {
    if (r.paths.empty()) {
      RunConfiguration run;
      run.name = "(flags)";
      apply_audit_flags(run, r);
      audits.push_back(audit_run(run));
      if (r.confirm) confirm_run(audits.back(), r.findings_dir);
    }
    for (const auto& path : r.paths)
      for (const auto& found : find_runs(path)) {
        RunConfiguration flags;
        apply_audit_flags(flags, r);
        audits.push_back(audit_run(read_run(found, options, std::move(flags))));
        if (r.confirm) confirm_run(audits.back(), r.findings_dir);
      }
  } catch (const AuditInputError& e) {
    fmt::print(stderr, "accumcheck audit: error: {}\n", e.what());
    return kExitUsage;
  }
  if (r.json) fmt::print("{}\n", audit_json(audits).dump(2));
  else fmt::print("{}", audit_text(audits));
  return audit_exit_code(audits);
}

// `program` is the command as invoked (argv[0]), so that the replay line can be pasted as it is, also for a user's
// own binary (surface/cli.h), whose engines the plain accumcheck command does not know.
// Ctrl-C (SIGINT) or SIGTERM during a campaign: the first asks it to stop after the checks in flight, with the
// state, the report and the summary written; a second one ends the process at once.
std::atomic<bool> g_stop_requested{false};
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void request_stop(int signal) {
  g_stop_signal = signal;
  g_stop_requested.store(true);
  std::signal(signal, SIG_DFL);
  static const char message[] = "\naccumcheck: stopping after the checks in flight (again to stop at once)\n";
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, message, sizeof message - 1);
}

int run_fuzz(CampaignConfig config, const std::string& report_path, bool quiet, const std::string& program) {
  fmt::print("accumcheck fuzz: seed {}\n", config.seed);
  config.stop = &g_stop_requested;
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  if (config.corpus_dir) {
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(*config.corpus_dir))
      files += entry.is_regular_file() && entry.path().extension() == ".json";
    fmt::print("corpus: {} ({} finding file(s), replayed before the generated trials; --corpus DIR or --no-corpus)\n",
               config.corpus_dir->string(), files);
  } else {
    fmt::print("corpus: none replayed\n");
  }
  std::fflush(stdout);
  ProgressPrinter printer;
  const CampaignReport report = run_campaign(config, quiet ? std::function<void(const Progress&)>{} : std::function<void(const Progress&)>(std::ref(printer)));
  if (!quiet) printer.finish();
  if (!report_path.empty()) write_json_atomically(report_path, to_json(report));
  std::uint64_t faults = 0;
  std::size_t unchecked = 0, unchecked_named = 0;
  for (const auto& p : report.pairs) {
    faults += p.target_faults;
    if (p.finding) {
      if (p.from_corpus)
        fmt::print("FOUND  {}  {}  by the corpus file {}, before any generated trial\n", p.target, p.property, p.corpus_file);
      else
        fmt::print("FOUND  {}  {}  after {} trials\n", p.target, p.property, p.trials);
      fmt::print("       {}\n", p.finding->verdict.message);
      if (const auto outside = outside_ordinary_features(p.finding->scenario); !outside.empty())
        fmt::print("       outside ordinary training: needs {}{}\n", fmt::join(outside, "; "),
                   p.target.starts_with(sim::external::kAdapterPrefix)
                       ? std::string()
                       : std::string(" (what the model does there is read from the source, not confirmed by running the "
                                     "real release; --ordinary keeps to ordinary loops)"));
      if (p.finding_path) fmt::print("       replay: {} replay {}\n", program, p.finding_path->string());
    } else if (p.target_faults > 0) {
      fmt::print("FAULT  {}  {}  {} trials, {} target fault(s) ({} could not run)\n", p.target, p.property, p.trials, p.target_faults,
                 p.cannot_run);
    } else if (p.cannot_run == p.trials) {
      fmt::print("UNCHECKED  {}  {}  {} trials, none could run: nothing was checked\n", p.target, p.property, p.trials);
      ++unchecked;
      if (config.properties_named) ++unchecked_named;
    } else {
      fmt::print("clean  {}  {}  {} trials ({} could not run)\n", p.target, p.property, p.trials, p.cannot_run);
      if (p.cannot_run * 2 > p.trials)
        fmt::print("       mostly unchecked: only {} of {} trials could run this property\n", p.trials - p.cannot_run, p.trials);
    }
    if (!p.finding)
      for (const auto& [why, count] : p.top_cannot_run_reasons(2))
        fmt::print("       could not run {}x: {}\n", count, why.size() > 160 ? why.substr(0, 160) + "..." : why);
    if (p.rounding.worst_ratio > 0)
      fmt::print("       rounding: largest gap {:.3g} = {:.3g} of its bound, at {} (within bound: not a defect)\n",
                 p.rounding.gap.to_double(), p.rounding.worst_ratio, p.rounding.where);
  }
  for (const auto& p : report.pairs)
    if (!p.first_fault.empty()) {
      fmt::print("first target fault of {} / {}:\n  {}\n", p.target, p.property, p.first_fault);
      break;
    }
  if (report.stopped_at_first_finding)
    fmt::print("stopped at the first finding (--stop-at-first-finding): {}\n",
               report.trials == 0 ? std::string("from the corpus, before any generated trial")
                                  : fmt::format("trial {}, after {:.3f}s", report.trials - 1, [&] {
                                      double first = report.seconds;
                                      for (const auto& p : report.pairs)
                                        if (p.finding) first = std::min(first, p.seconds_to_first_failure);
                                      return first;
                                    }()));
  fmt::print("{} trials in {:.2f}s ({:.0f}/s), {} finding(s){}\n", report.trials, report.seconds,
             report.seconds > 0 ? static_cast<double>(report.trials) / report.seconds : 0.0, report.findings(),
             faults > 0 ? fmt::format(", {} target fault(s)", faults) : std::string());
  if (unchecked > 0)
    fmt::print("{} of {} (target, property) pair(s) checked nothing (UNCHECKED above){}\n", unchecked, report.pairs.size(),
               config.properties_named ? std::string()
                                       : std::string("; they do not fail the campaign unless named with --property, "
                                                     "or unless no pair checked anything"));
  if (report.interrupted) {
    fmt::print("interrupted by signal {} after {} trials: the budget was not spent{}\n", static_cast<int>(g_stop_signal), report.trials,
               config.state_path ? "; the state is saved in " + config.state_path->string() + ": run the same command to resume"
                                 : std::string("; pass --state FILE to be able to resume"));
    return 128 + static_cast<int>(g_stop_signal);
  }
  if (report.findings() > 0) return kExitFindings;
  if (faults > 0) return kExitTargetFault;
  if (unchecked_named > 0 || (unchecked > 0 && unchecked == report.pairs.size())) return kExitUnchecked;
  return kExitClean;
}

// A finding on an external adapter names its command; register it again unless this run already knows the
// adapter by that name (shipped, or given with --adapter-command).
void register_finding_adapter(const Finding& f) {
  if (!f.adapter || !f.target.starts_with(sim::external::kAdapterPrefix)) return;
  const std::string name = f.adapter->at("name").get<std::string>();
  try {
    (void)sim::external::find_adapter_spec(name);
    return;
  } catch (const std::invalid_argument&) {
  }
  sim::external::AdapterSpec spec;
  spec.name = name;
  spec.command = f.adapter->at("command").get<std::string>();
  spec.working_directory = f.adapter->at("working_directory").get<std::string>();
  spec.origin = "recorded in the finding";
  if (f.adapter->contains("model")) spec.model = f.adapter->at("model").get<std::string>();
  sim::external::register_adapter(std::move(spec));
}

// The first field where two JSON values differ, as a path ("engine.zero_stage"), or empty when they are equal.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path = "") {
  if (a == b) return {};
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string here = path.empty() ? key : path + "." + key;
      if (!b.contains(key)) return here;
      if (std::string d = first_difference(value, b.at(key), here); !d.empty()) return d;
    }
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) return path.empty() ? key : path + "." + key;
  }
  if (a.is_array() && b.is_array() && a.size() == b.size())
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::string d = first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]"); !d.empty()) return d;
  return path.empty() ? "(the whole scenario)" : path;
}

// One finding file: the exit status its replay alone would have.
int replay_one(const std::string& file) {
  const Finding f = finding_from_json(read_json_file(file));
  register_finding_adapter(f);
  const auto target = sim::make_target(f.target);
  const auto* property = properties::find_property(f.property);
  if (!property) throw std::invalid_argument(file + ": unknown property '" + f.property + "'");
  sim::Scenario fitted;
  const properties::Verdict now = check_pair(*target, *property, f.scenario, f.scalar, &fitted);
  // Replay runs the scenario as written: one the target would only run changed is refused, naming the field.
  if (const std::string why = target->unsupported(f.scenario); !why.empty() || now.outcome != properties::Outcome::cannot_run) {
    const nlohmann::json written = sim::to_json(f.scenario), run = sim::to_json(fitted);
    if (!why.empty() || written != run)
      throw std::invalid_argument(
          file + ": " + f.target + " does not run this scenario as written" + (why.empty() ? std::string() : " (" + why + ")") +
          (now.outcome == properties::Outcome::cannot_run ? std::string() : "; a campaign would change " + first_difference(written, run)) +
          ". Replay runs a finding exactly as recorded: restore the field, or run a campaign");
  }
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
  if (now.outcome == properties::Outcome::target_fault) {
    fmt::print("  the target misbehaved: nothing was checked\n");
    return kExitTargetFault;
  }
  if (now.outcome == properties::Outcome::cannot_run) {
    fmt::print("  UNCHECKED: the property could not run, so this says nothing about the recorded failure\n");
    return kExitUnchecked;
  }
  fmt::print("  the recorded failure no longer reproduces\n");
  return kExitClean;
}

// Files and folders (every *.json directly inside, in name order), each replayed; the status is the most serious
// of theirs: a failure that still reproduces, then a target fault, then a check that could not run.
int run_replay(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::vector<std::string> inside;
      for (const auto& entry : std::filesystem::directory_iterator(path))
        if (entry.is_regular_file() && entry.path().extension() == ".json") inside.push_back(entry.path().string());
      if (inside.empty()) throw std::invalid_argument(path + ": a folder without finding files (*.json)");
      std::sort(inside.begin(), inside.end());
      files.insert(files.end(), inside.begin(), inside.end());
    } else {
      files.push_back(path);
    }
  }
  std::size_t counts[4] = {0, 0, 0, 0};  // still fails, fault, unchecked, no longer fails
  for (const auto& file : files) {
    switch (replay_one(file)) {
      case kExitFindings: ++counts[0]; break;
      case kExitTargetFault: ++counts[1]; break;
      case kExitUnchecked: ++counts[2]; break;
      default: ++counts[3]; break;
    }
  }
  if (files.size() > 1)
    fmt::print("{} finding(s): {} still fail, {} no longer fail, {} could not run, {} target fault(s)\n", files.size(), counts[0],
               counts[3], counts[2], counts[1]);
  if (counts[0] > 0) return kExitFindings;
  if (counts[1] > 0) return kExitTargetFault;
  if (counts[2] > 0) return kExitUnchecked;
  return kExitClean;
}

}  // namespace

namespace {

constexpr const char* kBuiltinCommands[] = {"demo", "fuzz", "replay", "explain", "export", "audit", "report", "gallery", "list"};

std::mutex& extension_mutex() {
  static std::mutex m;
  return m;
}
std::vector<ExtensionCommand>& extension_commands() {
  static std::vector<ExtensionCommand> commands;
  return commands;
}

}  // namespace

void register_extension_command(ExtensionCommand command) {
  if (command.name.empty() || !command.run)
    throw std::invalid_argument("register_extension_command: a command needs a name and what runs it");
  const std::lock_guard lock(extension_mutex());
  for (const char* builtin : kBuiltinCommands)
    if (command.name == builtin) throw std::invalid_argument("register_extension_command: '" + command.name + "' is a built-in command");
  for (const auto& other : extension_commands())
    if (other.name == command.name)
      throw std::invalid_argument("register_extension_command: '" + command.name + "' is registered already");
  extension_commands().push_back(std::move(command));
}

namespace {

int run_command(int argc, char** argv) {
  set_command_line(std::vector<std::string>(argv, argv + argc));
  CLI::App app{"accumcheck: checks that accumulated gradient updates equal full-batch updates"};
  app.set_version_flag("--version", fmt::format("accumcheck {} (commit {})", accumcheck_version(), accumcheck_commit()));
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  accumcheck demo\n"
      "  accumcheck fuzz --target deepspeed@0.16.0 --seed 1 --trials 1000 --jobs 2\n"
      "  accumcheck fuzz --target openrlhf@0.10.2+deepspeed@0.18.9 --time 5m --state state.json --report report.json\n"
      "  accumcheck replay findings/                    (every finding of a campaign)\n"
      "  accumcheck explain FILE;  accumcheck export FILE --format pytorch -o repro.py\n"
      "  accumcheck audit runs/   (was each run affected? exit 0 clean, 1 affected, 3 cannot tell)\n"
      "  accumcheck report report.json -o report.html   (a report, finding or audit --json as a page)\n"
      "\n"
      "Exit status: 0 clean; 1 findings (or a replayed finding still fails); 2 usage or input error; 3 target\n"
      "faults and no finding; 4 unchecked (a named property could not run on any trial); 128+N interrupted by\n"
      "signal N, with state, report and summary written. docs/fuzzing.md has the details.");

  auto* demo = app.add_subcommand("demo", "Campaigns against every built-in buggy target and its fixed counterpart");

  auto* fuzz = app.add_subcommand("fuzz", "Run a seeded campaign against one or more targets");
  std::vector<std::string> targets, props;
  std::string seed_text = "0", time_text, report_path, findings_dir = "findings", corpus_dir, state_path, scalar_text = "fast-rational",
              model_text;
  std::string trials_text;
  int jobs = 1;
  bool quiet = false, ordinary = false;
  fuzz->add_option("--target", targets, "Target name (repeatable); accumcheck list targets");
  std::string adapter_command, adapter_name, adapter_dtype, adapter_model;
  double adapter_timeout = 60, adapter_start_timeout = 120;
  fuzz->add_option("--adapter-command", adapter_command,
                   "Your own adapter (docs/adapter-protocol.md), run through the shell, e.g. \"python3 my_loop.py\"; adds the "
                   "target adapter:NAME");
  fuzz->add_option("--adapter-name", adapter_name, "NAME of the --adapter-command target (default: the script's file name)");
  fuzz->add_option("--adapter-dtype", adapter_dtype, "What the --adapter-command adapter computes in: exact, fp32 or fp64 "
                   "(default: the first its handshake lists)")
      ->check(CLI::IsMember({"exact", "fp32", "fp64"}));
  fuzz->add_option("--adapter-timeout", adapter_timeout, "Seconds an adapter may take to answer one run (default 60)")->check(CLI::Range(0.1, 86400.0));
  fuzz->add_option("--adapter-start-timeout", adapter_start_timeout, "Seconds an adapter may take to start and answer the handshake (default 120)")
      ->check(CLI::Range(0.1, 86400.0));
  fuzz->add_option("--adapter-model", adapter_model,
                   "The simulated target that models the --adapter-command adapter (e.g. deepspeed@0.16.4), for --differential");
  auto* props_opt = fuzz->add_option("--property", props, "Property name (repeatable; default: the nine accumulation properties); accumcheck list properties");
  bool differential = false;
  fuzz->add_flag("--differential", differential,
                 "Check each target against its behavioural model (property 10, " +
                     std::string(properties::kDifferentialProperty) + "): the same scenarios on both, compared within the float bound");
  fuzz->add_option("--seed", seed_text, "Root seed of the campaign, decimal (printed first; default 0)");
  auto* trials_opt = fuzz->add_option("--trials", trials_text, "Number of trials (at least 1)");
  auto* time_opt = fuzz->add_option("--time", time_text, "Time budget: 30s, 5m, 1h");
  fuzz->add_option("--jobs", jobs, "Worker threads (results do not depend on it; default 1)")->check(CLI::Range(1, 256));
  fuzz->add_option("--report", report_path, "Write the JSON campaign report here");
  fuzz->add_option("--findings", findings_dir, "Folder for finding files (default: findings)");
  bool no_corpus = false, stop_at_first_finding = false;
  auto* corpus_opt = fuzz->add_option("--corpus", corpus_dir,
                                      "Folder of past findings to replay first, instead of the built-in regression corpus "
                                      "(<prefix>/share/accumcheck/corpus once installed)");
  fuzz->add_flag("--no-corpus", no_corpus, "Do not replay any corpus");
  fuzz->add_flag("--stop-at-first-finding", stop_at_first_finding,
                 "End at the first trial on which a property fails (every pair failing on it is kept), shrink, report");
  fuzz->add_option("--state", state_path, "Campaign state file: resume from it if it exists");
  fuzz->add_option("--scalar", scalar_text,
                   "What simulated targets compute in: rational or fast-rational (compared exactly), fp32 or fp64 (compared within "
                   "the derived rounding bound); adapters compute in their own dtype (default: fast-rational)");
  fuzz->add_option("--model", model_text, "Only this model kind: linear, mlp, tied_embedding");
  fuzz->add_flag("--ordinary", ordinary, "Ordinary loops only: no boundary on every backward, no unused parameters");
  fuzz->add_flag("--quiet", quiet, "No progress output");
  std::string offload_text = "any";
  fuzz->add_option("--offload", offload_text, "Generated scenarios with optimizer offload: on, off or any")
      ->check(CLI::IsMember({"on", "off", "any"}));
  int max_ranks = GeneratorOptions{}.rank_count_max;
  fuzz->add_option("--max-ranks", max_ranks, "Generated scenarios have at most this many data-parallel ranks (default 3; 1 keeps to one rank)")
      ->check(CLI::Range(1, 16));
  // The generator's other limits (fuzz/generator.h), to aim a campaign at deeper or wider scenarios; defaults unchanged.
  GeneratorOptions limits;
  std::optional<int> max_width;
  fuzz->add_option("--max-steps", limits.step_count_max, "At most this many optimizer steps per scenario (default 3)")
      ->check(CLI::Range(1, sim::kStepCountMax));
  fuzz->add_option("--max-accumulation-steps", limits.accumulation_steps_max,
                   "G and windows of at most this many micro-batches (default 4)")
      ->check(CLI::Range(1, std::min(sim::kAccumulationStepsMax, sim::kMicroBatchesPerWindowMax)));
  fuzz->add_option("--max-sequences", limits.sequences_per_micro_batch_max, "At most this many sequences per micro-batch and rank (default 2)")
      ->check(CLI::Range(1, kSequencesPerMicroBatchMax));
  fuzz->add_option("--max-tokens", limits.token_count_max, "At most this many tokens per sequence (default 6)")
      ->check(CLI::Range(1, kTokenCountMax));
  fuzz->add_option("--max-width", max_width,
                   "Every model dimension (inputs, hidden units, outputs, vocabulary, embedding) at most this (default: 1-4 "
                   "by dimension; the vocabulary at least 2)")
      ->check(CLI::Range(1, kModelWidthMax));

  auto* replay = app.add_subcommand("replay", "Re-run a finding file and check it reproduces bit for bit");
  std::vector<std::string> replay_files;
  replay->add_option("FILE", replay_files, "Finding files, or folders of them (such as findings/)")->required();

  auto* explain_cmd = app.add_subcommand("explain", "Tell a finding's story in words");
  std::string explain_file;
  explain_cmd->add_option("FILE", explain_file, "Finding file")->required();

  auto* export_cmd = app.add_subcommand("export", "Export a finding as a reproducer: json, gtest, pytorch, deepspeed or markdown");
  std::string export_file, export_format_text = "markdown", export_out;
  export_cmd->add_option("FILE", export_file, "Finding file")->required();
  export_cmd->add_option("--format", export_format_text,
                         "json, gtest, pytorch, deepspeed (a standalone torch + deepspeed script, for findings on "
                         "adapter:deepspeed-X.Y.Z or deepspeed@X.Y.Z) or markdown (default)");
  export_cmd->add_option("-o,--output", export_out, "Write here instead of standard output");

  auto* audit_cmd = app.add_subcommand("audit", "Was a past run affected by a known defect? (docs/audit.md)");
  AuditRequest audit_request;
  audit_cmd->add_option("PATH", audit_request.paths,
                        "Files or folders a run left behind: a DeepSpeed config, a checkpoint's model states, TrainingArguments "
                        "(JSON or training_args.bin), a LLaMA-Factory or accelerate YAML, an OpenRLHF command, a freeze file; a "
                        "folder of runs gives one row each");
  audit_cmd->add_option("--package", audit_request.packages, "A package release, NAME==VERSION (repeatable), as pip freeze writes it");
  audit_cmd->add_option("--framework", audit_request.framework, "deepspeed, transformers, trl, openrlhf or llamafactory");
  audit_cmd->add_option("--zero-stage", audit_request.zero_stage, "The ZeRO stage")->check(CLI::Range(0, 3));
  audit_cmd->add_option("--offload", audit_request.offload, "Where the optimizer ran: none, cpu or nvme");
  audit_cmd->add_option("--accumulation-steps", audit_request.accumulation_steps, "G as configured")->check(CLI::Range(1, 1 << 20));
  audit_cmd->add_option("--world-size", audit_request.world_size, "Data-parallel ranks")->check(CLI::Range(1, 1 << 20));
  audit_cmd->add_option("--precision", audit_request.precision, "fp32, bf16 or fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  audit_cmd->add_option("--deepspeed", audit_request.deepspeed, "Whether the run trained through DeepSpeed: yes or no")
      ->check(CLI::IsMember({"yes", "no"}));
  audit_cmd->add_option("--python", audit_request.python, "The Python that reads torch.save files with the kit's saved_run.py (default python3)");
  audit_cmd->add_flag("--json", audit_request.json, "One JSON document on standard output");
  audit_cmd->add_flag("--confirm", audit_request.confirm,
                      "Re-run the run's DeepSpeed configuration on the real installed release (adapter:deepspeed-X.Y.Z) and "
                      "on our model, on a synthetic model; a failure is written as a finding with its deepspeed reproducer");
  audit_cmd->add_option("--findings", audit_request.findings_dir, "Folder for --confirm's findings (default: findings)");

  auto* report_cmd = app.add_subcommand("report", "A campaign report, a finding or an audit as one self-contained HTML page");
  std::string report_file, report_out;
  report_cmd->add_option("FILE", report_file, "A campaign report (fuzz --report), a finding file, or audit --json output")->required();
  report_cmd->add_option("-o,--output", report_out, "The page to write (default: FILE with .html in place of .json)");

  auto* gallery_cmd = app.add_subcommand("gallery", "Train each catalogue defect's buggy and fixed release for hundreds of steps and "
                                                    "write the gallery of silent failures (docs/gallery/)");
  std::string gallery_dir = "docs/gallery";
  gallery_cmd->add_option("DIR", gallery_dir, "The folder to write (default docs/gallery)");

  auto* list = app.add_subcommand("list", "List targets or properties");
  std::string what;
  list->add_option("WHAT", what, "targets or properties")->required()->check(CLI::IsMember({"targets", "properties"}));

  // The build's own subcommands: each takes everything after its name, --help included, to its own parser.
  std::vector<ExtensionCommand> extensions;
  {
    const std::lock_guard lock(extension_mutex());
    extensions = extension_commands();
  }
  std::vector<CLI::App*> extension_apps;
  for (const auto& e : extensions) {
    auto* sub = app.add_subcommand(e.name, e.description);
    sub->prefix_command();
    sub->set_help_flag();
    extension_apps.push_back(sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitClean : kExitUsage;
  }
  sim::external::enable_adapter_targets();
  // Every adapter started by this command is shut down when it ends, whatever the exit path.
  struct AdapterShutdown {
    ~AdapterShutdown() { sim::external::shutdown_adapters(); }
  } adapter_shutdown;
  try {
    for (std::size_t i = 0; i < extensions.size(); ++i) {
      if (!extension_apps[i]->parsed()) continue;
      std::vector<std::string> args = extension_apps[i]->remaining();
      args.insert(args.begin(), extensions[i].name);
      std::vector<char*> pointers;
      for (auto& a : args) pointers.push_back(a.data());
      pointers.push_back(nullptr);
      return extensions[i].run(static_cast<int>(args.size()), pointers.data());
    }
    if (demo->parsed()) return run_demo(std::cout);
    if (audit_cmd->parsed()) return run_audit(audit_request);
    if (report_cmd->parsed()) {
      std::filesystem::path out = report_out;
      if (out.empty()) out = std::filesystem::path(report_file).replace_extension(".html");
      if (out == std::filesystem::path(report_file)) throw std::invalid_argument("report: the page would overwrite " + report_file + "; pass -o");
      write_text_atomically(out, report_html(read_json_file(report_file), report_file));
      fmt::print("wrote {}\n", out.string());
      return kExitClean;
    }
    if (gallery_cmd->parsed()) return run_gallery(gallery_dir, std::cout);
    if (list->parsed()) {
      if (what == "targets") {
        fmt::print("Simulated (models of a stack, read from its source):\n");
        for (const auto& name : sim::builtin_target_names()) fmt::print("  {:<52} {}\n", name, sim::make_target(name)->description());
        fmt::print("\nAny deepspeed@X.Y.Z is accepted; compose as [preset+]framework+engine (docs/targets.md).\n");
        if (const auto user = sim::registered_engine_model_names(); !user.empty()) {
          fmt::print("\nRegistered engines (added by this binary at start-up with register_engine_model: a user's own, the "
                     "CUDA offload pipeline's in a build with nvcc; they compose like the built-in ones):\n");
          for (const auto& name : user) {
            const auto engine = sim::find_engine_model(name);
            fmt::print("  {:<52} [{}] {}\n", name, engine->origin(), engine->description());
          }
        }
        fmt::print("\nExternal (real code driven through docs/adapter-protocol.md; append @fp64 or @fp32 to choose the dtype):\n");
        for (const auto& a : sim::external::shipped_adapters())
          fmt::print("  {:<52} {}{}{}\n", "adapter:" + a.name, a.description,
                     a.model.empty() ? std::string() : "; behavioural model " + a.model,
                     a.installed ? std::string(" [installed]") : " [not installed: run " + a.install_hint + "]");
        fmt::print("  {:<52} {}\n", "--adapter-command \"...\"", "your own training loop (docs/tutorial-your-training-loop.md)");
      } else {
        for (const auto& p : properties::all_properties()) fmt::print("{:<56} {}\n", p->name(), p->description());
        const auto& d = properties::differential_property();
        fmt::print("{:<56} {} (only with --differential or --property)\n", d.name(), d.description());
      }
      return kExitClean;
    }
    if (replay->parsed()) return run_replay(replay_files);
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
        write_text_atomically(export_out, text);  // no partial export on a full disk
        fmt::print(stderr, "wrote {} ({})\n", export_out, to_string(format));
      }
      return kExitClean;
    }
    if (fuzz->parsed()) {
      CampaignConfig config;
      if (!adapter_command.empty()) {
        sim::external::AdapterSpec spec;
        spec.command = adapter_command;
        spec.name = adapter_name;
        if (spec.name.empty()) {
          // The file name of the last word that looks like a script, without its extension.
          std::string last;
          for (std::size_t i = 0; i < adapter_command.size();) {
            const std::size_t j = adapter_command.find(' ', i);
            const std::string word = adapter_command.substr(i, j == std::string::npos ? std::string::npos : j - i);
            if (word.find('.') != std::string::npos || word.find('/') != std::string::npos) last = word;
            if (j == std::string::npos) break;
            i = j + 1;
          }
          spec.name = last.empty() ? "user" : std::filesystem::path(last).stem().string();
        }
        if (!adapter_dtype.empty()) spec.dtype = adapter_dtype == "exact" ? sim::external::DType::exact
                                                 : adapter_dtype == "fp64" ? sim::external::DType::fp64
                                                                           : sim::external::DType::fp32;
        spec.run_timeout = std::chrono::milliseconds(static_cast<long long>(adapter_timeout * 1000));
        spec.start_timeout = std::chrono::milliseconds(static_cast<long long>(adapter_start_timeout * 1000));
        spec.origin = "--adapter-command";
        spec.model = adapter_model;
        const std::string name = "adapter:" + spec.name + (spec.dtype ? "@" + adapter_dtype : std::string());
        sim::external::register_adapter(std::move(spec));
        targets.push_back(name);
      }
      if (targets.empty()) throw std::invalid_argument("no target: pass --target NAME or --adapter-command \"...\" (accumcheck list targets)");
      config.targets = targets;
      config.generator.rank_count_max = max_ranks;
      config.generator.step_count_max = limits.step_count_max;
      config.generator.accumulation_steps_max = limits.accumulation_steps_max;
      config.generator.sequences_per_micro_batch_max = limits.sequences_per_micro_batch_max;
      config.generator.token_count_max = limits.token_count_max;
      if (max_width) {
        auto& g = config.generator;
        g.linear_input_size_max = g.mlp_input_size_max = g.hidden_size_max = g.output_size_max = g.embed_size_max = *max_width;
        g.vocab_size_max = std::max(2, *max_width);
      }
      for (const auto& t : targets) {
        const auto target = sim::make_target(t);  // unknown names fail here, with the part named
        if (t.starts_with(sim::external::kAdapterPrefix)) {
          // The generator draws inside the adapter's limits; fit_to_target adapts the rest.
          const auto& caps = sim::external::adapter_target(t.substr(sim::external::kAdapterPrefix.size()))->hello().capabilities;
          auto& g = config.generator;
          std::vector<models::ModelKind> kinds;
          for (auto k : caps.models)
            if (g.model_kinds.empty() || std::find(g.model_kinds.begin(), g.model_kinds.end(), k) != g.model_kinds.end()) kinds.push_back(k);
          g.model_kinds = kinds;
          std::vector<int> ranks;
          for (int r : caps.world_sizes)
            if (r <= caps.limits.rank_count_max && r <= g.rank_count_max && (g.rank_counts.empty() || std::find(g.rank_counts.begin(), g.rank_counts.end(), r) != g.rank_counts.end()))
              ranks.push_back(r);
          g.rank_counts = ranks;
          g.rank_count_max = std::min(g.rank_count_max, caps.limits.rank_count_max);
          g.accumulation_steps_max = std::min(g.accumulation_steps_max, caps.limits.micro_batch_count_max);
          g.step_count_max = std::min(g.step_count_max, caps.limits.step_count_max);
          if (g.model_kinds.empty() || g.rank_counts.empty())
            throw std::invalid_argument("the targets share no model kind or world size: " + t + " runs " +
                                        sim::external::to_json(caps).dump());
        }
        if (differential) {
          const auto model = target->behavioural_model();
          if (!model)
            throw std::invalid_argument("--differential: target " + t + " names no behavioural model to compare with (a shipped "
                                        "adapter's adapter.json \"model\", or --adapter-model for --adapter-command)");
          if (sim::make_target(*model)->behavioural_model() || model->starts_with(sim::external::kAdapterPrefix))
            throw std::invalid_argument("--differential: the behavioural model of " + t + " must be a simulated target, not " + *model);
        }
      }
      if (!adapter_model.empty() && adapter_command.empty())
        throw std::invalid_argument("--adapter-model names the model of the --adapter-command adapter; pass --adapter-command too");
      if (differential && std::find(props.begin(), props.end(), properties::kDifferentialProperty) == props.end())
        props.emplace_back(properties::kDifferentialProperty);
      config.properties = props;
      config.seed = parse_seed(seed_text);
      if (trials_opt->count() > 0) config.trials = parse_trials(trials_text);
      if (time_opt->count() > 0) config.seconds = parse_duration(time_text);
      if (!config.trials && !config.seconds) throw std::invalid_argument("no budget: pass --trials N or --time DURATION");
      config.jobs = jobs;
      config.scalar = sim::parse_scalar_kind(scalar_text);
      if (config.scalar == sim::ScalarKind::fixed32)
        throw std::invalid_argument("--scalar fixed32: the properties compare exactly (rational, fast-rational) or within a derived "
                                    "rounding bound (fp32, fp64); fixed point rounds products without such a bound");
      if (!model_text.empty()) config.generator.model = models::parse_model_kind(model_text);
      // 16-bit storage only where every target computes in floats and one of them runs it.
      {
        bool all_float = true, any_16_bit = false;
        for (const auto& t : config.targets) {
          const auto target = sim::make_target(t);
          const sim::ScalarKind scalar = scalar_for(*target, config.scalar);
          all_float = all_float && (scalar == sim::ScalarKind::fp32 || scalar == sim::ScalarKind::fp64);
          // A scenario the target runs, then the same with bf16 storage.
          sim::Scenario probe = generate_scenario(0, config.generator);
          if (fit_to_target(probe, *target)) {
            probe.engine.precision = sim::Precision::bf16;
            any_16_bit = any_16_bit || target->unsupported(probe).empty();
          }
        }
        config.generator.mixed_precision = all_float && any_16_bit;
      }
      config.generator.ordinary_only = ordinary;
      if (offload_text != "any") config.generator.offload = offload_text == "on";
      if (!findings_dir.empty()) config.findings_dir = findings_dir;
      if (corpus_opt->count() > 0 && no_corpus) throw std::invalid_argument("--corpus and --no-corpus exclude each other");
      if (corpus_opt->count() > 0) {
        if (!std::filesystem::is_directory(corpus_dir))
          throw std::invalid_argument("--corpus " + corpus_dir + ": not a folder (a folder of finding files is expected)");
        config.corpus_dir = corpus_dir;
      } else if (!no_corpus) {
        if (auto builtin = default_corpus_dir()) config.corpus_dir = *builtin;
      }
      config.stop_at_first_finding = stop_at_first_finding;
      if (!state_path.empty()) config.state_path = state_path;
      config.properties_named = props_opt->count() > 0;
      return run_fuzz(config, report_path, quiet, argc > 0 && argv[0][0] != '\0' ? argv[0] : "accumcheck");
    }
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "accumcheck: error: {}\n", e.what());
    return kExitUsage;
  } catch (const sim::TargetFault& e) {
    fmt::print(stderr, "accumcheck: the target misbehaved: {}\n", e.what());
    return kExitTargetFault;
  } catch (const std::exception& e) {
    fmt::print(stderr, "accumcheck: error: {}\n", e.what());
    return kExitUsage;
  }
  return kExitUsage;
}

}  // namespace

// What the command printed must have reached its standard output (`explain f.json > /dev/full` is an error).
int run_cli(int argc, char** argv) {
  const int code = run_command(argc, argv);
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int error = errno;
    std::fprintf(stderr, "accumcheck: error: cannot write standard output: %s\n", std::strerror(error));
    return code == kExitClean ? kExitUsage : code;
  }
  return code;
}

int run_cli(int argc, char** argv, const std::vector<std::shared_ptr<const sim::EngineModel>>& engines) {
  // Plain accumcheck does not know these engines: findings made here say to replay them with this binary.
  if (!engines.empty() && argc > 0 && argv[0][0] != '\0') set_replay_program(argv[0]);
  try {
    for (const auto& engine : engines) sim::register_engine_model(engine);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "accumcheck: error: {}\n", e.what());
    return kExitUsage;
  }
  return run_cli(argc, argv);
}

}  // namespace accumcheck::surface
