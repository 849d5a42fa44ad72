// Template bodies for reference_engine.h.
#pragma once

namespace accumcheck::sim {

template <class S>
ReferenceEngine<S>::ReferenceEngine(const models::TrainingSpec& training, const EngineConfig& config,
                                    const models::Parameters<S>& initial, std::uint64_t schedule_seed,
                                    bool keep_trace_lines, ReferenceFaults faults)
    : training_(training),
      config_(config),
      layout_(training.model),
      trace_(keep_trace_lines),
      arrival_(split_stream(schedule_seed, StreamId::arrival_order)),
      copies_(split_stream(schedule_seed, StreamId::copy_completion), trace_),
      faults_(faults),
      inverse_accumulation_steps_(models::from_rational<S>(Rational(1LL, static_cast<long long>(config.accumulation_steps)))) {
  reset_state(initial);
}

template <class S>
void ReferenceEngine<S>::reset(const models::TrainingSpec& training, const EngineConfig& config,
                               const models::Parameters<S>& initial, std::uint64_t schedule_seed,
                               bool keep_trace_lines, ReferenceFaults faults) {
  // The members the constructor's initialisers set, in their order, then the state every new engine starts in.
  const bool same_model = training.model == training_.model;
  training_ = training;
  config_ = config;
  if (!same_model) layout_.assign(training_.model);
  trace_.reset(keep_trace_lines);
  arrival_ = split_stream(schedule_seed, StreamId::arrival_order);
  copies_.reset(split_stream(schedule_seed, StreamId::copy_completion));  // drops what the last run left pending
  faults_ = faults;
  inverse_accumulation_steps_ = models::from_rational<S>(Rational(1LL, static_cast<long long>(config.accumulation_steps)));
  reset_state(initial);
}

template <class S>
void ReferenceEngine<S>::reset_state(const models::Parameters<S>& initial) {
  const auto R = static_cast<std::size_t>(config_.rank_count);
  const std::size_t N = layout_.total, P = layout_.offset.size();
  // A buffer is reused only where nothing else holds it (a copy still pending would); else it is made anew.
  const auto fresh_buffer = [](std::shared_ptr<Buffer<S>>& buffer, const auto& fill) {
    if (buffer && buffer.use_count() == 1) fill(*buffer);
    else {
      buffer = std::make_shared<Buffer<S>>();
      fill(*buffer);
    }
  };
  layout_.flatten_into(initial.tensors, master_params_);
  // device_parameters' scratch, written whole before every read, and every rank's gradient, written whole (values
  // and presence) by rank_gradient_into before any read: only their shapes matter.
  reshape_tensors(training_.model, device_view_.tensors);
  reshape_gradients(training_.model, R, rank_grads_);
  device_params_.resize(R);
  for (auto& device : device_params_) fresh_buffer(device, [&](Buffer<S>& b) { b = master_params_; });
  first_moment_.assign(N, S(0));
  second_moment_.assign(N, S(0));
  step_count_.assign(P, 0);
  models::reset_flags(has_momentum_buffer_, P);
  if (config_.zero_stage <= 1 && !config_.offload) {
    device_grad_acc_.resize(R);
    for (auto& acc : device_grad_acc_) acc.assign(N, S(0));
  } else {
    device_grad_acc_.clear();
  }
  fresh_buffer(partitioned_grad_acc_, [&](Buffer<S>& b) { b.assign(N, S(0)); });
  models::reset_flags(grad_present_, P);
  has_pending_gradient_ = false;
  scaler_.reset();
  if (config_.loss_scaler) scaler_.emplace(*config_.loss_scaler);
  overflow_ = false;
  boundary_override_.reset();
  updates_skipped_ = false;
  micro_steps_ = 0;
  global_steps_ = 0;
  applied_.reset();
}

template <class S>
const models::Parameters<S>& ReferenceEngine<S>::device_parameters(int rank) {
  models::Parameters<S>& params = device_view_;
  if (config_.zero_stage == 3) {
    // All-gather: every owner contributes its slice of its own device buffer.
    std::vector<S> gathered(layout_.total);
    for (int owner = 0; owner < config_.rank_count; ++owner) {
      const PartitionRange range = partition(owner);
      for (std::size_t f = range.begin; f < range.end; ++f) gathered[f] = (*device_params_[static_cast<std::size_t>(owner)])[f];
    }
    layout_.unflatten(gathered, params.tensors);
  } else {
    layout_.unflatten(*device_params_[static_cast<std::size_t>(rank)], params.tensors);
  }
  round_to_storage(params.tensors, config_.precision);  // bit16 copies of the fp32 master weights
  return params;
}

template <class S>
void ReferenceEngine<S>::backward(const RankSequences<S>& data, const RankCoefficients<S>& coefficients) {
  ACCUMCHECK_ASSERT(static_cast<int>(data.size()) == config_.rank_count);
  ACCUMCHECK_ASSERT(data.size() == coefficients.size());
  // Rule 2: parameters copied back after the last step must have landed before this forward reads them.
  if (copies_.pending_count() > 0) copies_.synchronize();
  trace_.record(EventKind::boundary, micro_steps_, is_boundary());
  if (config_.zero_stage == 3) trace_.record(EventKind::all_gather, static_cast<std::int64_t>(layout_.total));
  const S loss_scale = scaler_ ? models::from_rational<S>(scaler_->scale()) : S(1);
  for (int r = 0; r < config_.rank_count; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    const std::vector<S>* rank_coefficients = &coefficients[ri];
    if (scaler_) {
      scaled_coefficients_ = coefficients[ri];
      for (S& c : scaled_coefficients_) c *= loss_scale;
      rank_coefficients = &scaled_coefficients_;
    }
    models::Gradient<S>& grad = rank_grads_[ri];
    rank_gradient_into(training_.model, device_parameters(r), data[ri], *rank_coefficients, inverse_accumulation_steps_, grad);
    round_to_storage(grad.tensors, config_.precision);  // .grad is stored in the 16-bit type
    for (const auto& t : grad.tensors)
      for (Eigen::Index i = 0; i < t.size(); ++i) overflow_ = overflow_ || !models::ScalarTraits<S>::is_finite(t(i));
  }
  trace_.record(EventKind::backward, micro_steps_, config_.rank_count);
  average_over_ranks_into(layout_, rank_grads_, arrival_, reduced_);
  reduce_into_accumulators(reduced_);
  has_pending_gradient_ = true;
}

template <class S>
void ReferenceEngine<S>::reduce_into_accumulators(const ReducedGradient<S>& reduced) {
  for (std::size_t p = 0; p < grad_present_.size(); ++p) grad_present_[p] = grad_present_[p] || reduced.present[p];
  const std::size_t N = layout_.total;
  const std::size_t bucket = config_.bucket_element_count > 0 ? static_cast<std::size_t>(config_.bucket_element_count) : std::max<std::size_t>(N, 1);
  const std::size_t bucket_count = (N + bucket - 1) / bucket;
  // Buckets fill in the order autograd's hooks fire: the last parameters first.
  for (std::size_t b = bucket_count; b-- > 0;) {
    const std::size_t begin = b * bucket, end = std::min(N, begin + bucket);
    trace_.record(EventKind::reduce_bucket, static_cast<std::int64_t>(b), static_cast<std::int64_t>(begin),
                  static_cast<std::int64_t>(end - begin));
    if (config_.offload) {
      // Reduce-scatter to the owners, then each owner's device slice of the bucket goes to the host
      // accumulator asynchronously. Each copy reads its own device buffer, not reused before the copy has landed.
      for (int owner = 0; owner < config_.rank_count; ++owner) {
        const PartitionRange range = partition(owner);
        const std::size_t lo = std::max(begin, range.begin), hi = std::min(end, range.end);
        if (lo >= hi) continue;
        auto staging = staging_buffer(reduced.flat.data() + lo, reduced.flat.data() + hi);
        copies_.issue(CopyDirection::device_to_host, std::move(staging), partitioned_grad_acc_, lo,
                      CopyQueue<S>::Op::add);
      }
      copies_.poll();
    } else if (config_.zero_stage <= 1) {
      for (auto& acc : device_grad_acc_)  // all-reduce: every rank adds the same average
        for (std::size_t f = begin; f < end; ++f) acc[f] += reduced.flat[f];
    } else {
      Buffer<S>& acc = *partitioned_grad_acc_;  // reduce-scatter: each element to its owner only
      for (std::size_t f = begin; f < end; ++f) acc[f] += reduced.flat[f];
    }
  }
}

template <class S>
std::shared_ptr<Buffer<S>> ReferenceEngine<S>::staging_buffer(const S* first, const S* last) {
  for (auto& buffer : staging_)
    if (buffer.use_count() == 1) {
      buffer->assign(first, last);
      return buffer;
    }
  auto buffer = std::make_shared<Buffer<S>>(first, last);
  if (staging_.size() < kStagingMax) staging_.push_back(buffer);
  return buffer;
}

template <class S>
void ReferenceEngine<S>::step() {
  if (!is_boundary()) {
    trace_.record(EventKind::step_not_boundary, micro_steps_);
    ++micro_steps_;
    return;
  }
  // Rule 2: every gradient copy must have landed before the optimizer reads the accumulator.
  if (config_.offload && !faults_.skip_synchronize_before_step) copies_.synchronize();
  // The gradient the optimizer sees, assembled from the owners (stage <= 1 without offload: rank 0's copy,
  // which equals every other rank's after the all-reduce).
  std::vector<S>& grad = step_grad_;
  grad = (config_.zero_stage <= 1 && !config_.offload) ? device_grad_acc_[0] : *partitioned_grad_acc_;
  models::Gradient<S> applied = reuse_gradient(training_.model, spare_gradient_);  // unflatten writes it whole
  applied.present = grad_present_;
  for (std::size_t p = 0; p < grad_present_.size(); ++p)
    if (!grad_present_[p])
      for (std::size_t i = 0; i < layout_.size[p]; ++i) grad[layout_.offset[p] + i] = S(0);
  layout_.unflatten(grad, applied.tensors);
  if (scaler_) {
    // Overflow anywhere in the window skips the step and backs the scale off; otherwise unscale.
    const bool skip = overflow_ ? (scaler_->record_overflow(), true) : !scaler_->unscale_or_skip(applied);
    if (skip) {
      ++global_steps_;
      trace_.record(EventKind::skip_step, global_steps_);
      zero_grad();
      ++micro_steps_;
      return;
    }
    layout_.flatten_into(applied.tensors, grad);
  }
  // Global norm: each owner's partial sum of squares, all-reduced, one root. Left untaken in an exact run after
  // skip_updates() where no clipping needs it: nothing reads it (the sum and the root were 2% of property 1's
  // trial at the peer's sizes).
  const bool take_norm = !(updates_skipped_ && !training_.max_grad_norm && models::ScalarTraits<S>::exact);
  S squared(0);
  if (take_norm)
    for (int owner = 0; owner < config_.rank_count; ++owner) {
      S partial(0);
      const PartitionRange range = partition(owner);
      models::add_squares(partial, std::span<const S>(grad.data() + range.begin, range.size()));
      squared += partial;
    }
  AppliedStep<S> record{std::move(applied), take_norm ? models::ScalarTraits<S>::sqrt(squared) : S(0), S(1), take_norm};
  if (training_.max_grad_norm) {
    const S coef = models::clip_coefficient(record.grad_norm, *training_.max_grad_norm);
    if (coef < S(1)) {
      record.clip_coefficient = coef;
      for (S& g : grad) g *= coef;
      // The applied gradient is grad's tensors (an absent one's zeros, which stay zero): copied, not multiplied
      // a second time, since a clipped exact product goes through GMP.
      layout_.unflatten(grad, record.gradient.tensors);
    }
  }
  // Each owner updates its slice with the shared elementwise rule (models/optimizer.h), unless the caller reads
  // nothing after this step but its applied gradient (skip_updates).
  if (!updates_skipped_) {
    std::vector<models::StepConstants<S>>& constants = step_constants_;
    constants.clear();
    constants.reserve(grad_present_.size());  // no reallocation: the updates below point into it
    models::StepConstantsMemo<S> memo;
    for (std::size_t p = 0; p < grad_present_.size(); ++p) {
      if (!grad_present_[p]) {
        constants.emplace_back();
        continue;
      }
      ++step_count_[p];
      constants.push_back(memo.get(training_.optimizer, step_count_[p], !has_momentum_buffer_[p]));
      if (training_.optimizer.kind == models::OptimizerKind::sgd && training_.optimizer.momentum.sign() != 0)
        has_momentum_buffer_[p] = true;
    }
    // models::update_element per element, handed on between a trial's runs in an exact run (sim/update_memo.h).
    std::vector<ElementUpdate<S>>& updates = step_updates_;
    updates.clear();
    updates.reserve(constants.size());
    for (const auto& k : constants) updates.emplace_back(training_.optimizer, k);
    for (int owner = 0; owner < config_.rank_count; ++owner) {
      const PartitionRange range = config_.zero_stage == 0 ? PartitionRange{0, layout_.total} : partition(owner);
      if (config_.zero_stage == 0 && owner > 0) break;  // replicated: every rank computes the same update
      for (std::size_t f = range.begin; f < range.end; ++f) {
        const auto p = static_cast<std::size_t>(layout_.param_of[f]);
        if (!grad_present_[p]) continue;
        updates[p](master_params_[f], grad[f], first_moment_[f], second_moment_[f]);
      }
    }
  }
  ++global_steps_;
  trace_.record(EventKind::step, global_steps_);
  publish_parameters();
  applied_ = std::move(record);
  zero_grad();
  ++micro_steps_;
}

template <class S>
void ReferenceEngine<S>::publish_parameters() {
  // All-gather the updated slices into every rank's device parameters (stage 3 keeps only its own slice);
  // with offload these are host-to-device copies that the next forward waits for.
  std::shared_ptr<const Buffer<S>> source;  // one buffer the copies read, only where there are copies
  if (config_.offload) source = staging_buffer(master_params_.data(), master_params_.data() + master_params_.size());
  for (int r = 0; r < config_.rank_count; ++r) {
    auto& device = device_params_[static_cast<std::size_t>(r)];
    if (config_.offload) {
      copies_.issue(CopyDirection::host_to_device, source, device, 0, CopyQueue<S>::Op::overwrite);
    } else {
      *device = master_params_;
    }
  }
  if (!config_.offload) trace_.record(EventKind::all_gather, static_cast<std::int64_t>(layout_.total));
}

template <class S>
void ReferenceEngine<S>::zero_grad() {
  // Gradient copies still in flight belong to the window being cleared: let them land first, then clear.
  if (config_.offload && copies_.pending_count() > 0) copies_.synchronize();
  for (auto& acc : device_grad_acc_) std::fill(acc.begin(), acc.end(), S(0));
  std::fill(partitioned_grad_acc_->begin(), partitioned_grad_acc_->end(), S(0));
  std::fill(grad_present_.begin(), grad_present_.end(), false);
  has_pending_gradient_ = false;
  overflow_ = false;
  trace_.record(EventKind::zero_grad);
}

template <class S>
EngineCheckpoint<S> ReferenceEngine<S>::save_checkpoint() {
  if (has_pending_gradient_)
    throw std::logic_error("checkpoint requested in the middle of an accumulation window: save between steps");
  if (copies_.pending_count() > 0) copies_.synchronize();
  trace_.record(EventKind::checkpoint_save, global_steps_);
  return {parameters(), optimizer_state(), micro_steps_, global_steps_};
}

template <class S>
void ReferenceEngine<S>::load_checkpoint(const EngineCheckpoint<S>& checkpoint) {
  master_params_ = layout_.flatten(checkpoint.parameters.tensors);
  for (auto& device : device_params_) *device = master_params_;
  first_moment_ = layout_.flatten(checkpoint.optimizer_state.first_moment);
  second_moment_ = layout_.flatten(checkpoint.optimizer_state.second_moment);
  step_count_ = checkpoint.optimizer_state.step_count;
  has_momentum_buffer_ = checkpoint.optimizer_state.has_momentum_buffer;
  micro_steps_ = checkpoint.micro_steps;
  global_steps_ = checkpoint.global_steps;
  zero_grad();
  trace_.record(EventKind::checkpoint_load, global_steps_);
}

template <class S>
models::Parameters<S> ReferenceEngine<S>::parameters() const {
  models::Parameters<S> params = models::zero_parameters<S>(training_.model);
  layout_.unflatten(master_params_, params.tensors);
  return params;
}

template <class S>
models::OptimizerState<S> ReferenceEngine<S>::optimizer_state() const {
  models::OptimizerState<S> state = models::initial_optimizer_state<S>(training_.model);
  layout_.unflatten(first_moment_, state.first_moment);
  layout_.unflatten(second_moment_, state.second_moment);
  state.step_count = step_count_;
  state.has_momentum_buffer = has_momentum_buffer_;
  return state;
}

}  // namespace accumcheck::sim
