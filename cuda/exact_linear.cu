// exact_linear.cu: the linear model's per-group gradient sums (cuda/exact_batch.h) on the device, in integers.
//
// Computes S[g][e][o][k] of exact_batch.h: one thread per sum (a grid-stride loop, so any launch configuration
// covers every sum), which walks the batch's tokens in order and adds r_t[o] * x_t[k] for the supervised tokens of
// its group and expert, with r_t[o] = b_e[o] D + sum_i W_e[o][i] x_t[i] - y_t[o] D recomputed per token.
// Determinism: exact. Every product and sum is an Int128 that cannot overflow (bounds in exact_batch.h, checked
// by lay_out), so each sum is the same integer whatever the launch configuration, the stream and the order.
// Its reference is models/linear_model-inl.h (accumulate_gradient), through exact_linear.cpp's to_gradient; the
// CPU twin of this kernel is host_sums (exact_linear.cpp). Nothing here is a reference for anything.
#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/exact_linear_kernel.cuh"

namespace accumcheck::cuda {

namespace {

__global__ void exact_sums_kernel(BatchView b, Int128* sums) {
  const int in = b.input_size, out = b.output_size;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < b.sum_count;
       index += stride) {
    const auto [g, e, o, k] = linear_sum_index(index, in, out, b.expert_count);
    const std::int64_t one = b.denominator;
    const std::int64_t* w = b.weights + (static_cast<std::size_t>(e) * out + o) * in;
    const Int128 bias = static_cast<Int128>(b.biases[static_cast<std::size_t>(e) * out + o]) * one;
    Int128 total = 0;
    for (int t = 0; t < b.token_count; ++t) {
      if (!b.mask[t] || b.group[t] != g || b.expert[t] != e) continue;
      const std::int64_t* x = b.features + static_cast<std::size_t>(t) * in;
      Int128 r = bias - static_cast<Int128>(b.targets[static_cast<std::size_t>(t) * out + o]) * one;
      for (int i = 0; i < in; ++i) r += static_cast<Int128>(w[i]) * x[i];
      total += r * (k < in ? x[k] : one);
    }
    sums[index] = total;
  }
}

}  // namespace

void launch_exact_sums(const BatchView& b, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  if (b.sum_count == 0) return;
  const LaunchShape shape = launch_shape(b.sum_count, launch, 256);
  exact_sums_kernel<<<shape.grid, shape.block, 0, stream>>>(b, sums);
}

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount found no CUDA device";
    return false;
  }
  return true;
}

std::string device_name() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  return std::string(properties.name) + " (sm_" + std::to_string(properties.major) + std::to_string(properties.minor) + ")";
}

std::vector<Int128> device_sums(const ExactLinearBatch& batch, LaunchConfig launch) {
  DeviceBatch device(batch);
  DeviceBuffer<Int128> sums(batch.sum_count());
  launch_exact_sums(device.view(), sums.data(), launch, nullptr);
  check(cudaGetLastError(), "exact_sums launch");
  std::vector<Int128> out(batch.sum_count());
  check(cudaMemcpy(out.data(), sums.data(), out.size() * sizeof(Int128), cudaMemcpyDeviceToHost), "cudaMemcpy sums");
  return out;
}

}  // namespace accumcheck::cuda
