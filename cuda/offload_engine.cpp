#include "cuda/offload_engine.h"

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>

#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/float_gradient.h"
#include "cuda/float_linear.h"
#include "cuda/float_models.h"
#include "cuda/host_optimizer.h"
#include "cuda/resident.h"
#include "cuda/token_slices.h"
#include "cuda/twin_sums.h"
#include "models/clipping.h"
#include "models/optimizer.h"
#include "sim/convert.h"
#include "sim/schedule.h"

namespace accumcheck::cuda {

namespace {

// The pipeline's twin over `count` micro-batches of n sums each, micro-batch j's sums by sums_of(j).
template <class Sum, class SumsOf, class Reader>
void run_twin(std::size_t count, std::size_t n, const SumsOf& sums_of, const PipelineSchedule& schedule,
              const Reader& read) {
  if (schedule.delay_ns.size() != count)
    throw std::invalid_argument("run_host_pipeline: the schedule has " + std::to_string(schedule.delay_ns.size()) +
                                " delays for " + std::to_string(count) + " micro-batches");
  std::vector<Sum> slot[2] = {std::vector<Sum>(n, Sum(0)), std::vector<Sum>(n, Sum(0))};
  for (std::size_t j = 0; j < count; ++j) {
    std::vector<Sum>& buffer = slot[j % 2];
    std::vector<Sum> copied = sums_of(j);
    if (copied.size() != n)
      throw std::invalid_argument("run_host_pipeline: every micro-batch of a window must have the same number of sums");
    if (!schedule.wait_for_copy && schedule.delay_ns[j] > 0) {
      read(j, buffer.data());  // the device is late: the copy has not landed yet
      buffer = std::move(copied);
    } else {
      buffer = std::move(copied);
      read(j, buffer.data());
    }
  }
}

template <class Batch, class Reader>
void run_twin(const std::vector<Batch>& window, const PipelineSchedule& schedule, const Reader& read) {
  using Sum = typename decltype(twin_sums(window.front()))::value_type;
  run_twin<Sum>(window.size(), window.empty() ? 0 : window.front().sum_count(),
                [&](std::size_t j) { return twin_sums(window[j]); }, schedule, read);
}

template <class Batch, class Reader>
void run_twin(const Batch& window, const std::vector<TokenRange>& micro_batches, const PipelineSchedule& schedule,
              const Reader& read) {
  for (const TokenRange& r : micro_batches)
    if (r.begin < 0 || r.count < 0 || r.begin + r.count > window.token_count())
      throw std::invalid_argument("run_host_pipeline: a micro-batch's tokens lie outside the window's");
  using Sum = typename decltype(twin_sums(window))::value_type;
  run_twin<Sum>(micro_batches.size(), window.sum_count(),
                [&](std::size_t j) { return twin_sums(tokens_of(window, micro_batches[j])); }, schedule, read);
}

}  // namespace

void run_host_pipeline(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& schedule,
                       const HostReader& read) {
  run_twin(window, schedule, read);
}

void run_host_pipeline(const std::vector<ExactMlpBatch>& window, const PipelineSchedule& schedule,
                       const HostReader& read) {
  run_twin(window, schedule, read);
}

void run_host_pipeline(const std::vector<ExactTiedBatch>& window, const PipelineSchedule& schedule,
                       const HostReader& read) {
  run_twin(window, schedule, read);
}

void run_host_pipeline(const std::vector<FloatLinearBatch>& window, const PipelineSchedule& schedule,
                       const FloatHostReader& read) {
  run_twin(window, schedule, read);
}

void run_host_pipeline(const std::vector<FloatMlpBatch>& window, const PipelineSchedule& schedule,
                       const FloatHostReader& read) {
  run_twin(window, schedule, read);
}

void run_host_pipeline(const std::vector<FloatTiedBatch>& window, const PipelineSchedule& schedule,
                       const FloatHostReader& read) {
  run_twin(window, schedule, read);
}

void run_host_pipeline(const ExactLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const HostReader& read) {
  run_twin(window, micro_batches, schedule, read);
}

void run_host_pipeline(const ExactMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const HostReader& read) {
  run_twin(window, micro_batches, schedule, read);
}

void run_host_pipeline(const ExactTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const HostReader& read) {
  run_twin(window, micro_batches, schedule, read);
}

void run_host_pipeline(const FloatLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const FloatHostReader& read) {
  run_twin(window, micro_batches, schedule, read);
}

void run_host_pipeline(const FloatMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const FloatHostReader& read) {
  run_twin(window, micro_batches, schedule, read);
}

void run_host_pipeline(const FloatTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const FloatHostReader& read) {
  run_twin(window, micro_batches, schedule, read);
}

namespace {

using models::FastRational;
using models::Rational;

std::string variant_name(OffloadVariant v) {
  std::string name = v.resident ? "cuda-resident" : "cuda-offload";
  if (v.fp32) name += "-fp32";
  if (v.backend == OffloadBackend::host_twin) name += "-host-twin";
  return v.synchronised ? name : name + "-nosync";
}

// Whether a device can run the kernels, asked once per process: the answer does not change while it runs.
const std::string& no_device_reason() {
  static const std::string why = [] {
    std::string reason;
    return device_available(&reason) ? std::string() : reason;
  }();
  return why;
}

models::Gradient<Rational> gradient_of(const models::ModelSpec& spec, const ExactLinearBatch& b,
                                       std::span<const Int128> sums, std::span<const Rational> c) {
  return to_gradient(spec, b, sums, c);
}
models::Gradient<Rational> gradient_of(const models::ModelSpec& spec, const ExactMlpBatch& b,
                                       std::span<const Int128> sums, std::span<const Rational> c) {
  return to_mlp_gradient(spec, b, sums, c);
}
models::Gradient<Rational> gradient_of(const models::ModelSpec& spec, const ExactTiedBatch& b,
                                       std::span<const Int128> sums, std::span<const Rational> c) {
  return to_tied_gradient(spec, b, sums, c);
}
template <class FloatBatch>
models::Gradient<float> gradient_of(const models::ModelSpec& spec, const FloatBatch& b, std::span<const float> sums,
                                    std::span<const float> c) {
  return to_float_gradient(spec, b, sums, c);
}

template <class S>
models::Sequence<Rational> exact_sequence(const models::Sequence<S>& seq) {
  if constexpr (std::is_same_v<S, Rational>) {
    return seq;
  } else {
    return {sim::convert_tensor<Rational>(seq.features), seq.token_ids, seq.expert_index,
            sim::convert_tensor<Rational>(seq.targets), seq.loss_mask};
  }
}

// The exact variants run in Rational and FastRational, their sums Int128 and their host accumulator Rational; the
// fp32 variants run in float, with the fp32 kernels' sums and an fp32 accumulator.
template <class S>
class OffloadEngine final : public sim::Engine<S> {
  static constexpr bool kFloat = std::is_same_v<S, float>;
  using Acc = std::conditional_t<kFloat, float, Rational>;  // the host accumulator's and the coefficients' type
  using Sum = std::conditional_t<kFloat, float, Int128>;
  using LinearBatch = std::conditional_t<kFloat, FloatLinearBatch, ExactLinearBatch>;
  using MlpBatch = std::conditional_t<kFloat, FloatMlpBatch, ExactMlpBatch>;
  using TiedBatch = std::conditional_t<kFloat, FloatTiedBatch, ExactTiedBatch>;

