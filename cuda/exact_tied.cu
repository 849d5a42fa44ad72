// exact_tied.cu: the tied-embedding model's per-group gradient sums (cuda/exact_tied_batch.h) on the device, in
// integers.
//
// Computes every sum S[g][...] of exact_tied_batch.h with tied_entry_sum: one thread per sum (a grid-stride loop, so
// any launch configuration covers every sum), which walks the batch's tokens in order and recomputes each token's
// residuals r in integers before adding its terms: the output projection's, and the input lookup's for its own row.
// Determinism: exact. lay_out_tied bounds every intermediate below 2^120, so each sum is the same integer whatever
// the launch configuration and the order.
// Its reference is models/tied_embedding_model-inl.h (accumulate_gradient), through exact_tied.cpp's
// to_tied_gradient; its CPU twin is host_tied_sums, the same function on the host. Nothing here is a reference.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/entry_kernel.cuh"
#include "cuda/exact_tied_kernel.cuh"

namespace accumcheck::cuda {

namespace {
struct TiedEntry {
  __device__ static Int128 sum(const TiedView& v, std::size_t index) { return tied_entry_sum(v, index); }
};
}  // namespace

void launch_tied_sums(const TiedView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_entry_sums<TiedEntry>(v, sums, launch, stream);
}

std::vector<Int128> device_tied_sums(const ExactTiedBatch& b, LaunchConfig launch) {
  return device_entry_sums<DeviceTiedBatch>(b, launch, launch_tied_sums, "exact_tied sums");
}

}  // namespace accumcheck::cuda
