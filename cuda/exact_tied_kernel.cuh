// What exact_tied.cu shares with offload_pipeline.cu: a tied-embedding batch in device memory (DeviceTiedBatch,
// viewed as TiedView) and launch_tied_sums, which computes exact_tied_batch.h's sums into a device array.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/exact_tied_batch.h"

namespace accumcheck::cuda {

class DeviceTiedBatch {
 public:
  explicit DeviceTiedBatch(const ExactTiedBatch& b)
      : view_{b.vocab_size, b.embed_size, b.token_count(), b.denominator, nullptr, nullptr, nullptr, nullptr, nullptr,
              nullptr, b.sum_count()},
        embedding_(b.embedding.size()), bias_(b.bias.size()), targets_(b.targets.size()), token_id_(b.token_id.size()),
        group_(b.group.size()), mask_(b.mask.size()) {
    view_.embedding = embedding_.upload(b.embedding);
    view_.bias = bias_.upload(b.bias);
    view_.targets = targets_.upload(b.targets);
    view_.token_id = token_id_.upload(b.token_id);
    view_.group = group_.upload(b.group);
    view_.mask = mask_.upload(b.mask);
  }
  const TiedView& view() const { return view_; }

 private:
  TiedView view_;
  DeviceBuffer<std::int64_t> embedding_, bias_, targets_;
  DeviceBuffer<std::int32_t> token_id_, group_;
  DeviceBuffer<std::uint8_t> mask_;
};

// Launches exact_tied.cu's kernel for `v` into the device array `sums` on `stream` (nullptr: the default stream); the
// caller checks cudaGetLastError.
void launch_tied_sums(const TiedView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream);

}  // namespace accumcheck::cuda
