// ReferenceEngine<S>: a training engine that is correct by construction, with the machinery real ones have.
//
// R ranks, ZeRO stages 0-3, reduction buckets, CPU offload with asynchronous copies, mixed precision with
// fp32 master weights and loss scaling, global-norm clipping, checkpoints. What it computes equals the full-batch oracle exactly for exact types (a property in
// properties/sim/), whatever the stage, bucket size, offload setting or copy schedule; what differs between
// configurations is only the trace. Its correctness rests on three rules that the behavioural models of
// real releases break in various ways:
//   1. every micro-batch's reduced gradient is added into an accumulator that only step() and zero_grad() clear;
//   2. the optimizer reads gradients and the forward pass reads parameters only after every copy into them has
//      landed (synchronize before step, and before the first forward after a step);
//   3. the boundary is the caller's override when set, else (micro_steps + 1) % G == 0.
// Storage: ZeRO partitions decide who accumulates and updates which flat elements; stage <= 1 accumulates
// the full gradient on every rank (all-reduce), stage >= 2 only the owner's slice (reduce-scatter); stage 3
// also gathers parameters from their owners before each forward. Offload keeps master parameters, optimizer
// state and the gradient accumulator on the host.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "models/clipping.h"
#include "models/oracle.h"
#include "sim/copy_queue.h"
#include "sim/engine.h"
#include "sim/flat_layout.h"
#include "sim/precision.h"
#include "sim/rank_gradients.h"
#include "sim/scenario.h"
#include "sim/update_memo.h"

namespace accumcheck::sim {

// Deliberate faults, for canary targets that prove the harness catches what they break. The reference
// target always runs with none.
struct ReferenceFaults {
  bool skip_synchronize_before_step = false;  // the host optimizer reads gradients whose copies may not have landed
};

template <class S>
class ReferenceEngine final : public Engine<S> {
 public:
  ReferenceEngine(const models::TrainingSpec& training, const EngineConfig& config,
                  const models::Parameters<S>& initial, std::uint64_t schedule_seed, bool keep_trace_lines,
                  ReferenceFaults faults = {});

  // Makes this engine what the constructor given these arguments makes, keeping the storage its buffers already
  // have: a thread's finished engine is handed to its next run this way (sim/target.cpp), since making and
  // freeing an engine's dozen buffers and matrices was about a seventh of a trial at the smallest sizes
  // (bench/README.md).
  void reset(const models::TrainingSpec& training, const EngineConfig& config, const models::Parameters<S>& initial,
             std::uint64_t schedule_seed, bool keep_trace_lines, ReferenceFaults faults = {});

  void backward(const RankSequences<S>& data, const RankCoefficients<S>& coefficients) override;
  void set_gradient_accumulation_boundary(bool is_boundary) override { boundary_override_ = is_boundary; }
  void step() override;
  void zero_grad() override;
  EngineCheckpoint<S> save_checkpoint() override;
  void load_checkpoint(const EngineCheckpoint<S>& checkpoint) override;
  std::optional<AppliedStep<S>> take_applied_step() override {
    auto out = std::move(applied_);
    applied_.reset();
    return out;
  }
  models::Parameters<S> parameters() const override;
  models::OptimizerState<S> optimizer_state() const override;
  const Trace& trace() const override { return trace_; }
  void skip_updates() override { updates_skipped_ = true; }
  void give_back(AppliedStep<S>&& taken) override { spare_gradient_ = std::move(taken.gradient); }

 private:
  bool is_boundary() const {
    return boundary_override_ ? *boundary_override_ : (micro_steps_ + 1) % config_.accumulation_steps == 0;
  }
  PartitionRange partition(int rank) const { return partition_of(layout_.total, config_.rank_count, rank); }
  // Every buffer and counter as a new engine has them, from config_, training_ and layout_; the constructor's body
  // and reset() share it, so that a reset engine cannot differ from a new one.
  void reset_state(const models::Parameters<S>& initial);
  // Rank `rank`'s parameters as its forward reads them, written into one buffer the engine keeps (a micro-batch's
  // backward reads one rank's at a time): valid until the next call.
  const models::Parameters<S>& device_parameters(int rank);
  void reduce_into_accumulators(const ReducedGradient<S>& reduced);
  // A buffer holding [first, last) for a copy to read: one of staging_ whose last copy has landed and been let go
  // of (the queue holds a source until then), else a new one.
  std::shared_ptr<Buffer<S>> staging_buffer(const S* first, const S* last);
  void publish_parameters();

  models::TrainingSpec training_;
  EngineConfig config_;
  FlatLayout layout_;
  Trace trace_;
  Stream arrival_;
  CopyQueue<S> copies_;
  ReferenceFaults faults_;
  S inverse_accumulation_steps_;

  // Device parameters of each rank (stage 3: only the owner's slice is authoritative; see device_parameters).
  std::vector<std::shared_ptr<Buffer<S>>> device_params_;
  models::Parameters<S> device_view_;  // device_parameters' buffer, shaped once
  std::vector<models::Gradient<S>> rank_grads_;  // [R] each rank's gradient of the current micro-batch
  ReducedGradient<S> reduced_;                    // their average over ranks, the buffer reused per micro-batch
  std::vector<S> scaled_coefficients_;            // a rank's coefficients times the loss scale, with a scaler
  // Master parameters and optimizer state (flat), updated by each owner on its slice; on the host if offload.
  std::vector<S> master_params_;
  std::vector<S> first_moment_, second_moment_;
  std::vector<long> step_count_;            // [P]
  std::vector<bool> has_momentum_buffer_;   // [P]
  // Gradient accumulators: stage <= 1, one full buffer per rank; stage >= 2, the owner's slice of one flat
  // buffer. With offload the accumulator is on the host and filled by asynchronous copies.
  std::vector<std::vector<S>> device_grad_acc_;  // [R][N] (stage <= 1, no offload)
  std::shared_ptr<Buffer<S>> partitioned_grad_acc_;  // [N], element f owned by owner_of(f)
  std::vector<bool> grad_present_;  // [P]
  bool has_pending_gradient_ = false;

  // Loss scaling (fp16): the scale multiplies every coefficient; an inf/NaN in a stored 16-bit gradient
  // makes the step a skip.
  std::optional<models::LossScaler> scaler_;
  bool overflow_ = false;

  std::optional<bool> boundary_override_;
  bool updates_skipped_ = false;  // skip_updates()
  long micro_steps_ = 0;
  long global_steps_ = 0;
  std::optional<AppliedStep<S>> applied_;
  models::Gradient<S> spare_gradient_;  // a taken step's gradient given back (give_back), for step() to write over
  // Scratch kept from one step to the next and, with the engine kept per thread (sim/target.cpp), from one run to
  // the next: every value is written before it is read. The copies' source buffers (at most kStagingMax kept), and
  // step()'s gradient, constants and updates.
  static constexpr std::size_t kStagingMax = 64;
  std::vector<std::shared_ptr<Buffer<S>>> staging_;
  std::vector<S> step_grad_;
  std::vector<models::StepConstants<S>> step_constants_;
  std::vector<ElementUpdate<S>> step_updates_;
};

}  // namespace accumcheck::sim

#include "sim/reference_engine-inl.h"
