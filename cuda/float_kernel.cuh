// What the float kernels share with offload_pipeline.cu: a float batch of each model in device memory (viewed as
// float_linear_batch.h's and float_models_batch.h's views) and the launches that compute its fp32 sums into a
// device array on a stream (nullptr: the default stream); the caller checks cudaGetLastError.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/float_linear_batch.h"
#include "cuda/float_models_batch.h"

namespace accumcheck::cuda {

class DeviceFloatLinearBatch {
 public:
  explicit DeviceFloatLinearBatch(const FloatLinearBatch& b)
      : view_{b.input_size, b.output_size, b.expert_count, b.token_count(), nullptr, nullptr, nullptr, nullptr,
              nullptr, nullptr, nullptr, b.sum_count()},
        weights_(b.weights.size()), biases_(b.biases.size()), features_(b.features.size()),
        targets_(b.targets.size()), expert_(b.expert.size()), group_(b.group.size()), mask_(b.mask.size()) {
    view_.weights = weights_.upload(b.weights);
    view_.biases = biases_.upload(b.biases);
    view_.features = features_.upload(b.features);
    view_.targets = targets_.upload(b.targets);
    view_.expert = expert_.upload(b.expert);
    view_.group = group_.upload(b.group);
    view_.mask = mask_.upload(b.mask);
  }
  const LinearView<float>& view() const { return view_; }

 private:
  LinearView<float> view_;
  DeviceBuffer<float> weights_, biases_, features_, targets_;
  DeviceBuffer<std::int32_t> expert_, group_;
  DeviceBuffer<std::uint8_t> mask_;
};

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

void launch_float_sums(const LinearView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream);
void launch_float_sums(const MlpFloatView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream);
void launch_float_sums(const TiedFloatView<float>& v, float* sums, LaunchConfig launch, cudaStream_t stream);

}  // namespace accumcheck::cuda
