// NaiveDdpEngine<S>: an example of a user's own engine plugged into accumcheck (docs/targets.md, "Plugging in
// your own engine"). It is the plain loop a PyTorch DistributedDataParallel user writes:
//
//   for k in window:  (loss_k / G).backward()   # DDP averages the gradient over ranks; autograd sums into .grad
//   at the boundary:  clip_grad_norm_; optimizer.step(); optimizer.zero_grad(set_to_none=True)
//
// and it is correct: what it applies equals the full-batch oracle exactly (properties/sim/custom_engine_test.cpp).
// One deliberate fault can be switched on, forgetting zero_grad() after the step, so that gradients leak into the
// next window; the test shows that the harness catches it.
//
// Method: .grad is one tensor per parameter plus "present" (PyTorch's .grad is None until a backward reaches the
// parameter). Each backward adds the rank-averaged gradient of the micro-batch into it. Real DDP under no_sync
// would instead sum locally and all-reduce at the boundary; in exact arithmetic the sum is the same. step() acts
// only at a boundary, as DeepSpeed's does, so the same training loop drives every engine (sim/engine.h).
//
// Everything is in one header, bodies included, so that a user can copy one file as a starting point; built-in
// engines split declarations and template bodies into a header and an -inl.h.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/clipping.h"
#include "models/model.h"
#include "models/optimizer.h"
#include "sim/engine.h"
#include "sim/rank_gradients.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::sim::examples {

struct NaiveDdpFaults {
  bool skip_zero_grad_after_step = false;  // .grad survives the step and leaks into the next window
};

template <class S>
class NaiveDdpEngine final : public Engine<S> {
 public:
  NaiveDdpEngine(const models::TrainingSpec& training, const EngineConfig& config, const models::Parameters<S>& initial,
                 bool keep_trace_lines, NaiveDdpFaults faults = {})
      : training_(training),
        config_(config),
        faults_(faults),
        trace_(keep_trace_lines),
        inverse_accumulation_steps_(
            models::from_rational<S>(Rational(1LL, static_cast<long long>(config.accumulation_steps)))),
        frozen_(models::frozen_mask(training.model)),
        params_(initial),
        state_(models::initial_optimizer_state<S>(training.model)),
        grad_(models::zero_gradient<S>(training.model)) {}

  // Every rank runs its micro-batch with the loss times 1/G; DDP's all-reduce averages over the R ranks; autograd
  // adds the result into .grad.
  void backward(const RankSequences<S>& data, const RankCoefficients<S>& coefficients) override {
    ACCUMCHECK_ASSERT(static_cast<int>(data.size()) == config_.rank_count);
    ACCUMCHECK_ASSERT(data.size() == coefficients.size());
    trace_.record(EventKind::boundary, micro_steps_, is_boundary());
    // The all-reduce: the sum over ranks, in rank order, divided by R.
    models::Gradient<S> reduced = models::zero_gradient<S>(training_.model);
    for (std::size_t r = 0; r < data.size(); ++r) {
      const models::Gradient<S> g =
          rank_gradient(training_.model, params_, data[r], coefficients[r], inverse_accumulation_steps_);
      for (std::size_t p = 0; p < g.size(); ++p) {
        if (!g.present[p]) continue;
        reduced.present[p] = true;
        reduced.tensors[p] += g.tensors[p];
      }
    }
    const S rank_count(config_.rank_count);
    for (std::size_t p = 0; p < reduced.size(); ++p) {
      if (!reduced.present[p]) continue;
      grad_.present[p] = true;
      grad_.tensors[p] += reduced.tensors[p] / rank_count;
    }
    trace_.record(EventKind::backward, micro_steps_, config_.rank_count);
  }

  void set_gradient_accumulation_boundary(bool is_boundary) override { boundary_override_ = is_boundary; }

  void step() override {
    if (!is_boundary()) {
      trace_.record(EventKind::step_not_boundary, micro_steps_);
      ++micro_steps_;
      return;
    }
    // clip_grad_norm_ over the present gradients, then the optimizer on the clipped gradient. Parameters whose
    // .grad is None are skipped entirely: no update, no step count (torch.optim), unless the scenario asks for
    // an optimizer that counts a missing gradient as zeros (never for a frozen parameter).
    models::Gradient<S> applied = grad_;
    AppliedStep<S> record{{}, models::grad_norm(applied), S(1)};
    if (training_.max_grad_norm) record.clip_coefficient = models::clip_grad_norm(applied, *training_.max_grad_norm).clip_coefficient;
    for (std::size_t p = 0; p < applied.size(); ++p) {
      if (!applied.present[p] && !(training_.optimizer.missing_gradient_is_zero && !frozen_[p])) continue;
      const long step_count = ++state_.step_count[p];
      const models::StepConstants<S> k =
          models::step_constants<S>(training_.optimizer, step_count, !state_.has_momentum_buffer[p]);
      if (training_.optimizer.kind == models::OptimizerKind::sgd && training_.optimizer.momentum.sign() != 0)
        state_.has_momentum_buffer[p] = true;
      models::Matrix<S>& theta = params_.tensors[p];
      for (Eigen::Index i = 0; i < theta.size(); ++i)
        models::update_element(training_.optimizer, k, theta(i), applied.tensors[p](i), state_.first_moment[p](i),
                               state_.second_moment[p](i));
    }
    record.gradient = std::move(applied);
    applied_ = std::move(record);
    ++global_steps_;
    trace_.record(EventKind::step, global_steps_);
    if (!faults_.skip_zero_grad_after_step) zero_grad();
    ++micro_steps_;
  }

