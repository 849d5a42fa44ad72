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
#include "cuda/float_models_batch.h"

namespace accumcheck::cuda {

namespace {

class DeviceFloatMlpBatch {
 public:
  explicit DeviceFloatMlpBatch(const FloatMlpBatch& b)
      : view_{b.input_size, b.hidden_size, b.output_size, b.token_count(), nullptr, nullptr, nullptr, nullptr,
              nullptr, nullptr, nullptr, nullptr, b.sum_count()},
        w1_(b.w1.size()), b1_(b.b1.size()), w2_(b.w2.size()), b2_(b.b2.size()), features_(b.features.size()),
        targets_(b.targets.size()), group_(b.group.size()), mask_(b.mask.size()) {
    view_.w1 = w1_.upload(b.w1);
    view_.b1 = b1_.upload(b.b1);
    view_.w2 = w2_.upload(b.w2);
    view_.b2 = b2_.upload(b.b2);
    view_.features = features_.upload(b.features);
    view_.targets = targets_.upload(b.targets);
    view_.group = group_.upload(b.group);
    view_.mask = mask_.upload(b.mask);
  }
  const MlpFloatView<float>& view() const { return view_; }

 private:
  MlpFloatView<float> view_;
  DeviceBuffer<float> w1_, b1_, w2_, b2_, features_, targets_;
  DeviceBuffer<std::int32_t> group_;
  DeviceBuffer<std::uint8_t> mask_;
};

class DeviceFloatTiedBatch {
 public:
  explicit DeviceFloatTiedBatch(const FloatTiedBatch& b)
      : view_{b.vocab_size, b.embed_size, b.token_count(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
              b.sum_count()},
        embedding_(b.embedding.size()), bias_(b.bias.size()), targets_(b.targets.size()), token_id_(b.token_id.size()),
        group_(b.group.size()), mask_(b.mask.size()) {
    view_.embedding = embedding_.upload(b.embedding);
    view_.bias = bias_.upload(b.bias);
    view_.targets = targets_.upload(b.targets);
    view_.token_id = token_id_.upload(b.token_id);
    view_.group = group_.upload(b.group);
    view_.mask = mask_.upload(b.mask);
  }
  const TiedFloatView<float>& view() const { return view_; }

 private:
  TiedFloatView<float> view_;
  DeviceBuffer<float> embedding_, bias_, targets_;
  DeviceBuffer<std::int32_t> token_id_, group_;
  DeviceBuffer<std::uint8_t> mask_;
};

struct MlpFloatEntry {
  __device__ static float sum(const MlpFloatView<float>& v, std::size_t index) { return mlp_float_sum(v, index); }
};
struct TiedFloatEntry {
  __device__ static float sum(const TiedFloatView<float>& v, std::size_t index) { return tied_float_sum(v, index); }
};

void launch_float_mlp(const MlpFloatView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_entry_sums<MlpFloatEntry>(v, sums, launch, stream);
}
void launch_float_tied(const TiedFloatView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_entry_sums<TiedFloatEntry>(v, sums, launch, stream);
}

}  // namespace

std::vector<float> device_float_mlp_sums(const FloatMlpBatch& b, LaunchConfig launch) {
  return device_entry_sums<DeviceFloatMlpBatch, float>(b, launch, launch_float_mlp, "float_mlp sums");
}

std::vector<float> device_float_tied_sums(const FloatTiedBatch& b, LaunchConfig launch) {
  return device_entry_sums<DeviceFloatTiedBatch, float>(b, launch, launch_float_tied, "float_tied sums");
}

}  // namespace accumcheck::cuda
