// Template bodies for mlp_model.h.
#pragma once

#include <type_traits>
#include <vector>

namespace accumcheck::models::mlp_model {

namespace detail {
// Forward for one token: fills z [H] and h [H], writes y_hat - y into r [O].
template <class S>
void forward_token(const ModelSpec& spec, const Parameters<S>& params, const Sequence<S>& seq, int t,
                   std::vector<S>& z, std::vector<S>& h, std::vector<S>& r) {
  const Matrix<S>& W1 = params.tensors[0];
  const Matrix<S>& b1 = params.tensors[1];
  const Matrix<S>& W2 = params.tensors[2];
  const Matrix<S>& b2 = params.tensors[3];
  for (int j = 0; j < spec.hidden_size; ++j) {
    S acc = b1(j, 0);
    for (int k = 0; k < spec.input_size; ++k) acc += W1(j, k) * seq.features(t, k);
    z[static_cast<std::size_t>(j)] = acc;
    h[static_cast<std::size_t>(j)] = acc > S(0) ? acc : S(0);
  }
  for (int o = 0; o < spec.output_size; ++o) {
    S acc = b2(o, 0);
    for (int j = 0; j < spec.hidden_size; ++j) acc += W2(o, j) * h[static_cast<std::size_t>(j)];
    r[static_cast<std::size_t>(o)] = acc - seq.targets(t, o);
  }
}
}  // namespace detail

template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  std::vector<S> z(static_cast<std::size_t>(spec.hidden_size)), h(z.size()),
      r(static_cast<std::size_t>(spec.output_size));
  S total(0);
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<S>& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      detail::forward_token(spec, params, seq, t, z, h, r);
      S token_loss(0);
      for (const S& ro : r) token_loss += ro * ro;
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
  // FastRational over dyadic data runs in GMP integers (mlp_model_exact.h); the loop below is the rest.
  if constexpr (std::is_same_v<S, FastRational>)
    if (accumulate_gradient_integer(spec, params, sequences, sequence_coefficients, grad)) return;
  const Matrix<S>& W2 = params.tensors[2];
  std::vector<S> z(static_cast<std::size_t>(spec.hidden_size)), h(z.size()), dz(z.size()),
      r(static_cast<std::size_t>(spec.output_size));
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<S>& seq = sequences[i];
    if (seq.token_count() > 0)
      for (std::size_t p = 0; p < 4; ++p) grad.present[p] = true;
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      detail::forward_token(spec, params, seq, t, z, h, r);
      const S& w = sequence_coefficients[i];
      for (S& ro : r) ro = w * ro;
      for (int o = 0; o < spec.output_size; ++o) {
        const S& ro = r[static_cast<std::size_t>(o)];
        grad.tensors[3](o, 0) += ro;
        for (int j = 0; j < spec.hidden_size; ++j) grad.tensors[2](o, j) += ro * h[static_cast<std::size_t>(j)];
      }
      for (int j = 0; j < spec.hidden_size; ++j) {
        S acc(0);
        if (z[static_cast<std::size_t>(j)] > S(0))
          for (int o = 0; o < spec.output_size; ++o) acc += W2(o, j) * r[static_cast<std::size_t>(o)];
        dz[static_cast<std::size_t>(j)] = acc;
      }
      for (int j = 0; j < spec.hidden_size; ++j) {
        const S& dzj = dz[static_cast<std::size_t>(j)];
        grad.tensors[1](j, 0) += dzj;
        for (int k = 0; k < spec.input_size; ++k) grad.tensors[0](j, k) += dzj * seq.features(t, k);
      }
    }
  }
}

}  // namespace accumcheck::models::mlp_model