 public:
  OffloadEngine(const sim::Scenario& scenario, const models::Parameters<S>& initial, std::uint64_t seed,
                bool keep_trace_lines, OffloadVariant variant)
      : training_(scenario.training),
        config_(scenario.engine),
        variant_(variant),
        trace_(keep_trace_lines),
        schedules_(sim::split_stream(seed, sim::StreamId::offload_pipeline)),
        frozen_(models::frozen_mask(training_.model)),
        params_(initial),
        state_(models::initial_optimizer_state<S>(training_.model)),
        accumulated_(models::zero_gradient<Acc>(training_.model)) {}

  void backward(const sim::RankSequences<S>& data, const sim::RankCoefficients<S>& coefficients) override {
    ACCUMCHECK_ASSERT(static_cast<int>(data.size()) == config_.rank_count);
    ACCUMCHECK_ASSERT(data.size() == coefficients.size());
    trace_.record(sim::EventKind::boundary, micro_steps_, is_boundary());
    // Every rank's sequences on the one device, a group each, its coefficient times 1/G (the engine's scaling) and
    // 1/R (the average over ranks). In fp32 as the simulated engines round them (sim/rank_gradients.h): c times
    // 1/G, then over R.
    const Rational scale(1LL, static_cast<long long>(config_.accumulation_steps) * config_.rank_count);
    const float inverse_g = models::from_rational<float>(Rational(1LL, static_cast<long long>(config_.accumulation_steps)));
    const float ranks = static_cast<float>(config_.rank_count);
    std::vector<models::Sequence<Rational>> sequences;
    Queued queued;
    for (std::size_t r = 0; r < data.size(); ++r) {
      ACCUMCHECK_ASSERT(data[r].size() == coefficients[r].size());
      for (std::size_t i = 0; i < data[r].size(); ++i) {
        sequences.push_back(exact_sequence(data[r][i]));
        if constexpr (kFloat)
          queued.coefficients.push_back(coefficients[r][i] * inverse_g / ranks);
        else
          queued.coefficients.push_back(models::ScalarTraits<S>::to_rational(coefficients[r][i]) * scale);
      }
    }
    // What autograd leaves beyond the tokens' own gradients (models/model.h): every parameter takes part in a
    // micro-batch without tokens; a frozen one never gets a gradient (the host skips it, offload_window).
    models::reset_flags(queued.present_without_tokens, frozen_.size());
    models::mark_present_without_tokens(training_.model, std::span<const models::Sequence<Rational>>(sequences),
                                        queued.present_without_tokens);
    // The window is laid out at the boundary, as one batch: the parameters are uploaded once a window.
    queued.sequences = std::move(sequences);
    window_.push_back(std::move(queued));
    trace_.record(sim::EventKind::backward, micro_steps_, config_.rank_count);
  }

