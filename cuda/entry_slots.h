// Where entry e of a group's sums lands in models/'s gradient (tensor, row, column), and at which power of the common
// denominator an exact kernel computes it: the layouts' orders (exact_batch.h, exact_mlp_batch.h, exact_tied_batch.h,
// and their fp32 siblings, which share them), written once for the gradients the host forms (float_gradient.cpp,
// resident.cpp). The linear model's W_e and b_e are tensors 2e and 2e + 1, at D^3; the MLP's dW1, db1, dW2, db2 are
// tensors 0-3 at D^5, D^4, D^5, D^3; the tied embedding's dE and db tensors 0 and 1 at D^3 and D^2.
#pragma once

#include <Eigen/Core>

#include <cstddef>

#include "cuda/exact_batch.h"
#include "cuda/exact_mlp_batch.h"
#include "cuda/exact_tied_batch.h"
#include "cuda/float_linear_batch.h"
#include "cuda/float_models_batch.h"

namespace accumcheck::cuda {

struct EntrySlot {
  std::size_t tensor;
  Eigen::Index row, col;
  int exponent;  // the exact sum's denominator is D^exponent
};

// Batch: any of the linear model's batches (input_size, output_size, expert_count).
template <class Batch>
EntrySlot linear_entry_slot(const Batch& b, std::size_t e) {
  const LinearSumIndex at = linear_sum_index(e, b.input_size, b.output_size, b.expert_count);
  return at.k < b.input_size ? EntrySlot{static_cast<std::size_t>(2 * at.e), at.o, at.k, 3}
                             : EntrySlot{static_cast<std::size_t>(2 * at.e + 1), at.o, 0, 3};
}

// Batch: any of the MLP's batches (input_size, hidden_size, output_size).
template <class Batch>
EntrySlot mlp_entry_slot(const Batch& b, std::size_t e) {
  static constexpr int kExponent[4] = {5, 4, 5, 3};
  const MlpSumIndex at = mlp_sum_index(e, b.input_size, b.hidden_size, b.output_size);
  const bool matrix = at.kind == mlp_dw1 || at.kind == mlp_dw2;
  return EntrySlot{static_cast<std::size_t>(at.kind), at.a, matrix ? at.b : 0, kExponent[at.kind]};
}

// Batch: any of the tied embedding's batches (vocab_size, embed_size).
template <class Batch>
EntrySlot tied_entry_slot(const Batch& b, std::size_t e) {
  const TiedSumIndex at = tied_sum_index(e, b.vocab_size, b.embed_size);
  return at.is_bias ? EntrySlot{1, at.row, 0, 2} : EntrySlot{0, at.row, at.d, 3};
}

inline EntrySlot entry_slot(const ExactLinearBatch& b, std::size_t e) { return linear_entry_slot(b, e); }
inline EntrySlot entry_slot(const FloatLinearBatch& b, std::size_t e) { return linear_entry_slot(b, e); }
inline EntrySlot entry_slot(const ExactMlpBatch& b, std::size_t e) { return mlp_entry_slot(b, e); }
inline EntrySlot entry_slot(const FloatMlpBatch& b, std::size_t e) { return mlp_entry_slot(b, e); }
inline EntrySlot entry_slot(const ExactTiedBatch& b, std::size_t e) { return tied_entry_slot(b, e); }
inline EntrySlot entry_slot(const FloatTiedBatch& b, std::size_t e) { return tied_entry_slot(b, e); }

}  // namespace accumcheck::cuda
