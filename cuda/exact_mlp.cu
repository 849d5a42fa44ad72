// exact_mlp.cu: the MLP's per-group gradient sums (cuda/exact_mlp_batch.h) on the device, in integers.
//
// Computes every sum S[g][...] of exact_mlp_batch.h with mlp_entry_sum: one thread per sum (a grid-stride loop, so
// any launch configuration covers every sum), which walks the batch's tokens in order and recomputes each token's
// forward pass in integers (z, relu, r) before adding its term.
// Determinism: exact. lay_out_mlp bounds every intermediate below 2^120, so each sum is the same integer whatever the
// launch configuration and the order.
// Its reference is models/mlp_model-inl.h (accumulate_gradient), through exact_mlp.cpp's to_mlp_gradient; its CPU
// twin is host_mlp_sums, the same function on the host. Nothing here is a reference for anything.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/exact_mlp_kernel.cuh"

namespace accumcheck::cuda {

namespace {

__global__ void exact_mlp_kernel(MlpView v, Int128* sums) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < v.sum_count;
       index += stride)
    sums[index] = mlp_entry_sum(v, index);
}

}  // namespace

void launch_mlp_sums(const MlpView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  if (v.sum_count == 0) return;
  const LaunchShape shape = launch_shape(v.sum_count, launch, 128);
  exact_mlp_kernel<<<shape.grid, shape.block, 0, stream>>>(v, sums);
}

std::vector<Int128> device_mlp_sums(const ExactMlpBatch& b, LaunchConfig launch) {
  const std::size_t n = b.sum_count();
  if (n == 0) return {};
  DeviceMlpBatch device(b);
  DeviceBuffer<Int128> sums(n);
  launch_mlp_sums(device.view(), sums.data(), launch, nullptr);
  check(cudaGetLastError(), "exact_mlp launch");
  std::vector<Int128> out(n);
  check(cudaMemcpy(out.data(), sums.data(), n * sizeof(Int128), cudaMemcpyDeviceToHost), "cudaMemcpy MLP sums");
  return out;
}

}  // namespace accumcheck::cuda