  void set_gradient_accumulation_boundary(bool is_boundary) override { boundary_override_ = is_boundary; }

  void step() override {
    if (!is_boundary()) {
      trace_.record(sim::EventKind::step_not_boundary, micro_steps_);
      ++micro_steps_;
      return;
    }
    if (variant_.resident) {
      if constexpr (kFloat) resident_float_window_and_step();
      else resident_exact_window_and_step();
      finish_step();
      return;
    }
    offload_window();
    // The host optimizer: the global norm over the present gradients, clipping, then the step (parameters without a
    // gradient are skipped, as torch.optim does), its elements split over oneTBB's threads (host_optimizer.h).
    models::Gradient<S> applied = to_scalar(accumulated_);
    sim::AppliedStep<S> record{{}, models::grad_norm(applied), S(1)};
    if (training_.max_grad_norm)
      record.clip_coefficient = models::clip_grad_norm(applied, *training_.max_grad_norm).clip_coefficient;
    host_optimizer_step(training_.optimizer, params_, applied, state_, frozen_);
    record.gradient = std::move(applied);
    applied_ = std::move(record);
    finish_step();
  }

  void finish_step() {
    exact_params_.reset();
    ++global_steps_;
    trace_.record(sim::EventKind::step, global_steps_);
    zero_grad();
    ++micro_steps_;
  }

  void zero_grad() override {
    window_.clear();
    accumulated_ = models::zero_gradient<Acc>(training_.model);
    trace_.record(sim::EventKind::zero_grad);
  }

