// ExactMlpBatch: one micro-batch of the MLP (models/mlp_model.h: W2 relu(W1 x + b1) + b2) as integers over one common
// denominator, the form the exact MLP kernel (exact_mlp.cu) and its CPU twin (host_mlp_sums, exact_mlp.cpp) read.
//
// Every value is raw / D as in exact_batch.h. For a supervised token t of group g, in integers:
//   z_t = b1 D + W1 x_t             at D^2, and h_t = relu(z_t) (z > 0 exactly when h > 0)
//   r_t = (b2 - y_t) D^2 + W2 h_t   at D^3 (y_hat - y)
//   dz_t[j] = [h_t[j] > 0] sum_o W2[o][j] r_t[o]   at D^4
// and the sums of group g, in this order (group_entry_count entries per group):
//   dW1[j][k] = sum_t dz_t[j] x_t[k]   at D^5      db1[j] = sum_t dz_t[j]   at D^4
//   dW2[o][j] = sum_t r_t[o] h_t[j]    at D^5      db2[o] = sum_t r_t[o]    at D^3
// The gradient is sum_g c_g S[g] over those denominators (to_mlp_gradient). lay_out_mlp bounds every intermediate
// of the batch below 2^120 from its largest values (or refuses it), so the sums are exact in Int128 and the same
// whatever the launch configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/exact_batch.h"
#include "cuda/host_device.h"

namespace accumcheck::cuda {

inline constexpr int kMlpWidthMax = 64;  // hidden units and outputs: a thread keeps h in registers or local memory

// The sums of one group, dW1 [H][I], db1 [H], dW2 [O][H], db2 [O]: how many, and which one `index` (groups back to
// back) is. The exact kernel's layout, and the float kernel's (float_models_batch.h).
ACCUMCHECK_HOST_DEVICE inline std::size_t mlp_group_entry_count(int inputs, int hidden, int outputs) {
  const std::size_t I = static_cast<std::size_t>(inputs), H = static_cast<std::size_t>(hidden),
                    O = static_cast<std::size_t>(outputs);
  return H * I + H + O * H + O;
}
enum MlpSumKind : int { mlp_dw1 = 0, mlp_db1 = 1, mlp_dw2 = 2, mlp_db2 = 3 };
struct MlpSumIndex {
  int g, kind, a, b;  // group; which tensor; dW1[a][b], db1[a], dW2[a][b] or db2[a]
};
ACCUMCHECK_HOST_DEVICE inline MlpSumIndex mlp_sum_index(std::size_t index, int inputs, int hidden, int outputs) {
  const int I = inputs, H = hidden, O = outputs;
  const std::size_t per_group = mlp_group_entry_count(I, H, O);
  MlpSumIndex at{static_cast<int>(index / per_group), mlp_dw1, 0, 0};
  std::size_t local = index % per_group;
  if (local < static_cast<std::size_t>(H) * I) {
    at.a = static_cast<int>(local / I), at.b = static_cast<int>(local % I);
  } else if ((local -= static_cast<std::size_t>(H) * I) < static_cast<std::size_t>(H)) {
    at.kind = mlp_db1, at.a = static_cast<int>(local);
  } else if ((local -= H) < static_cast<std::size_t>(O) * H) {
    at.kind = mlp_dw2, at.a = static_cast<int>(local / H), at.b = static_cast<int>(local % H);
  } else {
    at.kind = mlp_db2, at.a = static_cast<int>(local - static_cast<std::size_t>(O) * H);
  }
  return at;
}

struct ExactMlpBatch {
  int input_size = 1, hidden_size = 1, output_size = 1, group_count = 1;
  std::int64_t denominator = 1;  // D
  // Raw values at D: W1 [H][I], b1 [H], W2 [O][H], b2 [O], features [N][I], targets [N][O].
  std::vector<std::int64_t> w1, b1, w2, b2, features, targets;
  std::vector<std::int32_t> group;  // per token, in [0, G)
  std::vector<std::uint8_t> mask;   // per token, 1 when supervised
  // What the layout proved: every intermediate of a token's term, and the sum of every term's magnitude over the
  // batch's supervised tokens, is at most this (below 2^120). The batched check scales it by its token weights.
  double sums_bound = 0;

