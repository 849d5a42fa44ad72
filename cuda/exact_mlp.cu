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
#include "cuda/exact_mlp_batch.h"

namespace accumcheck::cuda {

namespace {

__global__ void exact_mlp_kernel(MlpView v, Int128* sums) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < v.sum_count;
       index += stride)
    sums[index] = mlp_entry_sum(v, index);
}

}  // namespace

std::vector<Int128> device_mlp_sums(const ExactMlpBatch& b, LaunchConfig launch) {
  const std::size_t n = b.sum_count();
  if (n == 0) return {};
  DeviceBuffer<std::int64_t> w1(b.w1.size()), b1(b.b1.size()), w2(b.w2.size()), b2(b.b2.size()),
      features(b.features.size()), targets(b.targets.size());
  DeviceBuffer<std::int32_t> group(b.group.size());
  DeviceBuffer<std::uint8_t> mask(b.mask.size());
  const MlpView v{b.input_size,         b.hidden_size,        b.output_size,    b.token_count(),
                  b.denominator,        w1.upload(b.w1),     b1.upload(b.b1), w2.upload(b.w2),
                  b2.upload(b.b2),     features.upload(b.features), targets.upload(b.targets),
                  group.upload(b.group), mask.upload(b.mask), n};
  DeviceBuffer<Int128> sums(n);
  const int block = launch.block_size > 0 ? launch.block_size : 128;
  const std::size_t needed = (n + static_cast<std::size_t>(block) - 1) / static_cast<std::size_t>(block);
  const int grid = launch.grid_size > 0 ? launch.grid_size : static_cast<int>(needed < 65535 ? needed : 65535);
  exact_mlp_kernel<<<grid, block>>>(v, sums.data());
  check(cudaGetLastError(), "exact_mlp launch");
  std::vector<Int128> out(n);
  check(cudaMemcpy(out.data(), sums.data(), n * sizeof(Int128), cudaMemcpyDeviceToHost), "cudaMemcpy MLP sums");
  return out;
}

}  // namespace accumcheck::cuda
