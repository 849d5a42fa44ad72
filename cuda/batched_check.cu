// batched_check.cu: many trials of property 1 on the three models in one launch (batched_check.h), each checked
// against its exact expectation on the device; the host reads back one flag per trial.
//
// Computes, for every entry of every trial (a grid-stride loop over all of them, so any launch configuration covers
// every entry), batched_entry_fails (batched_entry.h): the sum over the trial's supervised tokens of d_t times the
// token's gradient entry in Int128 (the MLP's and the tied embedding's recomputing the token's forward pass), and sets
// the trial's flag when it is not zero on a tensor that is not frozen.
// Determinism: exact. Every intermediate is an integer below 2^120 (batched_trials.cpp bounds each trial before
// adding it), so every flag is the same whatever the launch configuration; several threads may set one flag, all
// to 1.
// Its reference is property 1 on the CPU path (fuzz::check_pair), which run_batched_campaign runs on every flagged
// trial and the tests on every trial; host_batched_failures is its CPU twin. Nothing here is a reference.
#include <cuda_runtime.h>

#include "cuda/batched_check.h"
#include "cuda/batched_entry.h"
#include "cuda/cuda_check.h"

namespace accumcheck::cuda {

namespace {

__global__ void batched_check_kernel(BatchedView v, std::uint8_t* failed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < v.entry_count;
       index += stride)
    if (batched_entry_fails(v, index)) failed[v.entry_trial[index]] = 1;
}

}  // namespace

std::vector<std::uint8_t> device_batched_failures(const BatchedTrials& t, LaunchConfig launch) {
  const std::size_t trials = static_cast<std::size_t>(t.trial_count());
  if (trials == 0) return {};
  DeviceBuffer<std::int32_t> model(trials), input_size(trials), output_size(trials), expert_count(trials),
      hidden_size(trials);
  DeviceBuffer<std::int64_t> denominator(trials), weight_begin(trials), bias_begin(trials), token_begin(trials + 1),
      entry_begin(trials + 1);
  DeviceBuffer<std::uint64_t> frozen(trials);
  DeviceBuffer<std::int64_t> feature_begin(t.feature_begin.size()), target_begin(t.target_begin.size()),
      weight_difference(t.weight_difference.size());
  DeviceBuffer<std::int32_t> route(t.route.size()), entry_trial(t.entry_trial.size());
  DeviceBuffer<std::int64_t> weights(t.weights.size()), biases(t.biases.size()), features(t.features.size()),
      targets(t.targets.size());
  const BatchedView v{model.upload(t.model),               input_size.upload(t.input_size),
                      output_size.upload(t.output_size),   expert_count.upload(t.expert_count),
                      hidden_size.upload(t.hidden_size),   denominator.upload(t.denominator),
                      frozen.upload(t.frozen_tensors),     weight_begin.upload(t.weight_begin),
                      bias_begin.upload(t.bias_begin),     token_begin.upload(t.token_begin),
                      entry_begin.upload(t.entry_begin),   feature_begin.upload(t.feature_begin),
                      target_begin.upload(t.target_begin), weight_difference.upload(t.weight_difference),
                      route.upload(t.route),               weights.upload(t.weights),
                      biases.upload(t.biases),             features.upload(t.features),
                      targets.upload(t.targets),           entry_trial.upload(t.entry_trial),
                      t.entry_count()};
  DeviceBuffer<std::uint8_t> failed(trials);
  check(cudaMemset(failed.data(), 0, trials), "cudaMemset failed flags");
  if (v.entry_count > 0) {
    const LaunchShape shape = launch_shape(v.entry_count, launch, 256);
    batched_check_kernel<<<shape.grid, shape.block>>>(v, failed.data());
    check(cudaGetLastError(), "batched_check launch");
  }
  std::vector<std::uint8_t> out(trials);
  check(cudaMemcpy(out.data(), failed.data(), trials, cudaMemcpyDeviceToHost), "cudaMemcpy failed flags");
  return out;
}

}  // namespace accumcheck::cuda
