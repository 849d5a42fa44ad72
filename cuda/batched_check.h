// BatchedTrials: many single-window trials of property 1 on the linear model, laid out flat for one launch, the form
// the batched kernel (batched_check.cu) and its CPU twin (host_batched_failures, batched_trials.cpp) read.
// batched_trials.h builds it from scenarios.
//
// Property 1 says the gradient a target applies equals the full-batch gradient. On the linear model both are sums
// over the window's supervised tokens of w_t r_t x_t^T (and w_t r_t for the bias), r_t = W_e x_t + b_e - y_t, which
// differ only in each token's weight w_t: the target's (its framework layer's coefficient, times the engine's 1/G
// and 1/R) against the oracle's (the full-batch objective's). So trial s passes exactly when, for every entry (e, o,
// k) of a parameter that is not frozen,
//   sum over the supervised tokens t of trial s routed to e of  d_t r_t[o] x_t[k]  =  0        (x_t[I] = 1)
// with d_t the difference of the two weights of t's sequence over a common denominator, an integer. With gradient
// clipping the identity is about the gradients before clipping: equal ones clip alike, so a pass is still exact,
// but two different gradients can clip to the same one (both scaled to the norm limit), so a flag on a clipping
// trial is a candidate that the CPU path decides. Every value is
// raw / D as in exact_batch.h (one D per trial), so the sum is an integer at D^3 times that denominator; the
// builder bounds every intermediate of every trial below 2^120 (or leaves the trial to the CPU path), so it is
// exact in Int128 and independent of the launch configuration.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "cuda/exact_batch.h"

namespace accumcheck::cuda {

inline constexpr int kBatchedTensorsMax = 64;  // 2 E tensors, one bit each in frozen_tensors

struct BatchedTrials {
  // Per trial s: its shape, its denominator D, its frozen tensors (bit p: tensor p, 2e weight and 2e + 1 bias of
  // expert e), where its parameters, tokens and entries begin (token_begin and entry_begin have one more element:
  // the end), entries being E * O * (I + 1) in [e][o][k] order.
  std::vector<std::int32_t> input_size, output_size, expert_count;
  std::vector<std::int64_t> denominator;
  std::vector<std::uint64_t> frozen_tensors;
  std::vector<std::int64_t> weight_begin, bias_begin, token_begin{0}, entry_begin{0};
  // Per token: where its features and targets begin, its expert, and d_t (0 for an unsupervised token).
  std::vector<std::int64_t> feature_begin, target_begin, weight_difference;
  std::vector<std::int32_t> expert;
  // The raw values of every trial, back to back.
  std::vector<std::int64_t> weights, biases, features, targets;
  // Per entry: its trial.
  std::vector<std::int32_t> entry_trial;
  // Per trial, for the host only: 1 when the trial clips its gradient (a flag is then a candidate, above).
  std::vector<std::uint8_t> clipped;

  int trial_count() const { return static_cast<int>(input_size.size()); }
  std::size_t entry_count() const { return entry_trial.size(); }
};

// Per trial, 1 when it breaks property 1: on the CPU (the kernel's twin, batched_trials.cpp), and on the device
// (batched_check.cu; throws DeviceError when CUDA fails).
std::vector<std::uint8_t> host_batched_failures(const BatchedTrials& trials);
std::vector<std::uint8_t> device_batched_failures(const BatchedTrials& trials, LaunchConfig launch);

}  // namespace accumcheck::cuda