  sim::EngineCheckpoint<S> save_checkpoint() override {
    if (!window_.empty())
      throw std::logic_error("checkpoint requested in the middle of an accumulation window: save between steps");
    trace_.record(sim::EventKind::checkpoint_save, global_steps_);
    return {params_, state_, micro_steps_, global_steps_};
  }

  void load_checkpoint(const sim::EngineCheckpoint<S>& checkpoint) override {
    params_ = checkpoint.parameters;
    exact_params_.reset();
    state_ = checkpoint.optimizer_state;
    micro_steps_ = checkpoint.micro_steps;
    global_steps_ = checkpoint.global_steps;
    zero_grad();
    trace_.record(sim::EventKind::checkpoint_load, global_steps_);
  }

  std::optional<sim::AppliedStep<S>> take_applied_step() override {
    auto out = std::move(applied_);
    applied_.reset();
    return out;
  }
  models::Parameters<S> parameters() const override { return params_; }
  models::OptimizerState<S> optimizer_state() const override { return state_; }
  const sim::Trace& trace() const override { return trace_; }

 private:
  struct Queued {
    std::vector<models::Sequence<Rational>> sequences;  // laid out at the boundary, with the window
    std::vector<Acc> coefficients;  // [sequence]
    std::vector<bool> present_without_tokens;  // [P]
  };

  // The model's layout of `sequences` at the current parameters, sequence i in group group[i]; a value out of the
  // kernels' range is TargetUnsupported, naming the limit alone (a campaign counts these runs together).
  std::variant<LinearBatch, MlpBatch, TiedBatch> lay_out_batch(const std::vector<models::Sequence<Rational>>& sequences,
                                                               const std::vector<int>& group, int group_count) {
    try {
      // The parameters change only at a step or a checkpoint load: converted once a window, not once a micro-batch.
      if (!exact_params_) exact_params_ = sim::to_exact(params_);
      const models::Parameters<Rational>& exact = *exact_params_;
      if constexpr (kFloat) {
        // fp32 storage of fp32 values: the layouts round nothing.
        if (training_.model.kind == models::ModelKind::mlp)
          return lay_out_float_mlp(training_.model, exact, sequences, group, group_count, FloatStorage::fp32);
        if (training_.model.kind == models::ModelKind::tied_embedding)
          return lay_out_float_tied(training_.model, exact, sequences, group, group_count, FloatStorage::fp32);
        return lay_out_float(training_.model, exact, sequences, group, group_count, FloatStorage::fp32);
      } else {
        if (training_.model.kind == models::ModelKind::mlp)
          return lay_out_mlp(training_.model, exact, sequences, group, group_count);
        if (training_.model.kind == models::ModelKind::tied_embedding)
          return lay_out_tied(training_.model, exact, sequences, group, group_count);
        return lay_out(training_.model, exact, sequences, group, group_count);
      }
    } catch (const ExactRangeError& e) {
      // The reason alone, so that a campaign counts these runs together; the value is in e.what().
      throw sim::TargetUnsupported(variant_name(variant_) + " cannot hold this window in exact integers: " +
                                   to_string(e.limit()));
    } catch (const std::invalid_argument& e) {
      throw sim::TargetUnsupported(variant_name(variant_) + ": " + e.what());
    }
  }

