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
#include "cuda/float_kernel.cuh"
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

void launch_float_sums(const LinearView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream) {
  if (v.sum_count == 0) return;
  const LaunchShape shape = launch_shape(v.sum_count, launch, 256);
  float_linear_kernel<<<shape.grid, shape.block, 0, stream>>>(v, sums);
}

std::vector<float> device_float_sums(const FloatLinearBatch& b, LaunchConfig launch) {
  const std::size_t n = b.sum_count();
  if (n == 0) return {};
  const DeviceFloatLinearBatch device(b);
  DeviceBuffer<float> sums(n);
  launch_float_sums(device.view(), sums.data(), launch, nullptr);
  check(cudaGetLastError(), "float_linear launch");
  std::vector<float> out(n);
  check(cudaMemcpy(out.data(), sums.data(), n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy float sums");
  return out;
}

}  // namespace accumcheck::cuda
