// One entry of the batched check (batched_check.h), as a function both the device kernel (batched_check.cu) and
// its CPU twin (host_batched_failures) run: compiled by nvcc for the device and by the C++ compiler for the host.
// The MLP's and the tied embedding's token terms are the exact kernels' own (mlp_token_term, tied_token_term).
// C++17.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/batched_check.h"
#include "cuda/exact_mlp_batch.h"
#include "cuda/exact_tied_batch.h"
#include "cuda/host_device.h"

namespace accumcheck::cuda {

// BatchedTrials' arrays, wherever they live (host vectors or device buffers).
struct BatchedView {
  const std::int32_t *model, *input_size, *output_size, *expert_count, *hidden_size;
  const std::int64_t* denominator;
  const std::uint64_t* frozen_tensors;
  const std::int64_t *weight_begin, *bias_begin, *token_begin, *entry_begin;
  const std::int64_t *feature_begin, *target_begin, *weight_difference;
  const std::int32_t* route;
  const std::int64_t *weights, *biases, *features, *targets;
  const std::int32_t* entry_trial;
  std::size_t entry_count;
};

// The linear model's entry `local` ([e][o][k]) of trial s: the sum of d_t r_t[o] x_t[k] (x_t[I] = 1) in Int128, or
// 0 on a frozen tensor.
ACCUMCHECK_HOST_DEVICE inline Int128 batched_linear_entry(const BatchedView& v, int s, std::int64_t local) {
  const int in = v.input_size[s], out = v.output_size[s];
  const int k = static_cast<int>(local % (in + 1));
  local /= in + 1;
  const int o = static_cast<int>(local % out);
  const int e = static_cast<int>(local / out);
  const int tensor = k < in ? 2 * e : 2 * e + 1;
  if ((v.frozen_tensors[s] >> tensor) & 1U) return 0;
  const std::int64_t one = v.denominator[s];
  const std::int64_t* w = v.weights + v.weight_begin[s] + (static_cast<std::int64_t>(e) * out + o) * in;
  const Int128 bias = static_cast<Int128>(v.biases[v.bias_begin[s] + static_cast<std::int64_t>(e) * out + o]) * one;
  Int128 total = 0;
  for (std::int64_t t = v.token_begin[s]; t < v.token_begin[s + 1]; ++t) {
    const std::int64_t d = v.weight_difference[t];
    if (d == 0 || v.route[t] != e) continue;
    const std::int64_t* x = v.features + v.feature_begin[t];
    Int128 r = bias - static_cast<Int128>(v.targets[v.target_begin[t] + o]) * one;
    for (int i = 0; i < in; ++i) r += static_cast<Int128>(w[i]) * x[i];
    // |r|, |r x| and |d r x| are each at most the trial's bound (below 2^120): the builder checked it.
    total += r * (k < in ? x[k] : one) * d;
  }
  return total;
}

// The MLP's entry `local` of trial s (exact_mlp_batch.h's order, one group): the sum of d_t times the token's term.
ACCUMCHECK_HOST_DEVICE inline Int128 batched_mlp_entry(const BatchedView& v, int s, std::int64_t local) {
  const int I = v.input_size[s], H = v.hidden_size[s], O = v.output_size[s];
  const MlpSumIndex at = mlp_sum_index(static_cast<std::size_t>(local), I, H, O);
  if ((v.frozen_tensors[s] >> at.kind) & 1U) return 0;  // W1, b1, W2, b2 are parameters 0 to 3
  const std::int64_t* w1 = v.weights + v.weight_begin[s];
  const std::int64_t* b1 = w1 + static_cast<std::int64_t>(H) * I;
  const std::int64_t* w2 = b1 + H;
  const MlpParams p{I, H, O, v.denominator[s], w1, b1, w2, w2 + static_cast<std::int64_t>(O) * H};
  Int128 total = 0;
  for (std::int64_t t = v.token_begin[s]; t < v.token_begin[s + 1]; ++t) {
    const std::int64_t d = v.weight_difference[t];
    if (d == 0) continue;
    // |d| times the layout's bound on the terms' magnitudes stays below 2^120: the builder checked it.
    total += mlp_token_term(p, v.features + v.feature_begin[t], v.targets + v.target_begin[t], at) * d;
  }
  return total;
}

// The tied embedding's entry `local` of trial s (exact_tied_batch.h's order, one group), as the MLP's.
ACCUMCHECK_HOST_DEVICE inline Int128 batched_tied_entry(const BatchedView& v, int s, std::int64_t local) {
  const int Dm = v.input_size[s], V = v.output_size[s];
  const TiedSumIndex at = tied_sum_index(static_cast<std::size_t>(local), V, Dm);
  if ((v.frozen_tensors[s] >> (at.is_bias ? 1 : 0)) & 1U) return 0;  // E and b are parameters 0 and 1
  const std::int64_t* E = v.weights + v.weight_begin[s];
  const TiedParams p{V, Dm, v.denominator[s], E, E + static_cast<std::int64_t>(V) * Dm};
  Int128 total = 0;
  for (std::int64_t t = v.token_begin[s]; t < v.token_begin[s + 1]; ++t) {
    const std::int64_t d = v.weight_difference[t];
    if (d == 0) continue;
    total += tied_token_term(p, v.route[t], v.targets + v.target_begin[t], at) * d;
  }
  return total;
}

// Entry `index` (of every trial's entries, back to back): its weighted sum, 0 on a frozen tensor.
ACCUMCHECK_HOST_DEVICE inline Int128 batched_entry(const BatchedView& v, std::size_t index) {
  const int s = v.entry_trial[index];
  const std::int64_t local = static_cast<std::int64_t>(index) - v.entry_begin[s];
  switch (v.model[s]) {
    case batched_mlp:
      return batched_mlp_entry(v, s, local);
    case batched_tied:
      return batched_tied_entry(v, s, local);
    default:
      return batched_linear_entry(v, s, local);
  }
}

// Whether entry `index` breaks property 1: its weighted sum is not zero on a tensor that is not frozen.
ACCUMCHECK_HOST_DEVICE inline bool batched_entry_fails(const BatchedView& v, std::size_t index) {
  return batched_entry(v, index) != 0;
}

}  // namespace accumcheck::cuda
