// ExactTiedBatch: one micro-batch of the tied-embedding model (models/tied_embedding_model.h: logits E e_id + b, the
// embedding E used twice, as the input lookup and as the output projection) as integers over one common denominator,
// the form the exact kernel (exact_tied.cu) and its CPU twin (host_tied_sums, exact_tied.cpp) read.
//
// Every value is raw / D as in exact_batch.h. For a supervised token t with id i_t of group g, in integers:
//   r_t[v] = (b[v] - y_t[v]) D + sum_d E[v][d] E[i_t][d]     at D^2 (y_hat - y)
//   de_t[d] = sum_u E[u][d] r_t[u]                           at D^3 (the input use's gradient)
// and the sums of group g, in this order (group_entry_count entries per group):
//   dE[v][d] = sum_t r_t[v] E[i_t][d] + sum_{t: i_t = v} de_t[d]   at D^3      db[v] = sum_t r_t[v]   at D^2
// The gradient is sum_g c_g S[g] over those denominators (to_tied_gradient). lay_out_tied bounds every intermediate
// of the batch below 2^120 from its largest values (or refuses it), so the sums are exact in Int128 and the same
// whatever the launch configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/exact_batch.h"
#include "cuda/host_device.h"

namespace accumcheck::cuda {

inline constexpr int kTiedVocabMax = 256;  // a thread keeps r_t [V] in local memory

// The sums of one group, dE [V][Dm] then db [V]: how many, and which one `index` (groups back to back) is. The exact
// kernel's layout, and the float kernel's (float_models_batch.h).
ACCUMCHECK_HOST_DEVICE inline std::size_t tied_group_entry_count(int vocab, int embed) {
  return static_cast<std::size_t>(vocab) * static_cast<std::size_t>(embed + 1);
}
struct TiedSumIndex {
  int g;
  bool is_bias;
  int row, d;  // dE[row][d], or db[row]
};
ACCUMCHECK_HOST_DEVICE inline TiedSumIndex tied_sum_index(std::size_t index, int vocab, int embed) {
  const int V = vocab, Dm = embed;
  const std::size_t per_group = tied_group_entry_count(V, Dm);
  const std::size_t local = index % per_group;
  TiedSumIndex at{static_cast<int>(index / per_group), local >= static_cast<std::size_t>(V) * Dm, 0, 0};
  at.row = at.is_bias ? static_cast<int>(local - static_cast<std::size_t>(V) * Dm) : static_cast<int>(local / Dm);
  at.d = at.is_bias ? 0 : static_cast<int>(local % Dm);
  return at;
}

struct ExactTiedBatch {
  int vocab_size = 2, embed_size = 1, group_count = 1;
  std::int64_t denominator = 1;  // D
  // Raw values at D: E [V][Dm], b [V], targets [N][V].
  std::vector<std::int64_t> embedding, bias, targets;
  std::vector<std::int32_t> token_id, group;  // per token
  std::vector<std::uint8_t> mask;             // per token, 1 when supervised
  // What the layout proved: every intermediate of a token's term, and the sum of every term's magnitude over the
  // batch's supervised tokens, is at most this (below 2^120). The batched check scales it by its token weights.
  double sums_bound = 0;

  int token_count() const { return static_cast<int>(mask.size()); }
  std::size_t group_entry_count() const { return tied_group_entry_count(vocab_size, embed_size); }
  std::size_t sum_count() const { return static_cast<std::size_t>(group_count) * group_entry_count(); }
};

// ExactTiedBatch's arrays wherever they live.
struct TiedView {
  int vocab_size, embed_size, token_count;
  std::int64_t denominator;
  const std::int64_t *embedding, *bias, *targets;
  const std::int32_t *token_id, *group;
  const std::uint8_t* mask;
  std::size_t sum_count;
};

// The tied embedding's parameters as raw integers at D, wherever they live: what one token's term reads beside the
// token.
struct TiedParams {
  int vocab_size, embed_size;
  std::int64_t denominator;
  const std::int64_t *embedding, *bias;
};

// One supervised token's term of sum `at` (its group aside), for the token's id and targets y (raw at D): r[row]
// (db), or r[row] e_id[d] plus, when the token is row, (E^T r)[d] (dE), at the sum's denominator. The batched check
// (batched_entry.h) weights these terms by token.
ACCUMCHECK_HOST_DEVICE inline Int128 tied_token_term(const TiedParams& p, int id, const std::int64_t* y,
                                                     const TiedSumIndex& at) {
  const int V = p.vocab_size, Dm = p.embed_size;
  const std::int64_t D = p.denominator;
  const std::int64_t* E = p.embedding;
  Int128 r[kTiedVocabMax];
  for (int u = 0; u < V; ++u) {
    Int128 acc = static_cast<Int128>(p.bias[u]) * D - static_cast<Int128>(y[u]) * D;
    for (int k = 0; k < Dm; ++k)
      acc += static_cast<Int128>(E[static_cast<std::size_t>(u) * Dm + k]) * E[static_cast<std::size_t>(id) * Dm + k];
    r[u] = acc;
  }
  if (at.is_bias) return r[at.row];
  // The output projection's use of E[row], then the input lookup's when this token is row.
  Int128 term = r[at.row] * E[static_cast<std::size_t>(id) * Dm + at.d];
  if (id == at.row)
    for (int u = 0; u < V; ++u) term += static_cast<Int128>(E[static_cast<std::size_t>(u) * Dm + at.d]) * r[u];
  return term;
}

// Sum `index` of the batch (dE [V][Dm] then db [V] per group, groups back to back).
ACCUMCHECK_HOST_DEVICE inline Int128 tied_entry_sum(const TiedView& v, std::size_t index) {
  const int V = v.vocab_size;
  const TiedSumIndex at = tied_sum_index(index, V, v.embed_size);
  const TiedParams p{V, v.embed_size, v.denominator, v.embedding, v.bias};
  Int128 total = 0;
  for (int t = 0; t < v.token_count; ++t) {
    if (!v.mask[t] || v.group[t] != at.g) continue;
    total += tied_token_term(p, v.token_id[t], v.targets + static_cast<std::size_t>(t) * V, at);
  }
  return total;
}

}  // namespace accumcheck::cuda
