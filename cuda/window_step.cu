// window_step.cu: the cuda-resident targets' window on the device. The window, laid out as one batch (a group per
// sequence), is uploaded once, with the parameters; its sums are computed in one launch of the model's kernel and
// stay in device memory; the accumulation kernel folds them over the window (window_step.h):
//   exact: A[e] = sum_g M[g][k(e)] S[g][e] in Int256, copied back once for the host's norm and clipping;
//          then, for SGD, the exact step kernel forms each stepped element's new parameter and momentum buffer as
//          numerators over the host's denominators, checked in 256 bits, from A still on the device;
//   fp32:  acc[e] = sum over micro-batches m, in order, of (sum over m's groups, in order, of c_g S[g][e]), copied
//          back once for the host's norm and clipping; then the optimizer step kernel steps every stepped element in
//          place (theta, first and second moment) from acc, times the clip coefficient, and those come back.
// One thread per entry or element, in grid-stride loops, nothing shared between threads.
// Determinism: the exact sums are integers (order- and launch-independent); every fp32 operation is one
// __fadd_rn, __fmul_rn, __fdiv_rn or __fsqrt_rn in a fixed order, so the results are bit-identical to the CPU twins
// (resident.cpp) and across launch configurations. The references are models/ (models::optimizer_step,
// the models' backward), through the twins' tests, never anything in this file.
#include <cuda_runtime.h>

#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/launch_sums.cuh"
#include "cuda/window_step.h"

namespace accumcheck::cuda {

namespace {

__global__ void exact_window_kernel(ExactWindowView v, Int256* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < v.per_group; e += stride)
    out[e] = exact_window_entry(v, e);
}

__global__ void float_window_kernel(FloatWindowView v, float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < v.per_group; e += stride)
    out[e] = float_window_entry(v, e);
}

__global__ void exact_step_kernel(ExactSgdStepView v) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < v.elements; i += stride)
    exact_sgd_step_at(v, i);
}

__global__ void float_step_kernel(FloatStepView v) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < v.elements; i += stride)
    float_step_at(v, i);
}

template <class T>
std::vector<T> copy_back(const DeviceBuffer<T>& buffer, const char* what) {
  std::vector<T> out(buffer.size());
  if (!out.empty()) check(cudaMemcpy(out.data(), buffer.data(), out.size() * sizeof(T), cudaMemcpyDeviceToHost), what);
  return out;
}

template <class Device, class Batch>
std::vector<Int256> exact_window(const Batch& batch, const ExactWindowMultipliers& m, const ExactStepOf& step_of,
                                 ExactSgdResult& result, LaunchConfig launch) {
  const std::size_t per_group = m.exponent.size(), groups = static_cast<std::size_t>(batch.group_count);
  if (batch.sum_count() != groups * per_group || m.multipliers.size() != groups * kExponentCount)
    throw std::invalid_argument("device_exact_window: the multipliers do not fit the batch");
  result = {};
  Device device(batch);
  DeviceBuffer<Int128> sums(batch.sum_count());
  if (batch.sum_count() > 0) {
    launch_sums(device, sums.data(), launch, nullptr);
    check(cudaGetLastError(), "window sums launch");
  }
  DeviceBuffer<std::int64_t> multipliers(m.multipliers.size());
  DeviceBuffer<std::uint8_t> exponent(per_group);
  const ExactWindowView view{sums.data(), multipliers.upload(m.multipliers), exponent.upload(m.exponent), groups,
                             per_group};
  DeviceBuffer<Int256> out(per_group);
  if (per_group > 0) {
    const LaunchShape shape = launch_shape(per_group, launch, 128);
    exact_window_kernel<<<shape.grid, shape.block>>>(view, out.data());
    check(cudaGetLastError(), "exact window launch");
  }
  const std::vector<Int256> accumulated = copy_back(out, "exact window copy back");
  if (!step_of) return accumulated;
  const std::optional<ExactSgdStep> step = step_of(accumulated);  // the host's norm, clipping and bookkeeping
  if (!step || step->param.empty()) return accumulated;
  const std::size_t elements = step->param.size();
  if (step->buffer.size() != elements || step->entry_of.size() != elements || step->terms_of.size() != elements ||
      step->param_terms.size() != step->buffer_terms.size())
    throw std::invalid_argument("device_exact_window_step: the step's arrays do not fit");
  DeviceBuffer<std::int64_t> param(elements);
  DeviceBuffer<Int256> buffer(elements), param_out(elements), buffer_out(elements);
  DeviceBuffer<std::int32_t> entry_of(elements), terms_of(elements);
  DeviceBuffer<ExactStepTerms> param_terms(step->param_terms.size()), buffer_terms(step->buffer_terms.size());
  DeviceBuffer<std::uint8_t> overflow(elements);
  // The gradient is the accumulation's output, still on the device.
  const ExactSgdStepView on_device{param.upload(step->param), out.data(), buffer.upload(step->buffer),
                                   entry_of.upload(step->entry_of), terms_of.upload(step->terms_of),
                                   param_terms.upload(step->param_terms), buffer_terms.upload(step->buffer_terms),
                                   param_out.data(), buffer_out.data(), overflow.data(), elements};
  const LaunchShape shape = launch_shape(elements, launch, 256);
  exact_step_kernel<<<shape.grid, shape.block>>>(on_device);
  check(cudaGetLastError(), "exact step launch");
  result.param = copy_back(param_out, "exact step copy back");
  result.buffer = copy_back(buffer_out, "exact step copy back");
  result.overflow = copy_back(overflow, "exact step copy back");
  return accumulated;
}

