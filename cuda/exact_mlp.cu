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
#include "cuda/entry_kernel.cuh"
#include "cuda/exact_mlp_kernel.cuh"

namespace accumcheck::cuda {

namespace {
struct MlpEntry {
  __device__ static Int128 sum(const MlpView& v, std::size_t index) { return mlp_entry_sum(v, index); }
};
}  // namespace

void launch_mlp_sums(const MlpView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_entry_sums<MlpEntry>(v, sums, launch, stream);
}

std::vector<Int128> device_mlp_sums(const ExactMlpBatch& b, LaunchConfig launch) {
  return device_entry_sums<DeviceMlpBatch>(b, launch, launch_mlp_sums, "exact_mlp sums");
}

}  // namespace accumcheck::cuda
