// float_linear.cu: the linear model's per-group gradient sums (cuda/float_linear_batch.h) on the device in fp32, with
// fp32 or bf16 storage.
//
// One thread per sum (a grid-stride loop), each in linear_float_sum's fixed order with every operation rounded once
// (__fadd_rn, __fsub_rn, __fmul_rn: never contracted into a fused multiply-add).
// Determinism: bit-identical to the CPU twin (host_float_sums) and across launch configurations. Accuracy: within
// float_sum_bounds (models::FloatBound) of the exact sums, which the tests check; the kernel asserts nothing.
// Its reference is models/'s exact gradient through FloatBound's exact value (float_linear.cpp). Nothing here is
// a reference for anything.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/float_linear_batch.h"

namespace accumcheck::cuda {

namespace {

__global__ void float_linear_kernel(LinearView<float> v, float* sums) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < v.sum_count;
       index += stride)
    sums[index] = linear_float_sum(v, index);
}

}  // namespace

std::vector<float> device_float_sums(const FloatLinearBatch& b, LaunchConfig launch) {
  const std::size_t n = b.sum_count();
  if (n == 0) return {};
  DeviceBuffer<float> weights(b.weights.size()), biases(b.biases.size()), features(b.features.size()),
      targets(b.targets.size());
  DeviceBuffer<std::int32_t> expert(b.expert.size()), group(b.group.size());
  DeviceBuffer<std::uint8_t> mask(b.mask.size());
  const LinearView<float> v{b.input_size,          b.output_size,           b.expert_count,
                            b.token_count(),       weights.upload(b.weights), biases.upload(b.biases),
                            features.upload(b.features), targets.upload(b.targets), expert.upload(b.expert),
                            group.upload(b.group), mask.upload(b.mask),    n};
  DeviceBuffer<float> sums(n);
  const LaunchShape shape = launch_shape(n, launch, 256);
  float_linear_kernel<<<shape.grid, shape.block>>>(v, sums.data());
  check(cudaGetLastError(), "float_linear launch");
  std::vector<float> out(n);
  check(cudaMemcpy(out.data(), sums.data(), n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy float sums");
  return out;
}

}  // namespace accumcheck::cuda
