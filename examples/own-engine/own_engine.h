// OwnEngine<S>: a user's own data-parallel engine, written against accumcheck's engine contract (sim/engine.h,
// docs/targets.md section 10) and checked by accumcheck's fuzzer through the whole command line (main.cpp).
//
// Method, as DistributedDataParallel under no_sync() does it: each rank sums its micro-batch gradients (loss times
// 1/G) into its own local buffer, and only at the boundary are the R buffers all-reduced (summed in rank order,
// divided by R); then clip_grad_norm_, the optimizer (torch.optim's rules, through models::optimizer_step), and
// zero_grad. In exact arithmetic that is the full-batch update, so "own-ddp" must come out clean.
//
// "own-ddp-drops-middle" is the same engine with one deliberate fault: a micro-batch's gradient reaches the rank
// buffer only on the first backward of a window and at the boundary, so with G >= 3 the micro-batches in between
// are lost (the shape of DeepSpeed's ZeRO-2 + CPU offload bug in the top-level README.md). With G <= 2 nothing is
// lost, which is what makes it worth a fuzzer: the fault hides from the small cases one writes tests for.
//
// Everything is in one header so that the example stays two files; a library would put the bodies in an -inl.h.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/clipping.h"
#include "models/model.h"
#include "models/optimizer.h"
#include "sim/engine.h"
#include "sim/rank_gradients.h"
#include "sim/target.h"

namespace own_engine {

namespace models = accumcheck::models;
namespace sim = accumcheck::sim;

struct Faults {
  bool drop_middle_micro_batches = false;  // only a window's first and boundary micro-batch reach the buffer
};

template <class S>
class OwnEngine final : public sim::Engine<S> {
 public:
  OwnEngine(const models::TrainingSpec& training, const sim::EngineConfig& config, const models::Parameters<S>& initial,
            bool keep_trace_lines, Faults faults)
      : training_(training),
        config_(config),
        faults_(faults),
        trace_(keep_trace_lines),
        inverse_accumulation_steps_(
            models::from_rational<S>(models::Rational(1LL, static_cast<long long>(config.accumulation_steps)))),
        params_(initial),
        state_(models::initial_optimizer_state<S>(training.model)) {
    clear_rank_buffers();
  }

  void backward(const sim::RankSequences<S>& data, const sim::RankCoefficients<S>& coefficients) override {
    ACCUMCHECK_ASSERT(static_cast<int>(data.size()) == config_.rank_count);
    ACCUMCHECK_ASSERT(data.size() == coefficients.size());
    trace_.record(sim::EventKind::boundary, micro_steps_, is_boundary());
    const bool dropped = faults_.drop_middle_micro_batches && window_backward_count_ > 0 && !is_boundary();
    ++window_backward_count_;
    trace_.record(sim::EventKind::backward, micro_steps_, config_.rank_count);
    if (dropped) return;
    for (std::size_t r = 0; r < data.size(); ++r) {
      const models::Gradient<S> g =
          sim::rank_gradient(training_.model, params_, data[r], coefficients[r], inverse_accumulation_steps_);
      for (std::size_t p = 0; p < g.size(); ++p) {
        if (!g.present[p]) continue;
        rank_buffers_[r].present[p] = true;
        rank_buffers_[r].tensors[p] += g.tensors[p];
      }
    }
  }

  void set_gradient_accumulation_boundary(bool is_boundary) override { boundary_override_ = is_boundary; }

  // Off a boundary step() only counts the micro-step (DeepSpeed's rule, which the scenario's training loop follows).
  void step() override {
    if (!is_boundary()) {
      trace_.record(sim::EventKind::step_not_boundary, micro_steps_);
      ++micro_steps_;
      return;
    }
    models::Gradient<S> reduced = all_reduce();
    sim::AppliedStep<S> record{{}, models::grad_norm(reduced), S(1)};
    if (training_.max_grad_norm)
      record.clip_coefficient = models::clip_grad_norm(reduced, *training_.max_grad_norm).clip_coefficient;
    models::optimizer_step(training_.optimizer, params_, reduced, state_, models::frozen_mask(training_.model));
    record.gradient = std::move(reduced);
    applied_ = std::move(record);
    ++global_steps_;
    trace_.record(sim::EventKind::step, global_steps_);
    zero_grad();
    ++micro_steps_;
  }

