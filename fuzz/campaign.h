// Campaign: a seeded search over scenarios for targets whose results break a property.
//
// Trial i of a campaign with root seed S uses scenario generate_scenario(trial_seed(S, i)), fitted to each
// target, and checks every (target, property) pair still open on it. Trials run in chunks, each chunk in
// parallel over oneTBB, and results are folded in trial order after the chunk, so the first failure of a pair,
// its shrunk scenario and the whole results section of the report are the same for any --jobs and any chunk
// size. The first chunk has kChunkTrials trials (CampaignConfig::first_chunk_trials); the size doubles after
// each chunk that took under half of kChunkSeconds, up to kChunkTrialsMax, so that fast trials do not pay a
// barrier every few milliseconds while a chunk, the work an interrupt can lose and the overshoot of --time stay
// near kChunkSeconds. A pair closes at its first failure, which is shrunk (deterministically) and written as a
// finding file atomically before the campaign moves on. After each chunk the campaign state is written
// atomically too: a killed campaign resumes from the last completed chunk, losing at most one chunk of work
// and never a finding. A corpus of past findings replays first.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/finding.h"
#include "fuzz/generator.h"

namespace accumcheck::fuzz {

inline constexpr std::uint64_t kChunkTrials = 64;
inline constexpr std::uint64_t kChunkTrialsMax = 65536;
inline constexpr double kChunkSeconds = 1.0;

struct CampaignConfig {
  std::vector<std::string> targets;
  std::vector<std::string> properties;  // empty: all
  std::uint64_t seed = 0;
  std::optional<std::uint64_t> trials;  // at least one of trials and seconds
  std::optional<double> seconds;
  int jobs = 1;
  sim::ScalarKind scalar = sim::ScalarKind::fast_rational;
  GeneratorOptions generator;
  std::optional<std::filesystem::path> findings_dir;
  std::optional<std::filesystem::path> corpus_dir;
  std::optional<std::filesystem::path> state_path;
  std::size_t shrink_budget = 4000;
  // The first chunk's trials (later chunks double while they end quickly); results do not depend on it.
  std::uint64_t first_chunk_trials = kChunkTrials;
  // Share a deterministic target's run of a trial's scenario among the trial's properties (fuzz/trial_runs.h), and
  // the trial's oracle among properties 1 and 9 (properties/trial_oracle.h). Results do not depend on it; false
  // runs every property's runs and oracle afresh (the tests and the bench compare the two).
  bool share_runs = true;
  // End the campaign at the first trial on which any open pair fails (every pair failing on that trial is kept):
  // trials after it are not run, and the report counts trials up to and including it (--stop-at-first-finding).
  // A finding from the corpus ends it before the first generated trial.
  bool stop_at_first_finding = false;
  // The properties were named (--property): one that could not run on any trial fails the command (exit 4).
  bool properties_named = false;
  // Set (from a signal handler, say) to stop: checks not yet started are skipped, the results end before the first
  // trial that was not checked completely, the state is saved, and the report says interrupted.
  const std::atomic<bool>* stop = nullptr;
};

struct Progress {
  std::uint64_t trials_done = 0;
  std::optional<std::uint64_t> trials_total;
  double seconds = 0;
  std::size_t findings = 0;
  std::size_t open_pairs = 0;
};

// The largest rounding gap a float target showed over a campaign, as a fraction of its bound: how close a
// correct float run came to the derived bound (1 would be at it). Reported apart from findings.
struct RoundingGapSummary {
  double worst_ratio = 0;
  models::Rational gap = models::Rational(0), bound = models::Rational(0);
  std::string where;
  void add(const properties::RoundingGap& g) {
    if (g.gap.is_zero() || g.bound.is_zero()) return;
    const double ratio = (g.gap / g.bound).to_double();
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      gap = g.gap;
      bound = g.bound;
      where = g.where;
    }
  }
};

