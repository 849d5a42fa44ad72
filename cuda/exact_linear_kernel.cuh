// What exact_linear.cu shares with offload_pipeline.cu: a batch in device memory (DeviceBatch, viewed as BatchView)
// and launch_exact_sums, which computes exact_batch.h's sums into a device array.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/exact_batch.h"

namespace accumcheck::cuda {

struct BatchView {
  int input_size, output_size, expert_count, group_count, token_count;
  std::int64_t denominator;
  const std::int64_t *weights, *biases, *features, *targets;
  const std::int32_t *expert, *group;
  const std::uint8_t* mask;
  std::size_t sum_count;
};

class DeviceBatch {
 public:
  explicit DeviceBatch(const ExactLinearBatch& b)
      : shape_(b), weights_(b.weights.size()), biases_(b.biases.size()), features_(b.features.size()),
        targets_(b.targets.size()), expert_(b.expert.size()), group_(b.group.size()), mask_(b.mask.size()) {
    weights_.upload(b.weights.data());
    biases_.upload(b.biases.data());
    features_.upload(b.features.data());
    targets_.upload(b.targets.data());
    expert_.upload(b.expert.data());
    group_.upload(b.group.data());
    mask_.upload(b.mask.data());
  }
  BatchView view() const {
    return BatchView{shape_.input_size, shape_.output_size, shape_.expert_count, shape_.group_count,
                     shape_.token_count(), shape_.denominator, weights_.data(), biases_.data(), features_.data(),
                     targets_.data(), expert_.data(), group_.data(), mask_.data(), shape_.sum_count()};
  }

 private:
  struct Shape {
    explicit Shape(const ExactLinearBatch& b)
        : input_size(b.input_size), output_size(b.output_size), expert_count(b.expert_count),
          group_count(b.group_count), denominator(b.denominator), tokens(b.token_count()), sums(b.sum_count()) {}
    int input_size, output_size, expert_count, group_count;
    std::int64_t denominator;
    int tokens;
    std::size_t sums;
    int token_count() const { return tokens; }
    std::size_t sum_count() const { return sums; }
  } shape_;
  DeviceBuffer<std::int64_t> weights_, biases_, features_, targets_;
  DeviceBuffer<std::int32_t> expert_, group_;
  DeviceBuffer<std::uint8_t> mask_;
};

// Launches exact_linear.cu's kernel for `b` into the device array `sums` on `stream` (nullptr: the default stream);
// the caller checks cudaGetLastError.
void launch_exact_sums(const BatchView& b, Int128* sums, LaunchConfig launch, cudaStream_t stream);

}  // namespace accumcheck::cuda