  // The window as one batch: every micro-batch's sequences in order, with their tokens' range; which parameters the
  // window reached (autograd's present flags, frozen ones never). The resident targets' groups: a sequence each
  // across the window, their coefficients in order, and where each micro-batch's groups end. The offload targets'
  // (per_micro_batch): group ids counting from 0 in each micro-batch, as many groups as the largest has sequences,
  // the coefficients [micro-batch][group], 0 where a micro-batch has fewer.
  struct Window {
    std::variant<LinearBatch, MlpBatch, TiedBatch> batch;
    std::vector<Acc> coefficients;
    std::vector<std::int32_t> micro_batch_end;
    std::vector<TokenRange> tokens;
    int groups = 1;
    std::vector<bool> present;
  };
  Window lay_out_window(bool per_micro_batch) {
    Window w;
    std::vector<models::Sequence<Rational>> sequences;
    std::vector<int> group;
    models::reset_flags(w.present, frozen_.size());
    for (const Queued& q : window_) w.groups = std::max(w.groups, static_cast<int>(q.sequences.size()));
    int token = 0;
    // The queued sequences are read nowhere after the layout (zero_grad clears the window): moved, not copied.
    for (Queued& q : window_) {
      const int first = token;
      for (std::size_t i = 0; i < q.sequences.size(); ++i) {
        group.push_back(per_micro_batch ? static_cast<int>(i) : static_cast<int>(sequences.size()));
        token += q.sequences[i].token_count();
        sequences.push_back(std::move(q.sequences[i]));
        if (!per_micro_batch) w.coefficients.push_back(q.coefficients[i]);
      }
      if (per_micro_batch) {
        for (int g = 0; g < w.groups; ++g)
          w.coefficients.push_back(static_cast<std::size_t>(g) < q.sequences.size() ? q.coefficients[static_cast<std::size_t>(g)] : Acc(0));
      }
      w.tokens.push_back({first, token - first});
      w.micro_batch_end.push_back(static_cast<std::int32_t>(sequences.size()));
      for (std::size_t p = 0; p < frozen_.size(); ++p) w.present[p] = w.present[p] || q.present_without_tokens[p];
    }
    if (!per_micro_batch) {
      w.groups = std::max<int>(1, static_cast<int>(sequences.size()));
      if (sequences.empty()) {
        // No sequence: one empty group, coefficient 0, in the last micro-batch (nothing when there is none).
        w.coefficients.push_back(Acc(0));
        if (!w.micro_batch_end.empty()) w.micro_batch_end.back() = 1;
      }
    }
    w.batch = lay_out_batch(sequences, group, w.groups);
    std::visit(
        [&](const auto& b) {
          using B = std::decay_t<decltype(b)>;
          if constexpr (std::is_same_v<B, LinearBatch>) {
            for (int e : b.expert) w.present[2 * static_cast<std::size_t>(e)] = w.present[2 * static_cast<std::size_t>(e) + 1] = true;
          } else if (b.token_count() > 0) {
            std::fill(w.present.begin(), w.present.end(), true);
          }
        },
        w.batch);
    for (std::size_t p = 0; p < frozen_.size(); ++p) w.present[p] = w.present[p] && !frozen_[p];
    return w;
  }

  // The window's gradient placed as models/ writes it: absent and frozen tensors zero and not present.
  template <class T>
  void mark_present(models::Gradient<T>& grad, const std::vector<bool>& present) const {
    for (std::size_t p = 0; p < grad.size(); ++p) {
      grad.present[p] = present[p];
      if (!present[p]) grad.tensors[p].setZero();
    }
  }