  // optimizer.zero_grad(set_to_none=True): every .grad back to None.
  void zero_grad() override {
    grad_ = models::zero_gradient<S>(training_.model);
    trace_.record(EventKind::zero_grad);
  }

  EngineCheckpoint<S> save_checkpoint() override {
    trace_.record(EventKind::checkpoint_save, global_steps_);
    return {params_, state_, micro_steps_, global_steps_};
  }

  // A resumed run starts with .grad cleared, as a freshly constructed model and optimizer do.
  void load_checkpoint(const EngineCheckpoint<S>& checkpoint) override {
    params_ = checkpoint.parameters;
    state_ = checkpoint.optimizer_state;
    micro_steps_ = checkpoint.micro_steps;
    global_steps_ = checkpoint.global_steps;
    grad_ = models::zero_gradient<S>(training_.model);
    trace_.record(EventKind::checkpoint_load, global_steps_);
  }

  std::optional<AppliedStep<S>> take_applied_step() override {
    auto out = std::move(applied_);
    applied_.reset();
    return out;
  }
  models::Parameters<S> parameters() const override { return params_; }
  models::OptimizerState<S> optimizer_state() const override { return state_; }
  const Trace& trace() const override { return trace_; }

 private:
  // DeepSpeed's rule, which the scenario's training loop assumes: the caller's override when set, else every
  // G-th step() call.
  bool is_boundary() const {
    return boundary_override_ ? *boundary_override_ : (micro_steps_ + 1) % config_.accumulation_steps == 0;
  }

  models::TrainingSpec training_;
  EngineConfig config_;
  NaiveDdpFaults faults_;
  Trace trace_;
  S inverse_accumulation_steps_;
  std::vector<bool> frozen_;  // [P] never in the optimizer
  models::Parameters<S> params_;
  models::OptimizerState<S> state_;
  models::Gradient<S> grad_;  // .grad of every parameter; present[p] false while it is None
  std::optional<bool> boundary_override_;
  long micro_steps_ = 0;
  long global_steps_ = 0;
  std::optional<AppliedStep<S>> applied_;
};

// The EngineModel that makes NaiveDdpEngine<S> for each scalar; EngineModelOf turns the one create<S> into the
// five virtual factories. Plain DDP replicates everything, so it refuses ZeRO stages and offload; this example
// also keeps everything in the run's scalar, so it refuses 16-bit storage and loss scaling rather than ignore them.
class NaiveDdpEngineModel final : public EngineModelOf<NaiveDdpEngineModel> {
 public:
  explicit NaiveDdpEngineModel(std::string name = "naive-ddp", NaiveDdpFaults faults = {})
      : name_(std::move(name)), faults_(faults) {}

  std::string name() const override { return name_; }
  std::string description() const override {
    return faults_.skip_zero_grad_after_step
               ? "example user engine, PyTorch DDP loop that forgets zero_grad() after step (gradients leak)"
               : "example user engine, PyTorch DDP loop: .grad summed over micro-batches, zero_grad() after step";
  }
  std::string unsupported(const EngineConfig& config) const override {
    if (config.zero_stage != 0 || config.offload)
      return "plain DDP replicates parameters, gradients and optimizer state: it runs zero_stage = 0 without "
             "offload (got zero_stage = " + std::to_string(config.zero_stage) + (config.offload ? ", offload" : "") + ")";
    if (config.precision != Precision::full || config.loss_scaler)
      return "the naive-ddp example computes in the run's scalar only: no 16-bit storage, no loss scaling";
    return {};
  }

  template <class S>
  std::unique_ptr<Engine<S>> create(const Scenario& s, const models::Parameters<S>& p, std::uint64_t /*seed*/,
                                    bool lines) const {
    return std::make_unique<NaiveDdpEngine<S>>(s.training, s.engine, p, lines, faults_);
  }

 private:
  std::string name_;
  NaiveDdpFaults faults_;
};

}  // namespace accumcheck::sim::examples
