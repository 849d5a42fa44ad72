// DeepSpeedZeroEngine<S>: a behavioural model of DeepSpeed's ZeRO stage 1 and 2 optimizer
// (deepspeed/runtime/zero/stage_1_and_2.py) under its engine (deepspeed/runtime/engine.py), release by release.
//
// It follows the upstream state machine as read from the source of each band (docs/upstream-notes.md has
// the file and line references; docs/targets.md the prose):
//   engine:    micro_steps (+1 at every engine.step()), global_steps, the sticky boundary override,
//              boundary = override or (micro_steps + 1) % G == 0, loss * 1/G before backward.
//   optimizer: micro_step_id m and ready_for_gradients; the reduction epilogue after every backward (ZeRO-2)
//              or only after the boundary backward (ZeRO-1, where autograd sums into .grad meanwhile).
//   offload:   per owned parameter, copy_grads_in_partition: GATE then ACCUMULATE_RULE on the never-zeroed
//              host buffer cpu_buf; at the boundary the squared norm entry and an overwrite of fp32_grad.
//   no offload: averaged_gradients / all_grad_tensors accumulation, whose test changed in v0.17.6 (#7509)
//              and again in v0.18.3 (#7665).
//   step():    m := -1; norm from the norm entries (offload) or from averaged_gradients; clip; the optimizer
//              on the flat fp32 partition: one step counter per group, and every trainable element updated,
//              a parameter without a gradient counting as zeros (offload: as its stale fp32_grad slice).
//
// | band | releases        | m: init, +1                                       | GATE           | RULE                          |
// | A    | <= 0.15.1       | 0; start of every backward                        | G > 1          | m>0: acc; not boundary: save  |
// | B1   | 0.15.2 - 0.16.4 | -1; start of every backward                       | G > 1          | m>0: acc, else save           |
// | B2   | 0.16.5 - 0.18.9 | -1; first backward/hook after each epilogue       | G > 1          | as B1                         |
// | C    | >= 0.19.0       | as B2                                             | m>0 or not bnd | m>0: acc; always save         |
// ZeRO-1 with offload in bf16 (grad_accum_dtype fp32, so use_grad_accum_attribute), every release before 0.19.8:
// get_gradient_for_reduction returns a bf16 copy of param.grad_accum, reduce_independent_p_g_buckets_and_remove_grads
// points that copy (not grad_accum) at the reduced bucket, and copy_grads_in_partition then reads grad_accum:
// each rank's partition steps on its own rank's unreduced gradient (the reduction is computed and discarded).
// 0.19.8 returns grad_accum itself, so the reduced bucket reaches the partition. The owning rank of an element
// is ZeRO's: trainable elements in order, padded to a multiple of 2R, partitions of equal size.
// 0.19.8 with bf16 (fp32 gradient accumulation, _use_compact_grad_partition_buffer): every reduction adds into a
// compact fp32 partition that step() drops, whatever the boundary says; without offload step() applies it, with
// offload each boundary overwrites the fp32 gradient (and norm entry) of the parameters reduced then with it. No
// cpu_buf, and none of the rules below (the counter, GATE and RULE, the non-offload sub-bands).
// Non-offload accumulation: <= 0.17.5 correct; 0.17.6 - 0.18.2 overwrite per epilogue (only the last
// micro-batch survives in ZeRO-2; a second boundary epilogue before step() raises TypeError); >= 0.18.3
// correct, but averaged_gradients is rebuilt at every boundary epilogue.
//
// Deliberate simplifications, each exact in real arithmetic: norm entries keep the squared norm (DeepSpeed
// takes a root per parameter and squares it again, which would add a rounding the model is not about); all
// ranks follow the same control flow, so per-element state is kept once with ownership only deciding which
// rank would hold it; host/device staging copies are synchronous (DeepSpeed waits on them).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine.h"
#include "sim/flat_layout.h"
#include "sim/precision.h"
#include "sim/update_memo.h"
#include "sim/rank_gradients.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::sim {

struct DeepSpeedVersion {
  int major = 0, minor = 0, patch = 0;

  static std::optional<DeepSpeedVersion> parse(std::string_view text);
  std::string to_string() const;
  friend auto operator<=>(const DeepSpeedVersion&, const DeepSpeedVersion&) = default;
};

enum class DeepSpeedBand { A, B1, B2, C };
DeepSpeedBand band_of(const DeepSpeedVersion& v);
std::string_view to_string(DeepSpeedBand band);
std::string deepspeed_description(const DeepSpeedVersion& v);