  // Exact: the window's sums accumulated on the device (or its twin) in Int256; the host's norm and clipping on the
  // gradient they make; then SGD's step on the device, in integers (window_step.h), or Adam's on the host.
  void resident_exact_window_and_step() {
    if constexpr (!kFloat) {
      Window w = lay_out_window(false);
      std::visit(
          [&](const auto& b) {
            ExactWindowPlan plan;
            try {
              plan = plan_exact_window(b, std::span<const Rational>(w.coefficients));
            } catch (const ExactRangeError& e) {
              throw sim::TargetUnsupported(variant_name(variant_) + " cannot hold this window in exact integers: " +
                                           to_string(e.limit()));
            }
            const bool device_step = training_.optimizer.kind == models::OptimizerKind::sgd;
            std::optional<OptimizerPlan<S>> step_plan;
            ExactSgdPlan sgd;
            const ExactStepOf step_of = [&](const std::vector<Int256>& sums) -> std::optional<ExactSgdStep> {
              accumulated_ = window_gradient(training_.model, b, std::span<const Int256>(sums), plan);
              mark_present(accumulated_, w.present);
              models::Gradient<S> applied = to_scalar(accumulated_);
              sim::AppliedStep<S> record{{}, models::grad_norm(applied), S(1)};
              Rational clip(1);
              if (training_.max_grad_norm) {
                const models::ClipResult<S> r = models::clip_grad_norm(applied, *training_.max_grad_norm);
                record.clip_coefficient = r.clip_coefficient;
                if (r.clipped) clip = models::ScalarTraits<S>::to_rational(r.clip_coefficient);
              }
              std::optional<ExactSgdStep> out;
              if (device_step) {
                step_plan = plan_optimizer_step(training_.optimizer, params_, applied.present, state_, frozen_);
                try {
                  sgd = plan_exact_sgd_step(training_.optimizer, *step_plan, b, plan, params_, state_, clip);
                } catch (const ExactRangeError& e) {
                  throw sim::TargetUnsupported(variant_name(variant_) + " cannot step this window in exact integers: " +
                                               to_string(e.limit()));
                }
                out = sgd.device;
              } else {
                host_optimizer_step(training_.optimizer, params_, applied, state_, frozen_);
              }
              record.gradient = std::move(applied);
              applied_ = std::move(record);
              return out;
            };
            ExactSgdResult result;
            if (variant_.backend == OffloadBackend::host_twin) {
              host_exact_window_step(b, plan.device, step_of, result);
            } else {
              try {
                device_exact_window_step(b, plan.device, step_of, result, LaunchConfig{});
              } catch (const DeviceError& e) {
                throw sim::TargetFault(variant_name(variant_) + ": CUDA failed: " + e.what());
              }
            }
            if (!step_plan) return;
            try {
              store_exact_sgd_step(*step_plan, sgd, result, params_, state_);
            } catch (const ExactRangeError& e) {
              throw sim::TargetUnsupported(variant_name(variant_) + " cannot step this window in exact integers: " +
                                           to_string(e.limit()));
            }
          },
          w.batch);
    }
  }

  // fp32: the window accumulated on the device (or its twin); the host's norm and clipping on the gradient it copies
  // back; the optimizer step on the device, over the elements torch.optim's bookkeeping says step.
  void resident_float_window_and_step() {
    if constexpr (kFloat) {
      Window w = lay_out_window(false);
      const OptimizerPlan<float> plan = plan_optimizer_step(training_.optimizer, params_, w.present, state_, frozen_);
      std::visit(
          [&](const auto& b) {
            const FloatStepPlan step = float_step_plan(training_.optimizer, plan, b, params_);
            FloatStepState state = load_float_step(plan, params_, state_);
            const FloatWindow window{w.coefficients, w.micro_batch_end};
            const ClipOf clip_of = [&](const std::vector<float>& accumulated) -> std::optional<float> {
              models::Gradient<float> applied = window_gradient(training_.model, b, std::span<const float>(accumulated));
              mark_present(applied, w.present);
              sim::AppliedStep<S> record{{}, models::grad_norm(applied), S(1)};
              std::optional<float> clip;
              if (training_.max_grad_norm) {
                const models::ClipResult<float> r = models::clip_grad_norm(applied, *training_.max_grad_norm);
                record.clip_coefficient = r.clip_coefficient;
                if (r.clipped) clip = r.clip_coefficient;
              }
              record.gradient = std::move(applied);
              applied_ = std::move(record);
              return clip;
            };
            if (variant_.backend == OffloadBackend::host_twin) {
              host_float_window_step(b, window, step, state, clip_of);
            } else {
              try {
                device_float_window_step(b, window, step, state, clip_of, LaunchConfig{});
              } catch (const DeviceError& e) {
                throw sim::TargetFault(variant_name(variant_) + ": CUDA failed: " + e.what());
              }
            }
            store_float_step(plan, state, params_, state_);
          },
          w.batch);
    }
  }

