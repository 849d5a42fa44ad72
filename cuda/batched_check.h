// BatchedTrials: many single-window trials of property 1, laid out flat for one launch, the form the batched kernel
// (batched_check.cu) and its CPU twin (host_batched_failures, batched_trials.cpp) read. batched_trials.h builds it
// from scenarios of the three models.
//
// Property 1 says the gradient a target applies equals the full-batch gradient. In one optimizer step both are sums
// over the window's supervised tokens of w_t g_t, g_t the token's own loss gradient (for the linear model r_t x_t^T
// and r_t, r_t = W_e x_t + b_e - y_t; for the MLP and the tied embedding their backward, exact_mlp_batch.h and
// exact_tied_batch.h), which differ only in each token's weight w_t: the target's (its framework layer's
// coefficient, times the engine's 1/G and 1/R) against the oracle's (the full-batch objective's). So trial s passes
// exactly when, for every entry of a parameter that is not frozen,
//   sum over the supervised tokens t of trial s of  d_t g_t[entry]  =  0
// with d_t the difference of the two weights of t's sequence over a common denominator, an integer. With gradient
// clipping the identity is about the gradients before clipping: equal ones clip alike, so a pass is still exact,
// but two different gradients can clip to the same one (both scaled to the norm limit), so a flag on a clipping
// trial is a candidate that the CPU path decides. Every value is raw / D as in exact_batch.h (one D per trial), and
// g_t[entry] an integer over a power of D; the builder bounds every intermediate of every trial below 2^120 (or
// leaves the trial to the CPU path), so the check is exact in Int128 and independent of the launch configuration.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "cuda/exact_batch.h"

namespace accumcheck::cuda {

inline constexpr int kBatchedTensorsMax = 64;  // one bit each in frozen_tensors: 2 E tensors of the linear model

// Which model a trial trains (BatchedTrials::model).
enum BatchedModel : std::int32_t { batched_linear = 0, batched_mlp = 1, batched_tied = 2 };

struct BatchedTrials {
  // Per trial s: its model, its shape (the linear model: I, O and E, hidden_size 0; the MLP: I, H and O, E 1; the
  // tied embedding: input_size the embedding width Dm, output_size the vocabulary V, E 1, hidden_size 0), its
  // denominator D, its frozen tensors (bit p: parameter p in models/'s order), where its parameters, tokens and
  // entries begin (token_begin and entry_begin have one more element: the end). A trial's entries are its gradient's,
  // in the exact kernels' order for one group: [e][o][k] with k = I the bias (linear), exact_mlp_batch.h's,
  // exact_tied_batch.h's.
  std::vector<std::int32_t> model, input_size, output_size, expert_count, hidden_size;
  std::vector<std::int64_t> denominator;
  std::vector<std::uint64_t> frozen_tensors;
  std::vector<std::int64_t> weight_begin, bias_begin, token_begin{0}, entry_begin{0};
  // Per token: where its features and targets begin, its route (the linear model's expert, the tied embedding's token
  // id, 0 for the MLP), and d_t (0 for an unsupervised token).
  std::vector<std::int64_t> feature_begin, target_begin, weight_difference;
  std::vector<std::int32_t> route;
  // The raw values of every trial, back to back. weights holds the linear model's W [E][O][I], the MLP's W1, b1, W2
  // and b2, or the tied embedding's E and b, in that order; biases only the linear model's b [E][O].
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
// Every entry's weighted sum on the CPU (0 on a frozen tensor), the values behind the twin's flags, for the tests.
std::vector<Int128> host_batched_entries(const BatchedTrials& trials);
std::vector<std::uint8_t> device_batched_failures(const BatchedTrials& trials, LaunchConfig launch);

}  // namespace accumcheck::cuda
