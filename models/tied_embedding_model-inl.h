// Template bodies for tied_embedding_model.h.
#pragma once

#include <type_traits>
#include <vector>

namespace accumcheck::models::tied_embedding_model {

namespace detail {
// Writes y_hat - y for token t into r [V].
template <class S>
void forward_token(const ModelSpec& spec, const Parameters<S>& params, const Sequence<S>& seq, int t,
                   std::vector<S>& r) {
  const Matrix<S>& E = params.tensors[0];
  const Matrix<S>& b = params.tensors[1];
  const int id = seq.token_ids[static_cast<std::size_t>(t)];
  for (int v = 0; v < spec.vocab_size; ++v) {
    S acc = b(v, 0);
    for (int d = 0; d < spec.embed_size; ++d) acc += E(v, d) * E(id, d);
    r[static_cast<std::size_t>(v)] = acc - seq.targets(t, v);
  }
}
}  // namespace detail

template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  std::vector<S> r(static_cast<std::size_t>(spec.vocab_size));
  S total(0);
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<S>& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      detail::forward_token(spec, params, seq, t, r);
      S token_loss(0);
      for (const S& rv : r) token_loss += rv * rv;
      total += sequence_coefficients[i] * token_loss / S(2);
    }
  }
  return total;
}

template <class S>
void accumulate_gradient(const ModelSpec& spec, const Parameters<S>& params,
                         std::span<const Sequence<S>> sequences, std::span<const S> sequence_coefficients,
                         Gradient<S>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  // FastRational over dyadic targets runs in GMP integers (tied_embedding_model_exact.h); the loop below is the rest.
  if constexpr (std::is_same_v<S, FastRational>)
    if (accumulate_gradient_integer(spec, params, sequences, sequence_coefficients, grad)) return;
  const Matrix<S>& E = params.tensors[0];
  std::vector<S> r(static_cast<std::size_t>(spec.vocab_size)), de(static_cast<std::size_t>(spec.embed_size));
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<S>& seq = sequences[i];
    if (seq.token_count() > 0) grad.present[0] = grad.present[1] = true;
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      detail::forward_token(spec, params, seq, t, r);
      const S& w = sequence_coefficients[i];
      for (S& rv : r) rv = w * rv;
      const int id = seq.token_ids[static_cast<std::size_t>(t)];
      // Input use: de = E^T r, computed from E before any update (dE is a separate tensor).
      for (int d = 0; d < spec.embed_size; ++d) {
        S acc(0);
        for (int v = 0; v < spec.vocab_size; ++v) acc += E(v, d) * r[static_cast<std::size_t>(v)];
        de[static_cast<std::size_t>(d)] = acc;
      }
      Matrix<S>& dE = grad.tensors[0];
      for (int v = 0; v < spec.vocab_size; ++v) {
        const S& rv = r[static_cast<std::size_t>(v)];
        grad.tensors[1](v, 0) += rv;
        for (int d = 0; d < spec.embed_size; ++d) dE(v, d) += rv * E(id, d);
      }
      for (int d = 0; d < spec.embed_size; ++d) dE(id, d) += de[static_cast<std::size_t>(d)];
    }
  }
}

}  // namespace accumcheck::models::tied_embedding_model
