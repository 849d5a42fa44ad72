// The tied-embedding model's gradient over GMP integers; the method is in tied_embedding_model_exact.h.
#include "models/tied_embedding_model_exact.h"

#include <cstdint>
#include <vector>

#include "models/exact_sums.h"
#include "models/fast_rational.h"

namespace accumcheck::models::tied_embedding_model {

bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  ACCUMCHECK_ASSERT(params.size() == 2 && grad.size() == 2);
  const auto V = static_cast<std::size_t>(spec.vocab_size), Dim = static_cast<std::size_t>(spec.embed_size);

  int K = 0;
  thread_local mpz_class Q, Q2, Q3, quotient, term;
  if (!exact_sums::prepare(0, spec.vocab_size, params, sequences, sequence_coefficients, exact_sums::kProductParameterLimbsMax, K, Q))
    return false;
  mpz_mul(Q2.get_mpz_t(), Q.get_mpz_t(), Q.get_mpz_t());
  mpz_mul(Q3.get_mpz_t(), Q2.get_mpz_t(), Q.get_mpz_t());

  // E [V x D] row-major then b [V], as integers v Q; the sums in the same layout; R [V] per token.
  const std::size_t b = V * Dim, total = b + V;
  thread_local std::vector<mpz_class> weights, sums, r;
  if (weights.size() < total) weights.resize(total);
  if (sums.size() < total) sums.resize(total);
  if (r.size() < V) r.resize(V);
  for (std::size_t j = 0; j < total; ++j) sums[j] = 0;
  for (std::size_t v = 0; v < V; ++v) {
    for (std::size_t d = 0; d < Dim; ++d)
      exact_sums::scale_to(params.tensors[0](static_cast<Eigen::Index>(v), static_cast<Eigen::Index>(d)), Q,
                           weights[v * Dim + d], quotient);
    exact_sums::scale_to(params.tensors[1](static_cast<Eigen::Index>(v), 0), Q, weights[b + v], quotient);
  }

  // dE += c S / (Q^3 2^K), db += c S / (Q^2 2^K).
  bool touched = false;
  const auto flush = [&](const FastRational& c) {
    if (!touched) return;
    touched = false;
    for (std::size_t v = 0; v < V; ++v) {
      const auto vv = static_cast<Eigen::Index>(v);
      for (std::size_t d = 0; d < Dim; ++d)
        if (mpz_sgn(sums[v * Dim + d].get_mpz_t()) != 0)
          grad.tensors[0](vv, static_cast<Eigen::Index>(d)) += c * exact_sums::quotient(sums[v * Dim + d], Q3, K);
      if (mpz_sgn(sums[b + v].get_mpz_t()) != 0) grad.tensors[1](vv, 0) += c * exact_sums::quotient(sums[b + v], Q2, K);
    }
  };

  // Any token, masked or not, takes both parameters through the forward pass.
  const auto present = [&](const Sequence<FastRational>&, int) { grad.present[0] = grad.present[1] = true; };
  const auto token = [&](const Sequence<FastRational>& seq, int t) {
    touched = true;
    const auto id = static_cast<std::size_t>(seq.token_ids[static_cast<std::size_t>(t)]);
    const mpz_class* e = &weights[id * Dim];
    // R = (E e + b Q) 2^K - y Q^2 = r Q^2 2^K.
    for (std::size_t v = 0; v < V; ++v) {
      mpz_mul(r[v].get_mpz_t(), weights[b + v].get_mpz_t(), Q.get_mpz_t());
      for (std::size_t d = 0; d < Dim; ++d) mpz_addmul(r[v].get_mpz_t(), weights[v * Dim + d].get_mpz_t(), e[d].get_mpz_t());
      mpz_mul_2exp(r[v].get_mpz_t(), r[v].get_mpz_t(), static_cast<mp_bitcnt_t>(K));
      mpz_mul_si(term.get_mpz_t(), Q2.get_mpz_t(), exact_sums::scaled(seq.targets(t, static_cast<int>(v)), K));
      mpz_sub(r[v].get_mpz_t(), r[v].get_mpz_t(), term.get_mpz_t());
    }
    // Output use: dE[v] += R_v e; input use: dE[id] += E^T R (from E itself, never from the sums); db += R.
    for (std::size_t v = 0; v < V; ++v) {
      for (std::size_t d = 0; d < Dim; ++d) {
        mpz_addmul(sums[v * Dim + d].get_mpz_t(), r[v].get_mpz_t(), e[d].get_mpz_t());
        mpz_addmul(sums[id * Dim + d].get_mpz_t(), weights[v * Dim + d].get_mpz_t(), r[v].get_mpz_t());
      }
      mpz_add(sums[b + v].get_mpz_t(), sums[b + v].get_mpz_t(), r[v].get_mpz_t());
    }
  };
  exact_sums::for_each_run(sequences, sequence_coefficients, present, token, flush);
  return true;
}

}  // namespace accumcheck::models::tied_embedding_model
