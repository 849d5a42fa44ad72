// The campaign's scenario generator: one trial seed in, one valid scenario out, in a few microseconds.
//
// Swarm testing (Groce et al., 2012): each trial first switches whole features on or off (several ranks,
// several steps, ZeRO partitioning, offload, a manual boundary with uneven windows, the boundary on every
// backward, empty sequences, masked tokens, routed experts, frozen parameters, clipping, Adam, momentum and
// weight decay, checkpoints, fractional values, the MLP and tied-embedding models, every aggregation mode),
// then draws the scenario with only those features. Trials thus explore corners a uniform generator would
// dilute, such as "G = 3 with offload on one rank and nothing else".
//
// Everything is drawn from sim::Stream seeded by the trial seed, so a scenario is a pure function of
// (trial seed, options) whatever the thread that generates it. The configuration is then fitted to the
// target: a ZeRO stage or precision the target does not model is replaced by one it does, deterministically.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::fuzz {

// Bounds of the generator's own limits, past which a trial would ask for more than a campaign can hold.
inline constexpr int kSequencesPerMicroBatchMax = 64;
inline constexpr int kTokenCountMax = 1024;
inline constexpr int kModelWidthMax = 64;

struct GeneratorOptions {
  std::optional<models::ModelKind> model;  // only this kind, when set
  int step_count_max = 3;
  int rank_count_max = 3;
  int accumulation_steps_max = 4;
  int sequences_per_micro_batch_max = 2;  // per rank
  int token_count_max = 6;                // per sequence, when lengths vary (else min(2, this))
  // Model sizes: each dimension is drawn in [1, its max] (the vocabulary in [2, its max]). The defaults are the
  // tiny models every campaign has drawn; `accumcheck fuzz --max-width N` sets every one of them to N.
  int linear_input_size_max = 4;
  int mlp_input_size_max = 3;
  int hidden_size_max = 3;
  int output_size_max = 2;
  int vocab_size_max = 4;
  int embed_size_max = 2;
  // Ordinary training loops only: no boundary set on every backward with one step() per window, a manual
  // boundary only over windows of the configured G (as accelerate >= 1.8 drives it), and no parameter left
  // without a gradient (routed experts). Outside it the fuzzer also meets the behaviours of upstream notes
  // 1.8.1, 1.8.2 and 1.8.4 (configured G = 1 with several backwards, stale offload buffers).
  bool ordinary_only = false;
  std::optional<bool> offload;  // force offload on or off, when set
  // Limits of the targets under test (an external adapter's capabilities): the model kinds and rank counts
  // to draw from (empty: all); fit_to_target adapts everything else.
  std::vector<models::ModelKind> model_kinds;
  std::vector<int> rank_counts;
  // Draw 16-bit storage (bf16, fp16 with fp32 master weights) in a third of the trials. Only for campaigns
  // whose targets compute in floats (an exact run of 16-bit storage is a contradiction); drawn last, so that
  // every other choice of a trial is the same with and without it.
  bool mixed_precision = false;
};

// Throws std::invalid_argument naming the first limit out of its range (each at least 1, a vocabulary at least
// 2, none past the simulated world's bounds: sim/scenario.h, models/model_spec.h).
void validate(const GeneratorOptions& options);

// Every option, for the campaign report ("results"."generator") and the state file's fingerprint.
nlohmann::json to_json(const GeneratorOptions& options);

sim::Scenario generate_scenario(std::uint64_t trial_seed, const GeneratorOptions& options);

// Adjusts the configuration until the target accepts it (ZeRO stage, offload, precision); false when no
// adjustment works, and the trial then counts as cannot-run.
bool fit_to_target(sim::Scenario& scenario, const sim::Target& target);

// What a scenario exercises, as short labels ("2 ranks", "ZeRO-2", "offload", "manual boundary", "boundary on
// every backward", "several backwards per step()", "checkpoint", "a parameter without a gradient in a
// micro-batch", ...): campaigns count them over the trials that ran, so that a clean campaign says what it covered.
std::vector<std::string> scenario_features(const sim::Scenario& scenario);

// The same features held compactly, without a string: what a campaign keeps per checked trial, counting the
// labels once per distinct value (the labels are features_of(s).labels() == scenario_features(s)).
struct ScenarioFeatures {
  int rank_count = 1;
  int zero_stage = 0;
  bool offload = false;
  models::ModelKind model = models::ModelKind::linear;
  sim::Precision precision = sim::Precision::full;
  std::uint32_t flags = 0;  // one bit per label of the rest, in scenario_features' order

  std::vector<std::string> labels() const;
  friend auto operator<=>(const ScenarioFeatures&, const ScenarioFeatures&) = default;
};
ScenarioFeatures features_of(const sim::Scenario& scenario);

// What puts a scenario outside the ordinary training loops that --ordinary keeps (GeneratorOptions::ordinary_only):
// the boundary on every backward with one step() per window, a manual window of other than G that is not the
// run's last (an epoch's short last window is ordinary), a parameter without a gradient in a micro-batch. Empty
// for an ordinary scenario. A finding that needs one of them says so: there the behavioural models follow their
// reading of the source, which running the real release has not confirmed.
std::vector<std::string> outside_ordinary_features(const sim::Scenario& scenario);

// The trial seed of trial `index` of a campaign with root seed `root`: independent streams per trial.
std::uint64_t trial_seed(std::uint64_t root, std::uint64_t index);

}  // namespace accumcheck::fuzz
