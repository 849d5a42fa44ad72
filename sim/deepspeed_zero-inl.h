// Template bodies for deepspeed_zero.h.
#pragma once

#include "models/model.h"

namespace accumcheck::sim {

template <class S>
DeepSpeedZeroEngine<S>::DeepSpeedZeroEngine(DeepSpeedVersion version, const models::TrainingSpec& training,
                                            const EngineConfig& config, const models::Parameters<S>& initial,
                                            std::uint64_t schedule_seed, bool keep_trace_lines)
    : layout_(training.model) {
  reset(version, training, config, initial, schedule_seed, keep_trace_lines);
}

template <class S>
void DeepSpeedZeroEngine<S>::reset(DeepSpeedVersion version, const models::TrainingSpec& training,
                                   const EngineConfig& config, const models::Parameters<S>& initial,
                                   std::uint64_t schedule_seed, bool keep_trace_lines) {
  version_ = version;
  band_ = band_of(version);
  non_offload_rule_ = version < DeepSpeedVersion{0, 17, 6}   ? NonOffloadRule::accumulate
                      : version < DeepSpeedVersion{0, 18, 3} ? NonOffloadRule::overwrite_until_boundary
                                                             : NonOffloadRule::rebuild_at_boundary;
  counter_in_hook_only_ = !(version < DeepSpeedVersion{0, 18, 3});
  zero1_partition_from_own_rank_ = config.zero_stage == 1 && config.offload && config.precision == Precision::bf16 &&
                                   version < DeepSpeedVersion{0, 19, 8};
  compact_partition_ = config.precision == Precision::bf16 && !(version < DeepSpeedVersion{0, 19, 8});
  training_ = training;
  config_ = config;
  layout_.assign(training.model);
  frozen_ = models::frozen_mask(training.model);
  trace_.reset(keep_trace_lines);
  arrival_ = split_stream(schedule_seed, StreamId::arrival_order);
  inverse_accumulation_steps_ = models::from_rational<S>(Rational(1LL, static_cast<long long>(config.accumulation_steps)));
  boundary_override_.reset();
  micro_steps_ = 0;
  global_steps_ = 0;
  micro_step_id_ = band_ == DeepSpeedBand::A ? 0 : -1;
  ready_for_gradients_ = false;
  averaged_gradients_.reset();
  all_grad_tensors_.reset();
  group_step_count_ = 0;
  has_momentum_buffer_ = false;
  applied_.reset();
  reshape_tensors(training.model, params_view_.tensors);
  ACCUMCHECK_ASSERT(config.zero_stage == 1 || config.zero_stage == 2);
  const std::size_t N = layout_.total, P = layout_.offset.size();
  zero1_grad_sum_.assign(N, S(0));
  models::reset_flags(zero1_present_, P);
  zero1_own_rank_sum_.assign(N, S(0));
  models::reset_flags(zero1_own_rank_has_, N);
  // flatten_dense_tensors_aligned(trainable params, nccl_start_alignment_factor (2) * R), then R equal partitions.
  // The position of an element in that buffer is PyTorch's (row-major within each parameter), not Eigen's
  // column-major flat index f.
  const std::size_t R = static_cast<std::size_t>(config.rank_count);
  std::size_t trainable = 0;
  for (std::size_t f = 0; f < N; ++f) trainable += frozen_[static_cast<std::size_t>(layout_.param_of[f])] ? 0 : 1;
  const std::size_t per_rank = 2 * ((trainable + 2 * R - 1) / (2 * R));
  zero1_owner_.assign(N, -1);
  const auto shapes = models::parameter_shapes(training.model);
  std::size_t trainable_before = 0;  // trainable elements of the parameters before p
  for (std::size_t p = 0; p < P; ++p) {
    if (frozen_[p]) continue;
    const auto rows = static_cast<std::size_t>(shapes[p].first), cols = static_cast<std::size_t>(shapes[p].second);
    for (std::size_t i = 0; i < layout_.size[p]; ++i) {
      const std::size_t row_major = (i % rows) * cols + i / rows;  // Eigen's index i is row i % rows, column i / rows
      zero1_owner_[layout_.offset[p] + i] = static_cast<int>((trainable_before + row_major) / per_rank);
    }
    trainable_before += layout_.size[p];
  }
  cpu_buf_.assign(N, S(0));
  models::reset_flags(cpu_buf_created_, P);
  fp32_grad_.assign(N, S(0));
  compact_.assign(N, S(0));
  norm_sq_.assign(P, std::nullopt);
  layout_.flatten_into(initial.tensors, master_params_);
  first_moment_.assign(N, S(0));
  second_moment_.assign(N, S(0));
}

template <class S>
void DeepSpeedZeroEngine<S>::bump_micro_step_id_if_not_ready() {
  // B2 and C: backward_prologue (<= 0.18.2) / setup_buckets (>= 0.18.3), guarded by ready_for_gradients.
  if (!ready_for_gradients_) {
    ++micro_step_id_;
    ready_for_gradients_ = true;
  }
}

template <class S>
void DeepSpeedZeroEngine<S>::backward(const RankSequences<S>& data, const RankCoefficients<S>& coefficients) {
  const bool boundary = engine_boundary();  // engine copies it into optimizer.is_gradient_accumulation_boundary
  trace_.record(EventKind::boundary, micro_steps_, boundary);
  // optimizer.backward: bands A and B1 count every backward; B2 <= 0.18.2 runs backward_prologue here.
  if (band_ == DeepSpeedBand::A || band_ == DeepSpeedBand::B1) ++micro_step_id_;
  else if (!counter_in_hook_only_) bump_micro_step_id_if_not_ready();

  models::Parameters<S>& params = params_view_;
  layout_.unflatten(master_params_, params.tensors);
  round_to_storage(params.tensors, config_.precision);  // the bit16 copy of the fp32 partition
  std::vector<models::Gradient<S>>& rank_grads = rank_grads_;
  reshape_gradients(training_.model, data.size(), rank_grads);
  for (std::size_t r = 0; r < data.size(); ++r) {
    rank_gradient_into(training_.model, params, data[r], coefficients[r], inverse_accumulation_steps_, rank_grads[r]);
    round_to_storage(rank_grads[r].tensors, config_.precision);
  }
  trace_.record(EventKind::backward, micro_steps_, config_.rank_count);
  ReducedGradient<S>& reduced = reduced_;
  average_over_ranks_into(layout_, rank_grads, arrival_, reduced);
  for (std::size_t p = 0; p < frozen_.size(); ++p)
    if (frozen_[p]) reduced.present[p] = false;  // not in the optimizer's groups: no hook, no reduction

  bool any_hook = false;
  for (bool present : reduced.present) any_hook = any_hook || present;

  if (config_.zero_stage == 2) {
    // Hooks fire for each parameter that got a gradient; the first one sets up the buckets (>= 0.18.3).
    if (any_hook && counter_in_hook_only_ && band_ != DeepSpeedBand::A && band_ != DeepSpeedBand::B1)
      bump_micro_step_id_if_not_ready();
    trace_.record(EventKind::reduce_bucket, 0, 0, static_cast<std::int64_t>(layout_.total));
    std::vector<S> grad_dev = std::move(reduced.flat);
    if (compact_partition_) {
      compact_epilogue(grad_dev, reduced.present, boundary);
      return;
    }
    if (config_.offload) {
      for (std::size_t p = 0; p < frozen_.size(); ++p)
        if (reduced.present[p]) copy_grads_in_partition(p, grad_dev, boundary);
    }
    reduction_epilogue(grad_dev, reduced.present, boundary);  // every backward under ZeRO-2
    return;
  }

  // ZeRO-1: autograd keeps summing into .grad; the hooks (which may bump the counter) reduce nothing until the
  // boundary, where reduce_gradients runs once on the sum.
  if (any_hook && counter_in_hook_only_ && band_ != DeepSpeedBand::A && band_ != DeepSpeedBand::B1)
    bump_micro_step_id_if_not_ready();
  for (std::size_t f = 0; f < layout_.total; ++f) zero1_grad_sum_[f] += reduced.flat[f];
  for (std::size_t p = 0; p < frozen_.size(); ++p) zero1_present_[p] = zero1_present_[p] || reduced.present[p];
  for (std::size_t f = 0; zero1_partition_from_own_rank_ && f < layout_.total; ++f) {  // only that path reads it
    const int owner = zero1_owner_[f];
    if (owner < 0) continue;
    const auto& own = rank_grads[static_cast<std::size_t>(owner)];
    const auto p = static_cast<std::size_t>(layout_.param_of[f]);
    if (!own.present[p]) continue;
    zero1_own_rank_sum_[f] += own.tensors[p](static_cast<Eigen::Index>(f - layout_.offset[p]));
    zero1_own_rank_has_[f] = true;
  }
  if (!boundary) return;
  trace_.record(EventKind::reduce_bucket, 0, 0, static_cast<std::int64_t>(layout_.total));
  std::vector<S> grad_dev = zero1_grad_sum_;
  const std::vector<bool> present = zero1_present_;
  if (zero1_partition_from_own_rank_) {
    for (std::size_t f = 0; f < layout_.total; ++f) {
      const auto p = static_cast<std::size_t>(layout_.param_of[f]);
      if (!present[p]) continue;
      if (!zero1_own_rank_has_[f])
        throw TargetUnsupported("deepspeed@" + version_.to_string() + " ZeRO-1 + offload in bf16: rank " +
                                std::to_string(zero1_owner_[f]) + " owns part of parameter " + std::to_string(p) +
                                " but had no gradient for it while another rank had; the ranks then reduce different "
                                "buckets, which the model does not follow");
      grad_dev[f] = zero1_own_rank_sum_[f];
    }
  }
  if (compact_partition_) {
    compact_epilogue(grad_dev, present, boundary);
  } else {
    if (config_.offload)
      for (std::size_t p = 0; p < frozen_.size(); ++p)
        if (present[p]) copy_grads_in_partition(p, grad_dev, boundary);
    reduction_epilogue(grad_dev, present, boundary);
  }
  clear_zero1_sums();  // epilogue: .grad = None, grad_accum = None
}

template <class S>
void DeepSpeedZeroEngine<S>::copy_grads_in_partition(std::size_t p, std::vector<S>& grad_dev, bool boundary) {
  const std::size_t begin = layout_.offset[p], end = begin + layout_.size[p];
  const int m = micro_step_id_;
  const bool gate = band_ == DeepSpeedBand::C ? (m > 0 || !boundary) : config_.accumulation_steps > 1;
  if (gate) {
    if (!cpu_buf_created_[p]) {  // lazily, as zeros, once
      std::fill(cpu_buf_.begin() + static_cast<std::ptrdiff_t>(begin), cpu_buf_.begin() + static_cast<std::ptrdiff_t>(end), S(0));
      cpu_buf_created_[p] = true;
    }
    const bool accumulate = m > 0;
    const bool save = band_ == DeepSpeedBand::A ? !boundary
                      : band_ == DeepSpeedBand::C ? true
                                                  : !accumulate;  // B1, B2: "else: save"
    if (accumulate) {
      for (std::size_t f = begin; f < end; ++f) grad_dev[f] += cpu_buf_[f];
      trace_.record(EventKind::offload_accumulate, static_cast<std::int64_t>(p), m);
    }
    if (save) {
      for (std::size_t f = begin; f < end; ++f) cpu_buf_[f] = grad_dev[f];
      trace_.record(EventKind::offload_save, static_cast<std::int64_t>(p), m);
    }
  }
  if (boundary) {
    S squared(0);
    for (std::size_t f = begin; f < end; ++f) squared += grad_dev[f] * grad_dev[f];
    norm_sq_[p] = squared;
    for (std::size_t f = begin; f < end; ++f) fp32_grad_[f] = grad_dev[f];  // overwrite, not add
    trace_.record(EventKind::offload_overwrite, static_cast<std::int64_t>(p));
  }
}

template <class S>
void DeepSpeedZeroEngine<S>::compact_epilogue(const std::vector<S>& grad_dev, const std::vector<bool>& present,
                                              bool boundary) {
  // _add_full_reduction_to_compact_grad_partition: every reduced parameter adds into the compact partition; with
  // offload, copy_grads_in_partition at a boundary writes its slice (and norm entry) from it.
  for (std::size_t p = 0; p < present.size(); ++p) {
    if (!present[p]) continue;
    const std::size_t begin = layout_.offset[p], end = begin + layout_.size[p];
    for (std::size_t f = begin; f < end; ++f) compact_[f] += grad_dev[f];
    if (config_.offload && boundary) {
      S squared(0);
      for (std::size_t f = begin; f < end; ++f) squared += compact_[f] * compact_[f];
      norm_sq_[p] = squared;
      for (std::size_t f = begin; f < end; ++f) fp32_grad_[f] = compact_[f];
      trace_.record(EventKind::offload_overwrite, static_cast<std::int64_t>(p));
    }
  }
  ready_for_gradients_ = false;
  trace_.record(EventKind::zero_grad);
}

template <class S>
void DeepSpeedZeroEngine<S>::reduction_epilogue(const std::vector<S>& grad_dev, const std::vector<bool>& present,
                                                bool boundary) {
  if (!config_.offload) {
    // The reduced partition of owned parameters; a parameter without a gradient contributes zeros.
    std::vector<S> reduced(layout_.total, S(0));
    for (std::size_t p = 0; p < present.size(); ++p)
      if (present[p])
        for (std::size_t f = layout_.offset[p]; f < layout_.offset[p] + layout_.size[p]; ++f) reduced[f] = grad_dev[f];
    switch (non_offload_rule_) {
      case NonOffloadRule::accumulate:
        if (!averaged_gradients_) averaged_gradients_ = std::move(reduced);
        else
          for (std::size_t f = 0; f < layout_.total; ++f) (*averaged_gradients_)[f] += reduced[f];
        break;
      case NonOffloadRule::overwrite_until_boundary:
        // v0.17.6 - v0.18.2 tests averaged_gradients, which is None for the whole window.
        if (!averaged_gradients_) {
          all_grad_tensors_ = std::move(reduced);
        } else {
          if (!all_grad_tensors_)
            throw EngineCrash("deepspeed@" + version_.to_string() +
                              " raises TypeError in the ZeRO reduction epilogue: a second boundary backward before "
                              "step() adds into all_grad_tensors, which the first one set to None");
          for (std::size_t f = 0; f < layout_.total; ++f) (*all_grad_tensors_)[f] += reduced[f];
        }
        if (boundary) {
          averaged_gradients_ = std::move(all_grad_tensors_);
          all_grad_tensors_.reset();
        }
        break;
      case NonOffloadRule::rebuild_at_boundary:
        if (!all_grad_tensors_) all_grad_tensors_ = std::move(reduced);
        else
          for (std::size_t f = 0; f < layout_.total; ++f) (*all_grad_tensors_)[f] += reduced[f];
        if (boundary) {
          averaged_gradients_ = std::move(all_grad_tensors_);  // replaces whatever an earlier boundary left
          all_grad_tensors_.reset();
        }
        break;
    }
  }
  // _release_ipg_buffers: the next backward (or hook) sets up buckets again.
  ready_for_gradients_ = false;
  trace_.record(EventKind::zero_grad);
}

template <class S>
void DeepSpeedZeroEngine<S>::step() {
  if (!engine_boundary()) {
    trace_.record(EventKind::step_not_boundary, micro_steps_);
    ++micro_steps_;
    return;
  }
  micro_step_id_ = -1;  // the first statement of the optimizer's step()
  std::vector<S> grad;
  S squared(0);
  if (config_.offload) {
    grad = fp32_grad_;
    for (const auto& entry : norm_sq_)
      if (entry) squared += *entry;  // parameters without an entry are skipped (ignore_unused_parameters)
  } else {
    grad = compact_partition_ ? compact_ : averaged_gradients_ ? *averaged_gradients_ : std::vector<S>(layout_.total, S(0));
    models::add_squares(squared, std::span<const S>(grad));
  }
  AppliedStep<S> record{reuse_gradient(training_.model, spare_gradient_), models::ScalarTraits<S>::sqrt(squared), S(1)};
  models::reset_flags(record.gradient.present, frozen_.size());  // every flag and a frozen tensor's zeros written below
  // unscale_and_clip_grads: combined = max(1, (norm + 1e-6) / clip); grad /= combined.
  if (training_.max_grad_norm) {
    const S coef = models::clip_coefficient(record.grad_norm, *training_.max_grad_norm);
    if (coef < S(1)) {
      record.clip_coefficient = coef;
      for (S& g : grad) g *= coef;
    }
  }
  if (config_.offload) fp32_grad_ = grad;  // scaled in place: a stale slice keeps the clipped value
  for (std::size_t p = 0; p < frozen_.size(); ++p) {
    record.gradient.present[p] = !frozen_[p];
    if (frozen_[p]) record.gradient.tensors[p].fill(S(0));
  }
  for (std::size_t f = 0; f < layout_.total; ++f)
    if (!frozen_[static_cast<std::size_t>(layout_.param_of[f])]) {
      const auto p = static_cast<std::size_t>(layout_.param_of[f]);
      record.gradient.tensors[p](static_cast<Eigen::Index>(f - layout_.offset[p])) = grad[f];
    }
  // The wrapped optimizer on the flat fp32 partition: one step counter for the group, every trainable element.
  ++group_step_count_;
  const models::StepConstants<S> k = models::step_constants<S>(training_.optimizer, group_step_count_, !has_momentum_buffer_);
  if (training_.optimizer.kind == models::OptimizerKind::sgd && training_.optimizer.momentum.sign() != 0) has_momentum_buffer_ = true;
  const ElementUpdate<S> update(training_.optimizer, k);  // handed on between a trial's runs (sim/update_memo.h)
  for (std::size_t f = 0; f < layout_.total; ++f)
    if (!frozen_[static_cast<std::size_t>(layout_.param_of[f])])
      update(master_params_[f], grad[f], first_moment_[f], second_moment_[f]);
  ++global_steps_;
  trace_.record(EventKind::step, global_steps_);
  applied_ = std::move(record);
  reset_after_step();
  ++micro_steps_;
}

template <class S>
void DeepSpeedZeroEngine<S>::reset_after_step() {
  // reset_cpu_buffers (norm entries), averaged_gradients = None, optimizer.zero_grad (set_to_none). cpu_buf and
  // fp32_grad are never reset.
  std::fill(norm_sq_.begin(), norm_sq_.end(), std::nullopt);
  averaged_gradients_.reset();
  all_grad_tensors_.reset();
  std::fill(compact_.begin(), compact_.end(), S(0));  // averaged_gradients[i] = None drops the compact partition
  clear_zero1_sums();
}

template <class S>
void DeepSpeedZeroEngine<S>::clear_zero1_sums() {
  std::fill(zero1_grad_sum_.begin(), zero1_grad_sum_.end(), S(0));
  std::fill(zero1_present_.begin(), zero1_present_.end(), false);
  std::fill(zero1_own_rank_sum_.begin(), zero1_own_rank_sum_.end(), S(0));
  std::fill(zero1_own_rank_has_.begin(), zero1_own_rank_has_.end(), false);
}

template <class S>
void DeepSpeedZeroEngine<S>::zero_grad() {
  // engine.zero_grad -> optimizer.zero_grad(set_to_none): .grad and grad_accum.
  clear_zero1_sums();
  trace_.record(EventKind::zero_grad);
}

template <class S>
EngineCheckpoint<S> DeepSpeedZeroEngine<S>::save_checkpoint() {
  trace_.record(EventKind::checkpoint_save, global_steps_);
  return {parameters(), optimizer_state(), micro_steps_, global_steps_};
}

template <class S>
void DeepSpeedZeroEngine<S>::load_checkpoint(const EngineCheckpoint<S>& checkpoint) {
  // state_dict holds parameters, optimizer state and counters; cpu_buf, micro_step_id and ready_for_gradients
  // are not in it, so a resumed engine starts them fresh (this object was just constructed).
  master_params_ = layout_.flatten(checkpoint.parameters.tensors);
  first_moment_ = layout_.flatten(checkpoint.optimizer_state.first_moment);
  second_moment_ = layout_.flatten(checkpoint.optimizer_state.second_moment);
  group_step_count_ = 0;
  for (std::size_t p = 0; p < frozen_.size(); ++p)
    if (!frozen_[p]) group_step_count_ = std::max(group_step_count_, checkpoint.optimizer_state.step_count[p]);
  has_momentum_buffer_ = false;
  for (bool b : checkpoint.optimizer_state.has_momentum_buffer) has_momentum_buffer_ = has_momentum_buffer_ || b;
  micro_steps_ = checkpoint.micro_steps;
  global_steps_ = checkpoint.global_steps;
  trace_.record(EventKind::checkpoint_load, global_steps_);
}

template <class S>
models::Parameters<S> DeepSpeedZeroEngine<S>::parameters() const {
  models::Parameters<S> params = models::zero_parameters<S>(training_.model);
  layout_.unflatten(master_params_, params.tensors);
  return params;
}

template <class S>
models::OptimizerState<S> DeepSpeedZeroEngine<S>::optimizer_state() const {
  models::OptimizerState<S> state = models::initial_optimizer_state<S>(training_.model);
  layout_.unflatten(first_moment_, state.first_moment);
  layout_.unflatten(second_moment_, state.second_moment);
  for (std::size_t p = 0; p < frozen_.size(); ++p) {
    state.step_count[p] = frozen_[p] ? 0 : group_step_count_;
    state.has_momentum_buffer[p] = !frozen_[p] && has_momentum_buffer_;
  }
  return state;
}

}  // namespace accumcheck::sim
