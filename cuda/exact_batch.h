// ExactLinearBatch: one micro-batch of the linear model as integers over one common denominator, the form the exact
// kernels (exact_linear.cu) and their CPU twin (host_sums, exact_linear.cpp) read.
//
// Every value v of the micro-batch (weights, biases, features, targets) is raw / D with raw an int64 of magnitude
// below 2^31, D the least common denominator of all of them, at most 2^30 (lay_out, exact_linear.h, builds it and
// refuses anything else). The generator's values are dyadic, so D starts as a power of two; after an optimizer step
// whose loss coefficients divide by a token count, the parameters' denominators carry that count too.
// For token t routed to expert e and supervised (mask 1), with r_t = W_e x_t + b_e - y_t, the sums are
//   S[g][e][o][k] = sum over the supervised tokens t of group g routed to e of  r_t[o] * x_t[k]     (k < I)
//   S[g][e][o][I] = sum over the same tokens of  r_t[o]                                            (the bias)
// as integers at denominator D^3: r_t is an integer at D^2 (W x at D^2; b and y lifted by D), x_t at D, and the
// bias column uses x = 1, raw D. A group is a set of sequences that share one loss coefficient (a sequence, or the
// whole micro-batch): the gradient is sum_g c_g S[g] / D^3 (to_gradient).
//
// No overflow is possible by construction, which lay_out checks: |raw| < 2^31, D <= 2^30, I <= 4096 and at most
// 2^16 tokens give |W x| < 2^62 per product, |r| < 2^75, |r x| < 2^106 and every sum below 2^122, inside Int128. So
// the sums are exact, and integer addition makes them independent of the order and of the launch configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/host_device.h"

namespace accumcheck::cuda {

__extension__ typedef __int128 Int128;  // GCC and nvcc both have it; __extension__ keeps -Wpedantic quiet
__extension__ typedef unsigned __int128 UInt128;

inline constexpr int kRawBits = 31;         // |raw| < 2^31 for every value
inline constexpr std::int64_t kDenominatorMax = std::int64_t{1} << 30;  // the bias column's raw D is below 2^31 too
inline constexpr int kInputSizeMax = 4096;
inline constexpr int kTokenCountMax = 1 << 16;

// The linear model's sums are laid out [g][e][o][k], k in [0, I] (I: the bias): how many, and where index falls.
inline std::size_t linear_sum_count(int groups, int experts, int outputs, int inputs) {
  return static_cast<std::size_t>(groups) * static_cast<std::size_t>(experts) * static_cast<std::size_t>(outputs) *
         static_cast<std::size_t>(inputs + 1);
}
struct LinearSumIndex {
  int g, e, o, k;
};
ACCUMCHECK_HOST_DEVICE inline LinearSumIndex linear_sum_index(std::size_t index, int inputs, int outputs, int experts) {
  // index = ((g E + e) O + o)(I + 1) + k
  LinearSumIndex at{};
  at.k = static_cast<int>(index % static_cast<std::size_t>(inputs + 1));
  std::size_t rest = index / static_cast<std::size_t>(inputs + 1);
  at.o = static_cast<int>(rest % static_cast<std::size_t>(outputs));
  rest /= static_cast<std::size_t>(outputs);
  at.e = static_cast<int>(rest % static_cast<std::size_t>(experts));
  at.g = static_cast<int>(rest / static_cast<std::size_t>(experts));
  return at;
}

struct ExactLinearBatch {
  int input_size = 1;    // I
  int output_size = 1;   // O
  int expert_count = 1;  // E
  int group_count = 1;   // G groups of sequences, each with one loss coefficient
  std::int64_t denominator = 1;  // D
  // Raw values at D, row-major: weights [E][O][I], biases [E][O], features [N][I], targets [N][O].
  std::vector<std::int64_t> weights, biases, features, targets;
  // Per token: its expert in [0, E), its group in [0, G), and 1 when supervised.
  std::vector<std::int32_t> expert, group;
  std::vector<std::uint8_t> mask;

  int token_count() const { return static_cast<int>(mask.size()); }
  // Entries of the sums: G * E * O * (I + 1), laid out [g][e][o][k].
  std::size_t sum_count() const { return linear_sum_count(group_count, expert_count, output_size, input_size); }
};

}  // namespace accumcheck::cuda
