// The batched mode: many trials of property 1 per launch, each checked against its exact expectation on the device,
// the host collecting only the failures, which are then confirmed and shrunk on the CPU path as in any campaign.
//
// What it covers: a framework layer (sim/loss_normaliser.h) over the reference engine, on any of the three models,
// one optimizer step, full precision: there property 1 reduces to the integer check of batched_check.h (with
// clipping, a flag is a candidate the CPU path decides). Every other trial (several steps, 16-bit storage, a value
// the integers cannot hold) goes to the CPU path, counted apart. The OpenRLHF and transformers releases' loss weighting is where the batched
// mode looks; the engines' bugs (DeepSpeed's dropped micro-batches) need the engine simulation, on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/batched_check.h"
#include "cuda/device.h"
#include "fuzz/campaign.h"
#include "fuzz/generator.h"
#include "sim/loss_normaliser.h"
#include "sim/scenario.h"

namespace accumcheck::cuda {

// Appends `scenario` to `trials` when the batched check covers it under `normaliser`; otherwise leaves `trials` as it
// was and returns why not.
std::string add_batched_trial(BatchedTrials& trials, const sim::Scenario& scenario, const sim::LossNormaliser& normaliser);
// Appends every trial of `piece` to `trials`, in order.
void append_batched_trials(BatchedTrials& trials, const BatchedTrials& piece);

enum class BatchedBackend { device, host_twin };

// The default generator limited to what the batched check covers: one optimizer step, every model.
fuzz::GeneratorOptions batched_one_step();

struct BatchedCampaignConfig {
  std::string framework = "reference";  // a framework layer (sim::find_normaliser), run over the reference engine
  std::uint64_t seed = 0;
  std::uint64_t trials = 0;
  std::uint64_t trials_per_launch = 65536;
  // The trials' distribution. The batched check covers one-step trials (batched_one_step() aims the generator
  // there); the others run on the CPU path.
  fuzz::GeneratorOptions generator = batched_one_step();
  BatchedBackend backend = BatchedBackend::device;
  std::size_t shrink_budget = 4000;
  // Host threads for generating and laying out the trials and for the CPU path (oneTBB); the results do not depend
  // on it.
  int jobs = 1;
};

struct BatchedCampaignReport {
  std::string target;  // "<framework>+reference"
  std::uint64_t trials = 0, batched = 0, cpu_path = 0;  // batched + cpu_path = trials
  std::uint64_t could_not_run = 0;  // of the CPU path's, those property 1 could not run on (an unsupported mode)
  // Flagged clipping trials that the CPU path passed: their gradients differ before clipping and agree after it.
  std::uint64_t equal_after_clipping = 0;
  std::vector<std::uint64_t> failing_trials;  // trial indices whose failure the CPU path confirmed, in order
  // Trials without clipping that the batched check failed and the CPU path passed: a defect of accumcheck, never
  // expected. (The reverse,
  // a batched pass the CPU path fails, is what the tests check, trial by trial.)
  std::vector<std::string> disagreements;
  std::optional<fuzz::Finding> finding;  // the first confirmed failure, shrunk on the CPU path
  double build_seconds = 0, check_seconds = 0, cpu_path_seconds = 0, shrink_seconds = 0;
};

// The target a batched campaign checks: `framework` over the reference engine ("reference" for the reference layer).
std::string batched_target_name(const std::string& framework);

// Trial i is generate_scenario(trial_seed(seed, i)) as in fuzz::run_campaign. Batched trials are laid out
// trials_per_launch at a time and checked in one launch each; the failures they flag are run through
// fuzz::check_pair, and the first is shrunk with fuzz::make_finding. The trials the batched check does not cover
// run through fuzz::check_pair too.
BatchedCampaignReport run_batched_campaign(const BatchedCampaignConfig& config);

}  // namespace accumcheck::cuda