  void zero_grad() override {
    clear_rank_buffers();
    trace_.record(sim::EventKind::zero_grad);
  }

  sim::EngineCheckpoint<S> save_checkpoint() override {
    trace_.record(sim::EventKind::checkpoint_save, global_steps_);
    return {params_, state_, micro_steps_, global_steps_};
  }

  // A resumed run starts with empty buffers, as a freshly built model and optimizer do.
  void load_checkpoint(const sim::EngineCheckpoint<S>& checkpoint) override {
    params_ = checkpoint.parameters;
    state_ = checkpoint.optimizer_state;
    micro_steps_ = checkpoint.micro_steps;
    global_steps_ = checkpoint.global_steps;
    clear_rank_buffers();
    trace_.record(sim::EventKind::checkpoint_load, global_steps_);
  }

  std::optional<sim::AppliedStep<S>> take_applied_step() override { return std::exchange(applied_, std::nullopt); }
  models::Parameters<S> parameters() const override { return params_; }
  models::OptimizerState<S> optimizer_state() const override { return state_; }
  const sim::Trace& trace() const override { return trace_; }

 private:
  // The caller's override when set, else every G-th step() call.
  bool is_boundary() const {
    return boundary_override_ ? *boundary_override_ : (micro_steps_ + 1) % config_.accumulation_steps == 0;
  }

  // The sum over ranks, in rank order, divided by R. A parameter no rank's backward reached stays absent (None),
  // so the optimizer skips it as torch.optim does.
  models::Gradient<S> all_reduce() const {
    models::Gradient<S> sum = models::zero_gradient<S>(training_.model);
    for (const auto& buffer : rank_buffers_)
      for (std::size_t p = 0; p < buffer.size(); ++p) {
        if (!buffer.present[p]) continue;
        sum.present[p] = true;
        sum.tensors[p] += buffer.tensors[p];
      }
    const S rank_count(config_.rank_count);
    for (std::size_t p = 0; p < sum.size(); ++p)
      if (sum.present[p]) sum.tensors[p] /= rank_count;
    return sum;
  }

  void clear_rank_buffers() {
    rank_buffers_.assign(static_cast<std::size_t>(config_.rank_count), models::zero_gradient<S>(training_.model));
    window_backward_count_ = 0;
  }

  models::TrainingSpec training_;
  sim::EngineConfig config_;
  Faults faults_;
  sim::Trace trace_;
  S inverse_accumulation_steps_;
  models::Parameters<S> params_;
  models::OptimizerState<S> state_;
  std::vector<models::Gradient<S>> rank_buffers_;  // [R] each rank's local .grad since the last zero_grad
  long window_backward_count_ = 0;                  // backwards since the last zero_grad
  std::optional<bool> boundary_override_;
  long micro_steps_ = 0;
  long global_steps_ = 0;
  std::optional<sim::AppliedStep<S>> applied_;
};

// Makes OwnEngine<S> for every scalar accumcheck runs (EngineModelOf turns create<S> into the virtual factories).
// Plain DDP replicates everything, so it refuses ZeRO stages and offload, and it keeps everything in the run's
// scalar, so it refuses 16-bit storage and loss scaling instead of ignoring them.
class OwnEngineModel final : public sim::EngineModelOf<OwnEngineModel> {
 public:
  OwnEngineModel(std::string name, Faults faults) : name_(std::move(name)), faults_(faults) {}

  std::string name() const override { return name_; }
  std::string description() const override {
    return faults_.drop_middle_micro_batches
               ? "own-engine example, DDP with no_sync that loses the middle micro-batches of a window (G >= 3)"
               : "own-engine example, DDP with no_sync: per-rank buffers, all-reduce at the boundary";
  }
  std::string unsupported(const sim::EngineConfig& config) const override {
    if (config.zero_stage != 0 || config.offload)
      return "DDP replicates everything: zero_stage = 0 without offload only";
    if (config.precision != sim::Precision::full || config.loss_scaler) return "no 16-bit storage, no loss scaling";
    return {};
  }

  template <class S>
  std::unique_ptr<sim::Engine<S>> create(const sim::Scenario& s, const models::Parameters<S>& p, std::uint64_t /*seed*/,
                                         bool keep_trace_lines) const {
    return std::make_unique<OwnEngine<S>>(s.training, s.engine, p, keep_trace_lines, faults_);
  }

 private:
  std::string name_;
  Faults faults_;
};

}  // namespace own_engine
