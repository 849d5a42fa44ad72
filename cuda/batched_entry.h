// One entry of the batched check (batched_check.h), as a function both the device kernel (batched_check.cu) and
// its CPU twin (host_batched_failures) run: compiled by nvcc for the device and by the C++ compiler for the host.
// C++17.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/batched_check.h"
#include "cuda/host_device.h"

namespace accumcheck::cuda {

// BatchedTrials' arrays, wherever they live (host vectors or device buffers).
struct BatchedView {
  const std::int32_t *input_size, *output_size, *expert_count;
  const std::int64_t* denominator;
  const std::uint64_t* frozen_tensors;
  const std::int64_t *weight_begin, *bias_begin, *token_begin, *entry_begin;
  const std::int64_t *feature_begin, *target_begin, *weight_difference;
  const std::int32_t* expert;
  const std::int64_t *weights, *biases, *features, *targets;
  const std::int32_t* entry_trial;
  std::size_t entry_count;
};

// Whether entry `index` (of every trial's entries, back to back) breaks property 1: its sum of d_t r_t[o] x_t[k] is
// not zero on a tensor that is not frozen.
ACCUMCHECK_HOST_DEVICE inline bool batched_entry_fails(const BatchedView& v, std::size_t index) {
  const int s = v.entry_trial[index];
  const int in = v.input_size[s], out = v.output_size[s];
  std::int64_t local = static_cast<std::int64_t>(index) - v.entry_begin[s];  // ((e O) + o)(I + 1) + k
  const int k = static_cast<int>(local % (in + 1));
  local /= in + 1;
  const int o = static_cast<int>(local % out);
  const int e = static_cast<int>(local / out);
  const int tensor = k < in ? 2 * e : 2 * e + 1;
  if ((v.frozen_tensors[s] >> tensor) & 1U) return false;
  const std::int64_t one = v.denominator[s];
  const std::int64_t* w = v.weights + v.weight_begin[s] + (static_cast<std::int64_t>(e) * out + o) * in;
  const Int128 bias = static_cast<Int128>(v.biases[v.bias_begin[s] + static_cast<std::int64_t>(e) * out + o]) * one;
  Int128 total = 0;
  for (std::int64_t t = v.token_begin[s]; t < v.token_begin[s + 1]; ++t) {
    const std::int64_t d = v.weight_difference[t];
    if (d == 0 || v.expert[t] != e) continue;
    const std::int64_t* x = v.features + v.feature_begin[t];
    Int128 r = bias - static_cast<Int128>(v.targets[v.target_begin[t] + o]) * one;
    for (int i = 0; i < in; ++i) r += static_cast<Int128>(w[i]) * x[i];
    // |r|, |r x| and |d r x| are each at most the trial's bound (below 2^120): the builder checked it.
    total += r * (k < in ? x[k] : one) * d;
  }
  return total != 0;
}

}  // namespace accumcheck::cuda
