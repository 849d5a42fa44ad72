// What exact_mlp.cu shares with offload_pipeline.cu: an MLP batch in device memory (DeviceMlpBatch, viewed as
// MlpView) and launch_mlp_sums, which computes exact_mlp_batch.h's sums into a device array.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/exact_mlp_batch.h"

namespace accumcheck::cuda {

class DeviceMlpBatch {
 public:
  explicit DeviceMlpBatch(const ExactMlpBatch& b)
      : view_{b.input_size, b.hidden_size, b.output_size, b.token_count(), b.denominator, nullptr, nullptr, nullptr,
              nullptr, nullptr, nullptr, nullptr, nullptr, b.sum_count()},
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
  const MlpView& view() const { return view_; }

 private:
  MlpView view_;
  DeviceBuffer<std::int64_t> w1_, b1_, w2_, b2_, features_, targets_;
  DeviceBuffer<std::int32_t> group_;
  DeviceBuffer<std::uint8_t> mask_;
};

// Launches exact_mlp.cu's kernel for `v` into the device array `sums` on `stream` (nullptr: the default stream); the
// caller checks cudaGetLastError.
void launch_mlp_sums(const MlpView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream);

}  // namespace accumcheck::cuda
