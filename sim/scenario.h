// Scenario: everything one training run needs, in exact values, independent of any target.
//
// A scenario is a list of optimizer steps; each step is a window of micro-batches; each micro-batch holds one
// list of sequences per data-parallel rank. The full-batch truth of step s (what the oracle trains on) is the
// concatenation of every sequence of every micro-batch of every rank of window s (oracle_batches).
//
// How the training loop drives the engine is part of the scenario too: whether the accumulation boundary is
// automatic (every G backwards, counted by the engine) or set by the caller before each backward, and whether
// the loop calls step() after every backward (DeepSpeed's documented loop, which OpenRLHF and accelerate < 1.8
// use) or only at the end of a window.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "models/loss_scaler.h"
#include "models/oracle.h"
#include "models/rational.h"

namespace accumcheck::sim {

using models::Rational;

enum class BoundaryMode {
  // The engine decides: boundary when (micro_steps + 1) % G == 0, micro_steps counting step() calls.
  automatic,
  // The caller calls set_gradient_accumulation_boundary(k == last) before each backward of a window.
  manual,
};

std::string_view to_string(BoundaryMode mode);
BoundaryMode parse_boundary_mode(std::string_view text);

// Mixed precision as GPUs run it: parameters and gradients stored in a 16-bit type on the device, products
// accumulated in fp32 (as tensor-core GEMMs do), master weights, optimizer state and the gradient accumulator
// in the run's scalar (fp32). Needs a float scalar: an exact run with 16-bit storage is a contradiction.
enum class Precision { full, bf16, fp16 };
std::string_view to_string(Precision precision);
Precision parse_precision(std::string_view text);

// Bounds of the simulated world. A scenario beyond them is rejected with a message, never truncated.
inline constexpr int kRankCountMax = 64;
inline constexpr int kAccumulationStepsMax = 256;
inline constexpr int kStepCountMax = 1024;
inline constexpr int kMicroBatchesPerWindowMax = 1024;

struct EngineConfig {
  int rank_count = 1;          // R, data-parallel ranks
  int accumulation_steps = 1;  // G as configured (DeepSpeed's gradient_accumulation_steps)
  int zero_stage = 0;          // 0: replicated; 1: optimizer state partitioned; 2: + gradients; 3: + parameters
  bool offload = false;        // optimizer state and step on the host, gradients copied device -> host
  // Elements per reduction bucket; 0 means a single bucket holding every gradient element.
  int bucket_element_count = 0;
  BoundaryMode boundary = BoundaryMode::automatic;
  // DeepSpeed's documented loop calls engine.step() after every backward; false: only after the last
  // backward of each window (accelerate >= 1.8 with a manual boundary; OpenRLHF's dynamic batching with
  // G = 1 and an automatic boundary, where every backward is a boundary). Automatic boundaries with G > 1
  // need true.
  bool step_after_every_backward = true;
  Precision precision = Precision::full;
  // Loss scaling (fp16): the loss is multiplied by the scale before backward, gradients are checked for
  // inf/NaN and unscaled before the step, and an overflowing step is skipped (models/loss_scaler.h).
  std::optional<models::LossScalerSpec> loss_scaler;

  friend bool operator==(const EngineConfig&, const EngineConfig&) = default;
};

struct MicroBatch {
  std::vector<std::vector<models::Sequence<Rational>>> rank_sequences;  // [R][sequences of that rank]
};

struct StepPlan {
  std::vector<MicroBatch> micro_batches;  // the window, in backward order
};

struct Scenario {
  models::TrainingSpec training;  // model, loss aggregation, optimizer, clipping
  EngineConfig engine;
  models::Parameters<Rational> initial_parameters;
  std::vector<StepPlan> steps;
  // When set: after step s the run saves a checkpoint, builds a fresh engine, loads it and goes on.
  std::optional<int> checkpoint_after_step;
  // Seeds every nondeterministic choice of the simulated machine (copy completion, arrival order).
  std::uint64_t schedule_seed = 0;
};

// Throws std::invalid_argument naming the first impossible part of the configuration or data.
void validate(const Scenario& scenario);

// The global batch of each step: what the full-batch oracle trains on.
std::vector<models::StepBatch<Rational>> oracle_batches(const Scenario& scenario);

// The same batches with every sequence converted by `convert` (sim::to_scalar<S>, or another scalar's own
// conversion) as it is gathered, without an intermediate exact copy.
template <class S, class Convert>
std::vector<models::StepBatch<S>> oracle_batches(const Scenario& scenario, Convert convert) {
  std::vector<models::StepBatch<S>> out;
  out.reserve(scenario.steps.size());
  for (const auto& step : scenario.steps) {
    std::size_t count = 0;
    for (const auto& micro_batch : step.micro_batches)
      for (const auto& rank : micro_batch.rank_sequences) count += rank.size();
    models::StepBatch<S> batch;
    batch.reserve(count);
    for (const auto& micro_batch : step.micro_batches)
      for (const auto& rank : micro_batch.rank_sequences)
        for (const auto& sequence : rank) batch.push_back(convert(sequence));
    out.push_back(std::move(batch));
  }
  return out;
}

}  // namespace accumcheck::sim
