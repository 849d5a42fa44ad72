#include "cuda/batched_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>

#include "cuda/batched_trials.h"
#include "fuzz/finding.h"
#include "sim/loss_normaliser.h"

namespace accumcheck::cuda {

namespace {

// The exit codes of surface/cli.h.
constexpr int kClean = 0, kFindings = 1, kError = 2, kUnchecked = 4;

int run(int argc, char** argv) {
  CLI::App app{"accumcheck batched: property 1 on many trials per launch, checked exactly on the CUDA device; the "
               "failures are confirmed and shrunk on the CPU path (docs/cuda.md, \"The batched mode\")",
               "accumcheck batched"};
  BatchedCampaignConfig config;
  std::string findings_dir = "findings";
  bool twin = false;
  int max_width = 0;
  app.add_option("--framework", config.framework,
                 "The framework layer over the reference engine (reference, openrlhf@0.10.2, transformers@4.45, ...)")
      ->capture_default_str();
  app.add_option("--seed", config.seed, "The campaign's seed; trial i is the fuzz command's trial i")->capture_default_str();
  app.add_option("--trials", config.trials, "How many trials")->required()->check(CLI::PositiveNumber);
  app.add_option("--jobs", config.jobs, "Host threads generating, laying out and checking on the CPU path")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--per-launch", config.trials_per_launch, "Trials per launch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--findings", findings_dir, "Where the finding is written")->capture_default_str();
  app.add_option("--shrink-budget", config.shrink_budget, "Shrink attempts for the finding")->capture_default_str();
  app.add_flag("--cpu-twin", twin, "Check on the kernel's CPU twin instead of the device (any machine)");
  app.add_option("--max-ranks", config.generator.rank_count_max, "At most this many data-parallel ranks (default 3)");
  app.add_option("--max-accumulation-steps", config.generator.accumulation_steps_max, "At most this G (default 4)");
  app.add_option("--max-sequences", config.generator.sequences_per_micro_batch_max,
                 "At most this many sequences per micro-batch and rank (default 2)");
  app.add_option("--max-tokens", config.generator.token_count_max, "At most this many tokens per sequence (default 6)");
  app.add_option("--max-width", max_width, "Every model dimension is drawn up to this (default 4 and 2 for the linear model)");
  std::string model_text = "any";
  int max_steps = 1;
  app.add_option("--model", model_text,
                 "Only this model (linear, mlp, tied_embedding) or any; the batched check covers all three")
      ->capture_default_str();
  app.add_option("--max-steps", max_steps, "At most this many optimizer steps; the batched check covers one")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kClean : kError;
  }
  try {
    config.generator.model = model_text == "any" ? std::nullopt : std::optional(models::parse_model_kind(model_text));
    config.generator.step_count_max = max_steps;
    if (max_width > 0)
    {
      auto& g = config.generator;  // as fuzz --max-width sets them (a vocabulary of at least 2)
      g.linear_input_size_max = g.mlp_input_size_max = g.hidden_size_max = g.output_size_max = g.embed_size_max = max_width;
      g.vocab_size_max = std::max(2, max_width);
    }
    fuzz::validate(config.generator);
    std::string why;
    if (twin) {
      config.backend = BatchedBackend::host_twin;
    } else if (!device_available(&why)) {
      fmt::print(stderr, "accumcheck batched: no CUDA device ({}): nothing was checked; --cpu-twin checks on the CPU\n", why);
      return kUnchecked;
    }
    if (!sim::find_normaliser(config.framework))
      throw std::invalid_argument("unknown framework layer '" + config.framework + "' (the frameworks of accumcheck list targets)");
    const std::string where = twin ? std::string("the CPU twin") : device_name();
    fmt::print("accumcheck batched: seed {}, {} trials of accumulated_update_equals_full_batch_update on {}, checked on {}\n",
               config.seed, config.trials, batched_target_name(config.framework), where);
    const BatchedCampaignReport report = run_batched_campaign(config);
    const double seconds = report.build_seconds + report.check_seconds + report.cpu_path_seconds + report.shrink_seconds;
    fmt::print("{} trials in {:.2f}s ({:.0f}/s): {} batched, {} on the CPU path ({} of them could not run)\n",
               report.trials, seconds, static_cast<double>(report.trials) / seconds, report.batched, report.cpu_path,
               report.could_not_run);
    if (report.equal_after_clipping > 0)
      fmt::print("{} flagged trial(s) differ before clipping and agree after it (the CPU path decided)\n",
                 report.equal_after_clipping);
    if (!report.disagreements.empty()) {
      fmt::print(stderr, "accumcheck batched: error: the batched check and the CPU path disagree on {} trial(s), a defect "
                         "of accumcheck; the first: {}\n",
                 report.disagreements.size(), report.disagreements.front());
      return kError;
    }
    if (!report.finding) {
      if (report.batched + report.cpu_path == report.could_not_run) {
        fmt::print("UNCHECKED  {}  property 1 could not run on any trial\n", report.target);
        return kUnchecked;
      }
      fmt::print("clean  {}  accumulated_update_equals_full_batch_update  {} trials\n", report.target, report.trials);
      return kClean;
    }
    const auto path = fuzz::write_finding(findings_dir, *report.finding);
    fmt::print("FOUND  {}  accumulated_update_equals_full_batch_update  {} failing trials, the first trial {}\n",
               report.target, report.failing_trials.size(), report.failing_trials.front());
    fmt::print("       {}\n       replay: {} replay {}\n", report.finding->verdict.message, fuzz::replay_program(),
               path.string());
    return kFindings;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "accumcheck batched: error: {}\n", e.what());
    return kError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "accumcheck batched: error: {}\n", e.what());
    return kError;
  }
}

}  // namespace

surface::ExtensionCommand batched_command() {
  return {"batched", "Property 1 on many trials per launch, checked exactly on the CUDA device (docs/cuda.md)", run};
}

}  // namespace accumcheck::cuda