  bool is_boundary() const {
    return boundary_override_ ? *boundary_override_ : (micro_steps_ + 1) % config_.accumulation_steps == 0;
  }

  // The window's micro-batches through the pipeline into accumulated_: on the device (or its twin), each copied
  // buffer read by the host and added into the accumulator as a gradient.
  void offload_window() {
    const std::size_t count = window_.size();
    const PipelineSchedule schedule = draw_schedule(schedules_.next(), static_cast<int>(count), variant_.synchronised);
    if (count == 0) return;
    // The schedule, in the trace: which stream copies, and the delay before each micro-batch's kernel.
    trace_.record(sim::EventKind::synchronize, static_cast<std::int64_t>(count), schedule.separate_copy_stream);
    for (std::size_t j = 0; j < count; ++j)
      trace_.record(sim::EventKind::copy_issue, static_cast<std::int64_t>(j), 0, schedule.delay_ns[j]);
    const Window w = lay_out_window(true);
    std::visit([&](const auto& b) { offload_window_of(b, w, schedule); }, w.batch);
  }

  template <class Batch>
  void offload_window_of(const Batch& b, const Window& w, const PipelineSchedule& schedule) {
    const std::size_t sums = b.sum_count(), groups = static_cast<std::size_t>(w.groups);
    const std::function<void(std::size_t, const Sum*)> read = [&](std::size_t j, const Sum* copied) {
      trace_.record(sim::EventKind::offload_accumulate, static_cast<std::int64_t>(j));
      const Queued& q = window_[j];
      // The window's batch gives the shapes, the denominator and which parameters the window reached: a parameter
      // this micro-batch did not reach has sums of zero here, and the window's present flags are the union of its
      // micro-batches'.
      const models::Gradient<Acc> grad = gradient_of(
          training_.model, b, std::span<const Sum>(copied, sums), std::span<const Acc>(w.coefficients).subspan(j * groups, groups));
      // A frozen parameter (requires_grad false) gets no gradient: the host skips what the kernel computed for it.
      for (std::size_t p = 0; p < grad.size(); ++p) {
        if (!(grad.present[p] || q.present_without_tokens[p]) || frozen_[p]) continue;
        accumulated_.present[p] = true;
        accumulated_.tensors[p] += grad.tensors[p];
      }
    };
    if (variant_.backend == OffloadBackend::host_twin) {
      run_host_pipeline(b, w.tokens, schedule, read);
      return;
    }
    try {
      run_offload_pipeline(b, w.tokens, schedule, LaunchConfig{}, read);
    } catch (const DeviceError& e) {
      throw sim::TargetFault(variant_name(variant_) + ": CUDA failed: " + e.what());
    }
  }

  models::Gradient<S> to_scalar(const models::Gradient<Acc>& g) const {
    if constexpr (std::is_same_v<S, Acc>) {
      return g;
    } else {
      models::Gradient<S> out = models::zero_gradient<S>(training_.model);
      out.tensors = sim::convert_tensors<S>(g.tensors);
      out.present = g.present;
      return out;
    }
  }

  models::TrainingSpec training_;
  sim::EngineConfig config_;
  OffloadVariant variant_;
  sim::Trace trace_;
  sim::Stream schedules_;
  std::vector<bool> frozen_;
  models::Parameters<S> params_;  // the host's parameters; each micro-batch uploads them ("copied back")
  std::optional<models::Parameters<Rational>> exact_params_;  // params_ in Rational for the layouts, until they change
  models::OptimizerState<S> state_;
  std::vector<Queued> window_;            // the micro-batches of the open window, laid out
  models::Gradient<Acc> accumulated_;  // the host's gradient accumulator
  std::optional<bool> boundary_override_;
  long micro_steps_ = 0;
  long global_steps_ = 0;
  std::optional<sim::AppliedStep<S>> applied_;
};

template <bool kFloat>
class OffloadEngineModel final : public sim::EngineModelOf<OffloadEngineModel<kFloat>> {
 public:
  using scalars = std::conditional_t<kFloat, sim::Scalars<float>, sim::Scalars<Rational, FastRational>>;

