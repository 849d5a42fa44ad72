// FloatMlpBatch and FloatTiedBatch: one micro-batch of the MLP or of the tied embedding in fp32, the form the float
// kernels (float_models.cu) and their CPU twins (host_float_mlp_sums, host_float_tied_sums, float_models.cpp) read.
// Their sums are exact_mlp_batch.h's and exact_tied_batch.h's, in the same layout, evaluated in fp32 by one thread
// each in the fixed order below, every operation rounded once to nearest (add_rn, sub_rn, mul_rn of
// float_linear_batch.h: __fadd_rn, __fsub_rn and __fmul_rn on the device, never contracted into a fused
// multiply-add; the host compiles the same functions without contraction). Storage is fp32 or bf16 (rounded on the
// host, held in the fp32 that is exactly it), the arithmetic fp32, as mixed-precision kernels do.
//
// The MLP, for a supervised token t of group g (sums in left-to-right order, from the first term):
//   z[j] = (b1[j] + W1[j][0] x[0]) + ... + W1[j][I-1] x[I-1];   on[j] = z[j] > 0;   h[j] = on[j] ? z[j] : 0
//   r[o] = ((b2[o] + W2[o][0] h[0]) + ... + W2[o][H-1] h[H-1]) - y[o]
//   dz[j] = on[j] ? (W2[0][j] r[0] + ... + W2[O-1][j] r[O-1]) : none (the token adds nothing to dW1[j], db1[j])
//   dW1[j][k] += dz[j] x[k]    db1[j] += dz[j]    dW2[o][j] += r[o] h[j]    db2[o] += r[o]
// The tied embedding, for a supervised token t with id i:
//   r[v] = ((b[v] + E[v][0] E[i][0]) + ... + E[v][Dm-1] E[i][Dm-1]) - y[v]
//   dE[v][d] += r[v] E[i][d], then, when v = i, += E[0][d] r[0], ..., += E[V-1][d] r[V-1]      db[v] += r[v]
// Determinism: bit-identical across launch configurations (each sum one thread's, in that order). Accuracy: within
// the bound models::FloatBound derives for any fp32 evaluation of the same computation (float_models.h), never
// asserted to be exact. The ReLU's decision is a comparison: where a float evaluation could decide it either way (z
// within its rounding of 0), FloatBound gives no bound, and the sum is unchecked, never passed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/exact_mlp_batch.h"
#include "cuda/exact_tied_batch.h"
#include "cuda/float_linear_batch.h"
#include "cuda/host_device.h"

namespace accumcheck::cuda {

struct FloatMlpBatch {
  int input_size = 1, hidden_size = 1, output_size = 1, group_count = 1;
  FloatStorage storage = FloatStorage::fp32;
  // Row-major as in exact_mlp_batch.h: W1 [H][I], b1 [H], W2 [O][H], b2 [O], features [N][I], targets [N][O].
  std::vector<float> w1, b1, w2, b2, features, targets;
  std::vector<std::int32_t> group;
  std::vector<std::uint8_t> mask;

  int token_count() const { return static_cast<int>(mask.size()); }
  std::size_t sum_count() const {
    return static_cast<std::size_t>(group_count) * mlp_group_entry_count(input_size, hidden_size, output_size);
  }
};

struct FloatTiedBatch {
  int vocab_size = 2, embed_size = 1, group_count = 1;
  FloatStorage storage = FloatStorage::fp32;
  // Row-major as in exact_tied_batch.h: E [V][Dm], b [V], targets [N][V].
  std::vector<float> embedding, bias, targets;
  std::vector<std::int32_t> token_id, group;
  std::vector<std::uint8_t> mask;