  int token_count() const { return static_cast<int>(mask.size()); }
  std::size_t group_entry_count() const { return mlp_group_entry_count(input_size, hidden_size, output_size); }
  std::size_t sum_count() const { return static_cast<std::size_t>(group_count) * group_entry_count(); }
};

// ExactMlpBatch's arrays wherever they live.
struct MlpView {
  int input_size, hidden_size, output_size, token_count;
  std::int64_t denominator;
  const std::int64_t *w1, *b1, *w2, *b2, *features, *targets;
  const std::int32_t* group;
  const std::uint8_t* mask;
  std::size_t sum_count;
};

// The MLP's parameters as raw integers at D, wherever they live: what one token's term reads beside the token.
struct MlpParams {
  int input_size, hidden_size, output_size;
  std::int64_t denominator;
  const std::int64_t *w1, *b1, *w2, *b2;
};

// One supervised token's term of sum `at` (its group aside): dz[a] x[b], dz[a], r[a] h[b] or r[a], at the sum's
// denominator, for the token's features x and targets y (raw at D). The forward pass is recomputed in integers. The
// batched check (batched_entry.h) weights these terms by token.
ACCUMCHECK_HOST_DEVICE inline Int128 mlp_token_term(const MlpParams& p, const std::int64_t* x, const std::int64_t* y,
                                                    const MlpSumIndex& at) {
  const int I = p.input_size, H = p.hidden_size, O = p.output_size;
  const std::int64_t D = p.denominator;
  const Int128 D2 = static_cast<Int128>(D) * D;
  Int128 h[kMlpWidthMax];
  for (int j = 0; j < H; ++j) {
    Int128 z = static_cast<Int128>(p.b1[j]) * D;
    for (int k = 0; k < I; ++k) z += static_cast<Int128>(p.w1[static_cast<std::size_t>(j) * I + k]) * x[k];
    h[j] = z > 0 ? z : Int128(0);
  }
  const auto r = [&](int o) {
    Int128 acc = static_cast<Int128>(p.b2[o]) * D2 - static_cast<Int128>(y[o]) * D2;
    for (int j = 0; j < H; ++j) acc += static_cast<Int128>(p.w2[static_cast<std::size_t>(o) * H + j]) * h[j];
    return acc;
  };
  if (at.kind <= mlp_db1) {
    if (h[at.a] == 0) return 0;  // relu's gradient is 0 where z <= 0
    Int128 dz = 0;
    for (int o = 0; o < O; ++o) dz += static_cast<Int128>(p.w2[static_cast<std::size_t>(o) * H + at.a]) * r(o);
    return at.kind == mlp_dw1 ? dz * x[at.b] : dz;
  }
  const Int128 ro = r(at.a);
  return at.kind == mlp_dw2 ? ro * h[at.b] : ro;
}

// Sum `index` of the batch (the order above, groups back to back).
ACCUMCHECK_HOST_DEVICE inline Int128 mlp_entry_sum(const MlpView& v, std::size_t index) {
  const int I = v.input_size, O = v.output_size;
  const MlpSumIndex at = mlp_sum_index(index, I, v.hidden_size, O);
  const MlpParams p{I, v.hidden_size, O, v.denominator, v.w1, v.b1, v.w2, v.b2};
  Int128 total = 0;
  for (int t = 0; t < v.token_count; ++t) {
    if (!v.mask[t] || v.group[t] != at.g) continue;
    total += mlp_token_term(p, v.features + static_cast<std::size_t>(t) * I, v.targets + static_cast<std::size_t>(t) * O, at);
  }
  return total;
}

}  // namespace accumcheck::cuda
