// float_models.cu: the MLP's and the tied embedding's per-group gradient sums (cuda/float_models_batch.h) on the
// device in fp32, with fp32 or bf16 storage.
//
// One thread per sum (a grid-stride loop), each recomputing its tokens' forward pass in mlp_float_sum's or
// tied_float_sum's fixed order, every operation rounded once (__fadd_rn, __fsub_rn, __fmul_rn: never contracted into
// a fused multiply-add).
// Determinism: bit-identical to the CPU twins (host_float_mlp_sums, host_float_tied_sums) and across launch
// configurations. Accuracy: within float_mlp_sum_bounds and float_tied_sum_bounds (models::FloatBound) of the exact
// sums, which the tests check; the kernels assert nothing.
// Their reference is models/'s exact gradient, through FloatBound's exact value and the exact kernels' sums
// (float_models.cpp, the tests). Nothing here is a reference for anything.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/entry_kernel.cuh"
#include "cuda/float_kernel.cuh"
#include "cuda/float_models_batch.h"

namespace accumcheck::cuda {

namespace {

struct MlpFloatEntry {
  __device__ static float sum(const MlpFloatView<float>& v, std::size_t index) { return mlp_float_sum(v, index); }
};
struct TiedFloatEntry {
  __device__ static float sum(const TiedFloatView<float>& v, std::size_t index) { return tied_float_sum(v, index); }
};

}  // namespace

void launch_float_sums(const MlpFloatView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_entry_sums<MlpFloatEntry>(v, sums, launch, stream);
}
void launch_float_sums(const TiedFloatView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_entry_sums<TiedFloatEntry>(v, sums, launch, stream);
}

std::vector<float> device_float_mlp_sums(const FloatMlpBatch& b, LaunchConfig launch) {
  return device_entry_sums<DeviceFloatMlpBatch, float>(
      b, launch, [](const MlpFloatView<float>& v, float* s, LaunchConfig l, cudaStream_t st) { launch_float_sums(v, s, l, st); },
      "float_mlp sums");
}

std::vector<float> device_float_tied_sums(const FloatTiedBatch& b, LaunchConfig launch) {
  return device_entry_sums<DeviceFloatTiedBatch, float>(
      b, launch, [](const TiedFloatView<float>& v, float* s, LaunchConfig l, cudaStream_t st) { launch_float_sums(v, s, l, st); },
      "float_tied sums");
}

}  // namespace accumcheck::cuda