  int token_count() const { return static_cast<int>(mask.size()); }
  std::size_t sum_count() const {
    return static_cast<std::size_t>(group_count) * tied_group_entry_count(vocab_size, embed_size);
  }
};

// A batch's arrays in type T: float on the device and in the twin, models::FloatBound or models::Rational on the
// host for the bound.
template <class T>
struct MlpFloatView {
  int input_size, hidden_size, output_size, token_count;
  const T *w1, *b1, *w2, *b2, *features, *targets;
  const std::int32_t* group;
  const std::uint8_t* mask;
  std::size_t sum_count;
};

template <class T>
struct TiedFloatView {
  int vocab_size, embed_size, token_count;
  const T *embedding, *bias, *targets;
  const std::int32_t *token_id, *group;
  const std::uint8_t* mask;
  std::size_t sum_count;
};

// Sum `index` of the MLP batch, in the order above.
template <class T>
ACCUMCHECK_HOST_DEVICE T mlp_float_sum(const MlpFloatView<T>& v, std::size_t index) {
  const int I = v.input_size, H = v.hidden_size, O = v.output_size;
  const MlpSumIndex at = mlp_sum_index(index, I, H, O);
  T h[kMlpWidthMax];
  bool on[kMlpWidthMax];
  T total = T(0);
  for (int t = 0; t < v.token_count; ++t) {
    if (!v.mask[t] || v.group[t] != at.g) continue;
    const T* x = v.features + static_cast<std::size_t>(t) * I;
    const T* y = v.targets + static_cast<std::size_t>(t) * O;
    for (int j = 0; j < H; ++j) {
      T z = v.b1[j];
      for (int k = 0; k < I; ++k) z = add_rn(z, mul_rn(v.w1[static_cast<std::size_t>(j) * I + k], x[k]));
      on[j] = z > T(0);
      h[j] = on[j] ? z : T(0);
    }
    const auto r = [&](int o) {
      T acc = v.b2[o];
      for (int j = 0; j < H; ++j) acc = add_rn(acc, mul_rn(v.w2[static_cast<std::size_t>(o) * H + j], h[j]));
      return sub_rn(acc, y[o]);
    };
    if (at.kind <= mlp_db1) {
      if (!on[at.a]) continue;  // relu's gradient is 0 where z <= 0
      T dz = mul_rn(v.w2[at.a], r(0));
      for (int o = 1; o < O; ++o) dz = add_rn(dz, mul_rn(v.w2[static_cast<std::size_t>(o) * H + at.a], r(o)));
      total = add_rn(total, at.kind == mlp_dw1 ? mul_rn(dz, x[at.b]) : dz);
    } else {
      const T ro = r(at.a);
      total = add_rn(total, at.kind == mlp_dw2 ? mul_rn(ro, h[at.b]) : ro);
    }
  }
  return total;
}

// Sum `index` of the tied-embedding batch, in the order above.
template <class T>
ACCUMCHECK_HOST_DEVICE T tied_float_sum(const TiedFloatView<T>& v, std::size_t index) {
  const int V = v.vocab_size, Dm = v.embed_size;
  const TiedSumIndex at = tied_sum_index(index, V, Dm);
  const T* E = v.embedding;
  T r[kTiedVocabMax];
  T total = T(0);
  for (int t = 0; t < v.token_count; ++t) {
    if (!v.mask[t] || v.group[t] != at.g) continue;
    const int id = v.token_id[t];
    const T* e = E + static_cast<std::size_t>(id) * Dm;
    const T* y = v.targets + static_cast<std::size_t>(t) * V;
    for (int u = 0; u < V; ++u) {
      T acc = v.bias[u];
      for (int k = 0; k < Dm; ++k) acc = add_rn(acc, mul_rn(E[static_cast<std::size_t>(u) * Dm + k], e[k]));
      r[u] = sub_rn(acc, y[u]);
    }
    if (at.is_bias) {
      total = add_rn(total, r[at.row]);
      continue;
    }
    // The output projection's use of E[row], then the input lookup's when this token is row.
    total = add_rn(total, mul_rn(r[at.row], e[at.d]));
    if (id == at.row)
      for (int u = 0; u < V; ++u) total = add_rn(total, mul_rn(E[static_cast<std::size_t>(u) * Dm + at.d], r[u]));
  }
  return total;
}

}  // namespace accumcheck::cuda