struct PairResult {
  std::string target, property;
  std::uint64_t trials = 0;      // trials that ran this pair (up to and including its first failure)
  std::uint64_t cannot_run = 0;  // of which the property could not run
  // Why, with how often: each distinct reason (cut at kReasonLength characters) up to kReasonsKept of them, the
  // rest under "(other reasons)".
  std::map<std::string, std::uint64_t> cannot_run_reasons;
  static constexpr std::size_t kReasonLength = 240, kReasonsKept = 24;
  void add_cannot_run_reason(const std::string& why);
  // What the trials that ran (passed or failed) exercised: scenario_features, with how often.
  std::map<std::string, std::uint64_t> exercised;
  // The n most frequent, most frequent first (ties by text).
  std::vector<std::pair<std::string, std::uint64_t>> top_cannot_run_reasons(std::size_t n) const;
  std::uint64_t target_faults = 0;  // of which the target misbehaved (crashed, hung, broke the protocol)
  std::string first_fault;          // what happened the first time, with the adapter's stderr tail
  RoundingGapSummary rounding;
  std::optional<Finding> finding;
  std::optional<std::filesystem::path> finding_path;
  bool from_corpus = false;
  std::string corpus_file;  // the corpus file that failed, when from_corpus
  // Timing (not part of the deterministic results). seconds_to_first_failure: from the campaign's start to the
  // moment the check of the first failing trial returned (to the corpus file's replay, when from_corpus).
  double seconds_to_first_failure = 0;
  double shrink_seconds = 0;
};

struct CorpusReplay {
  std::string file, target, property;
  properties::Outcome outcome = properties::Outcome::pass;
};

struct CampaignReport {
  std::uint64_t seed = 0;
  GeneratorOptions generator;  // the limits the trials were drawn within (CampaignConfig::generator, as fitted)
  std::uint64_t trials = 0;  // trials run (by the chunk)
  std::vector<PairResult> pairs;
  std::vector<CorpusReplay> corpus;
  bool resumed = false;
  bool stopped_at_first_finding = false;  // the campaign ended early under CampaignConfig::stop_at_first_finding
  bool interrupted = false;               // CampaignConfig::stop was set: the budget was not spent
  // Timing.
  double seconds = 0;
  int jobs = 1;
  std::size_t findings() const;
};

// Runs the campaign; progress (may be empty) is called after the corpus and after every chunk.
// Throws std::invalid_argument for a bad configuration (unknown target or property, no budget, a state
// file from a different campaign) and std::runtime_error for I/O failures.
CampaignReport run_campaign(const CampaignConfig& config, const std::function<void(const Progress&)>& progress = {});

// The report as JSON (docs/fuzzing.md, "Campaign reports"): "results" is identical for the same seed and
// trial count whatever the job count; "timing" is not.
nlohmann::json to_json(const CampaignReport& report);

// The scalar a pair runs in: the target's own (external adapters) or the campaign's.
sim::ScalarKind scalar_for(const sim::Target& target, sim::ScalarKind requested);

// Runs one property on one target and scenario exactly as campaigns and replay do: fit, check.
// `fitted`, when given, receives the scenario as checked.
properties::Verdict check_pair(const sim::Target& target, const properties::Property& property, const sim::Scenario& scenario,
                               sim::ScalarKind scalar, sim::Scenario* fitted = nullptr);
// The same, calling `checked` with the scenario as checked and the verdict, before returning the verdict. A
// scenario the target runs as it is (the common case) is checked in place, never copied. `oracle`, when given, is
// the trial's shared oracle (properties/trial_oracle.h).
using CheckedCallback = std::function<void(const sim::Scenario& as_checked, const properties::Verdict&)>;
properties::Verdict check_pair(const sim::Target& target, const properties::Property& property, const sim::Scenario& scenario,
                               sim::ScalarKind scalar, const CheckedCallback& checked, properties::TrialOracle* oracle = nullptr);

// Shrinks a failing scenario for the pair and builds the finding.
Finding make_finding(const sim::Target& target, const properties::Property& property, const sim::Scenario& failing,
                     sim::ScalarKind scalar, std::uint64_t campaign_seed, std::int64_t trial, std::uint64_t trial_seed,
                     std::size_t shrink_budget);

}  // namespace accumcheck::fuzz