// Raised where the modelled release raises (e.g. v0.17.6 - v0.18.2: TypeError in the reduction epilogue).
class EngineCrash : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class S>
class DeepSpeedZeroEngine final : public Engine<S> {
 public:
  DeepSpeedZeroEngine(DeepSpeedVersion version, const models::TrainingSpec& training, const EngineConfig& config,
                      const models::Parameters<S>& initial, std::uint64_t schedule_seed, bool keep_trace_lines);

  // Makes this engine what the constructor given these arguments makes, keeping the storage its buffers already
  // have: a thread's finished engine is handed to its next run this way (sim/target.cpp). The constructor is this
  // reset on default members, so that a reset engine cannot differ from a new one.
  void reset(DeepSpeedVersion version, const models::TrainingSpec& training, const EngineConfig& config,
             const models::Parameters<S>& initial, std::uint64_t schedule_seed, bool keep_trace_lines);

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
  void give_back(AppliedStep<S>&& taken) override { spare_gradient_ = std::move(taken.gradient); }

 private:
  enum class NonOffloadRule { accumulate, overwrite_until_boundary, rebuild_at_boundary };

  bool engine_boundary() const {
    return boundary_override_ ? *boundary_override_ : (micro_steps_ + 1) % config_.accumulation_steps == 0;
  }
  void bump_micro_step_id_if_not_ready();
  void copy_grads_in_partition(std::size_t p, std::vector<S>& grad_dev, bool boundary);
  void reduction_epilogue(const std::vector<S>& grad_dev, const std::vector<bool>& present, bool boundary);
  void compact_epilogue(const std::vector<S>& grad_dev, const std::vector<bool>& present, bool boundary);
  void reset_after_step();
  void clear_zero1_sums();

  DeepSpeedVersion version_;
  DeepSpeedBand band_;
  NonOffloadRule non_offload_rule_;
  bool counter_in_hook_only_;  // v0.18.3+: setup_buckets runs only from a gradient hook
  bool zero1_partition_from_own_rank_;  // ZeRO-1 + offload + bf16 before v0.19.8 (see above)
  bool compact_partition_;              // bf16 from v0.19.8: the compact fp32 gradient partition (see above)
  models::TrainingSpec training_;
  EngineConfig config_;
  FlatLayout layout_;
  std::vector<bool> frozen_;
  Trace trace_;
  Stream arrival_{0};
  S inverse_accumulation_steps_;

  // Engine state.
  std::optional<bool> boundary_override_;
  long micro_steps_ = 0;
  long global_steps_ = 0;
  // Optimizer state.
  int micro_step_id_ = 0;
  bool ready_for_gradients_ = false;
  std::vector<S> zero1_grad_sum_;        // ZeRO-1: autograd's running sum in .grad (already rank-averaged)
  std::vector<bool> zero1_present_;
  std::vector<int> zero1_owner_;         // ZeRO's owning rank of each element; -1 for frozen elements
  std::vector<S> zero1_own_rank_sum_;    // per element: its owner's unreduced running sum (grad_accum)
  std::vector<bool> zero1_own_rank_has_;  // per element: its owner has had a gradient for it in this window
  std::vector<S> cpu_buf_;               // accumulated_grads_in_cpu, per element
  std::vector<bool> cpu_buf_created_;    // per parameter, created lazily, never zeroed
  std::vector<S> compact_;               // v0.19.8 bf16: the compact fp32 gradient partition, dropped by step()
  std::vector<S> fp32_grad_;             // the host fp32 gradient partition: allocated as zeros, never zeroed
  std::vector<std::optional<S>> norm_sq_;  // norm_for_param_grads, per parameter (squared; see above)
  std::optional<std::vector<S>> averaged_gradients_;
  std::optional<std::vector<S>> all_grad_tensors_;
  // Master weights and optimizer state on the flat partition.
  std::vector<S> master_params_, first_moment_, second_moment_;
  long group_step_count_ = 0;
  bool has_momentum_buffer_ = false;
  std::optional<AppliedStep<S>> applied_;
  models::Gradient<S> spare_gradient_;  // a taken step's gradient given back (give_back), for step() to write over
  // backward()'s scratch, kept from one micro-batch to the next and, with the engine kept per thread
  // (sim/target.cpp), from one run to the next; written whole before every read: the bit16 parameters, each rank's
  // gradient and their average.
  models::Parameters<S> params_view_;
  std::vector<models::Gradient<S>> rank_grads_;
  ReducedGradient<S> reduced_;
};

}  // namespace accumcheck::sim

#include "sim/deepspeed_zero-inl.h"