  explicit OffloadEngineModel(OffloadVariant variant) : variant_(variant) {}
  // The fp32 variants compute in fp32 whatever a campaign asks for, as a float adapter does.
  std::optional<sim::ScalarKind> fixed_scalar() const override {
    return kFloat ? std::optional(sim::ScalarKind::fp32) : std::nullopt;
  }
  std::string name() const override { return variant_name(variant_); }
  std::string origin() const override { return "cuda"; }
  // On the device, a run is a sample of the hardware's timing: an unsynchronised read differs from run to run, so
  // every property runs it afresh. The CPU twin draws its delays from the seed alone.
  // The resident variants have no race to sample: the same on the device as in the twin.
  bool deterministic() const override { return variant_.backend == OffloadBackend::host_twin || variant_.resident; }
  std::string description() const override {
    const std::string what = kFloat ? "fp32 " : "";
    if (variant_.resident) {
      if (variant_.backend == OffloadBackend::host_twin)
        return kFloat ? "the CUDA resident window's fp32 CPU twin (no device): accumulated and stepped as the device does"
                      : "the CUDA resident window's CPU twin (no device): accumulated and stepped (SGD) in exact integers";
      return kFloat ? "no offload: fp32 gradients computed and accumulated on the CUDA device, the optimizer stepped there"
                    : "no offload: gradients computed and accumulated on the CUDA device in exact integers, SGD stepped there "
                      "(Adam on the host)";
    }
    const std::string where = variant_.backend == OffloadBackend::device
                                  ? what + "gradients on the CUDA device, copied on streams into pinned host buffers"
                                  : "the CUDA offload pipeline's " + what + "CPU twin (no device)";
    return variant_.synchronised
               ? where + ", accumulated and stepped on the host (" + (kFloat ? "fp32" : "exact integers") + ")"
               : "CANARY: " + where + ", the host reading each buffer without waiting for its copy";
  }
  std::string unsupported(const sim::EngineConfig& config) const override {
    if (config.precision != sim::Precision::full || config.loss_scaler)
      return kFloat ? "the CUDA offload engine's fp32 variant stores fp32: no 16-bit storage, no loss scaling"
                    : "the CUDA offload engine computes in exact integers: no 16-bit storage, no loss scaling";
    if (variant_.backend == OffloadBackend::device && !no_device_reason().empty())
      return "no CUDA device (" + no_device_reason() + ")";
    return {};
  }

  template <class S>
  std::unique_ptr<sim::Engine<S>> create(const sim::Scenario& s, const models::Parameters<S>& p, std::uint64_t seed,
                                         bool lines) const {
    return std::make_unique<OffloadEngine<S>>(s, p, seed, lines, variant_);
  }

 private:
  OffloadVariant variant_;
};

}  // namespace

std::shared_ptr<const sim::EngineModel> make_offload_engine_model(OffloadVariant variant) {
  if (variant.fp32) return std::make_shared<OffloadEngineModel<true>>(variant);
  return std::make_shared<OffloadEngineModel<false>>(variant);
}

std::vector<std::shared_ptr<const sim::EngineModel>> offload_engine_models() {
  std::vector<std::shared_ptr<const sim::EngineModel>> out;
  for (bool fp32 : {false, true})
    for (OffloadBackend backend : {OffloadBackend::device, OffloadBackend::host_twin})
      for (bool synchronised : {true, false}) out.push_back(make_offload_engine_model({backend, synchronised, fp32}));
  for (bool fp32 : {false, true})
    for (OffloadBackend backend : {OffloadBackend::device, OffloadBackend::host_twin})
      out.push_back(make_offload_engine_model({backend, true, fp32, true}));
  return out;
}

}  // namespace accumcheck::cuda