template <class Device, class Batch>
std::vector<float> float_window_step(const Batch& batch, const FloatWindow& w, const FloatStepPlan& plan,
                                     FloatStepState& state, const ClipOf& clip_of, LaunchConfig launch) {
  const std::size_t groups = static_cast<std::size_t>(batch.group_count);
  const std::size_t per_group = groups == 0 ? 0 : batch.sum_count() / groups;
  const std::size_t elements = state.theta.size();
  if (w.coefficients.size() != groups || (!w.micro_batch_end.empty() && w.micro_batch_end.back() != static_cast<std::int32_t>(groups)) ||
      plan.constants_of.size() != elements || plan.entry_of.size() != elements || state.first.size() != elements ||
      state.second.size() != elements)
    throw std::invalid_argument("device_float_window_step: the window or the step does not fit the batch");
  Device device(batch);
  DeviceBuffer<float> sums(batch.sum_count());
  if (batch.sum_count() > 0) {
    launch_sums(device, sums.data(), launch, nullptr);
    check(cudaGetLastError(), "window sums launch");
  }
  DeviceBuffer<float> coefficients(groups);
  DeviceBuffer<std::int32_t> ends(w.micro_batch_end.size());
  const FloatWindowView view{sums.data(), coefficients.upload(w.coefficients), ends.upload(w.micro_batch_end),
                             w.micro_batch_end.size(), per_group};
  DeviceBuffer<float> gradient(per_group);
  if (per_group > 0) {
    const LaunchShape shape = launch_shape(per_group, launch, 128);
    float_window_kernel<<<shape.grid, shape.block>>>(view, gradient.data());
    check(cudaGetLastError(), "float window launch");
  }
  const std::vector<float> accumulated = copy_back(gradient, "float window copy back");
  const std::optional<float> clip = clip_of(accumulated);  // the host's norm and clipping
  if (elements == 0) return accumulated;
  DeviceBuffer<float> theta(elements), first(elements), second(elements);
  DeviceBuffer<FloatStepConstants> constants(plan.constants.size());
  DeviceBuffer<std::int32_t> constants_of(elements), entry_of(elements);
  const FloatStepView step{theta.data(), first.data(), second.data(), gradient.data(),
                           constants.upload(plan.constants), constants_of.upload(plan.constants_of),
                           entry_of.upload(plan.entry_of), elements, clip.value_or(1.0f),
                           static_cast<std::uint8_t>(clip.has_value())};
  theta.upload(state.theta.data());
  first.upload(state.first.data());
  second.upload(state.second.data());
  const LaunchShape shape = launch_shape(elements, launch, 256);
  float_step_kernel<<<shape.grid, shape.block>>>(step);
  check(cudaGetLastError(), "float step launch");
  state.theta = copy_back(theta, "float step copy back");
  state.first = copy_back(first, "float step copy back");
  state.second = copy_back(second, "float step copy back");
  return accumulated;
}

}  // namespace

std::vector<Int256> device_exact_window(const ExactLinearBatch& batch, const ExactWindowMultipliers& m, LaunchConfig launch) {
  ExactSgdResult none;
  return exact_window<DeviceBatch>(batch, m, nullptr, none, launch);
}
std::vector<Int256> device_exact_window(const ExactMlpBatch& batch, const ExactWindowMultipliers& m, LaunchConfig launch) {
  ExactSgdResult none;
  return exact_window<DeviceMlpBatch>(batch, m, nullptr, none, launch);
}
std::vector<Int256> device_exact_window(const ExactTiedBatch& batch, const ExactWindowMultipliers& m, LaunchConfig launch) {
  ExactSgdResult none;
  return exact_window<DeviceTiedBatch>(batch, m, nullptr, none, launch);
}
std::vector<Int256> device_exact_window_step(const ExactLinearBatch& batch, const ExactWindowMultipliers& m,
                                             const ExactStepOf& step_of, ExactSgdResult& result, LaunchConfig launch) {
  return exact_window<DeviceBatch>(batch, m, step_of, result, launch);
}
std::vector<Int256> device_exact_window_step(const ExactMlpBatch& batch, const ExactWindowMultipliers& m,
                                             const ExactStepOf& step_of, ExactSgdResult& result, LaunchConfig launch) {
  return exact_window<DeviceMlpBatch>(batch, m, step_of, result, launch);
}
std::vector<Int256> device_exact_window_step(const ExactTiedBatch& batch, const ExactWindowMultipliers& m,
                                             const ExactStepOf& step_of, ExactSgdResult& result, LaunchConfig launch) {
  return exact_window<DeviceTiedBatch>(batch, m, step_of, result, launch);
}

std::vector<float> device_float_window_step(const FloatLinearBatch& batch, const FloatWindow& window,
                                            const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of,
                                            LaunchConfig launch) {
  return float_window_step<DeviceFloatLinearBatch>(batch, window, plan, state, clip_of, launch);
}
std::vector<float> device_float_window_step(const FloatMlpBatch& batch, const FloatWindow& window,
                                            const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of,
                                            LaunchConfig launch) {
  return float_window_step<DeviceFloatMlpBatch>(batch, window, plan, state, clip_of, launch);
}
std::vector<float> device_float_window_step(const FloatTiedBatch& batch, const FloatWindow& window,
                                            const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of,
                                            LaunchConfig launch) {
  return float_window_step<DeviceFloatTiedBatch>(batch, window, plan, state, clip_of, launch);
}

}  // namespace accumcheck::cuda
