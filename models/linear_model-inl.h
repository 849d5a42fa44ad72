// Template bodies for linear_model.h. Written as plain loops: obvious, allocation-free in the token loop.
#pragma once

#include <type_traits>

namespace accumcheck::models::linear_model {

namespace detail {
inline int expert_of(const ModelSpec& spec, const std::vector<int>& expert_index, int t) {
  return spec.expert_count == 1 ? 0 : expert_index[static_cast<std::size_t>(t)];
}
}  // namespace detail

template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  const int in = spec.input_size, out = spec.output_size;
  S total(0);
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<S>& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      const int e = detail::expert_of(spec, seq.expert_index, t);
      const Matrix<S>& W = params.tensors[static_cast<std::size_t>(2 * e)];
      const Matrix<S>& b = params.tensors[static_cast<std::size_t>(2 * e + 1)];
      S token_loss(0);
      for (int o = 0; o < out; ++o) {
        S r = b(o, 0);
        for (int k = 0; k < in; ++k) r += W(o, k) * seq.features(t, k);
        r -= seq.targets(t, o);
        token_loss += r * r;
      }
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
  // FastRational's common case, dyadic values, runs in integers (linear_model_exact.h); the loop below is the rest.
  if constexpr (std::is_same_v<S, FastRational>)
    if (accumulate_gradient_dyadic(spec, params, sequences, sequence_coefficients, grad) ||
        accumulate_gradient_integer(spec, params, sequences, sequence_coefficients, grad))
      return;
  const int in = spec.input_size, out = spec.output_size;
  std::vector<S> r(static_cast<std::size_t>(out));
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<S>& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      const int e = detail::expert_of(spec, seq.expert_index, t);
      const auto w_index = static_cast<std::size_t>(2 * e), b_index = w_index + 1;
      // The token went through expert e's forward pass, masked or not: autograd gives e a gradient.
      grad.present[w_index] = true;
      grad.present[b_index] = true;
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      const Matrix<S>& W = params.tensors[w_index];
      const Matrix<S>& b = params.tensors[b_index];
      const S& w = sequence_coefficients[i];
      for (int o = 0; o < out; ++o) {
        S acc = b(o, 0);
        for (int k = 0; k < in; ++k) acc += W(o, k) * seq.features(t, k);
        r[static_cast<std::size_t>(o)] = w * (acc - seq.targets(t, o));
      }
      Matrix<S>& dW = grad.tensors[w_index];
      Matrix<S>& db = grad.tensors[b_index];
      for (int o = 0; o < out; ++o) {
        const S& ro = r[static_cast<std::size_t>(o)];
        db(o, 0) += ro;
        for (int k = 0; k < in; ++k) dW(o, k) += ro * seq.features(t, k);
      }
    }
  }
}

}  // namespace accumcheck::models::linear_model
