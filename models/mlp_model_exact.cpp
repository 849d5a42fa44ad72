// The MLP's gradient over GMP integers; the method is in mlp_model_exact.h.
#include "models/mlp_model_exact.h"

#include <cstdint>
#include <vector>

#include "models/exact_sums.h"
#include "models/fast_rational.h"

namespace accumcheck::models::mlp_model {

bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  ACCUMCHECK_ASSERT(params.size() == 4 && grad.size() == 4 && grad.present.size() == 4);
  const int in = spec.input_size, hidden = spec.hidden_size, out = spec.output_size;
  const auto I = static_cast<std::size_t>(in), H = static_cast<std::size_t>(hidden), O = static_cast<std::size_t>(out);

  int K = 0;
  thread_local mpz_class D, D2, D3, quotient, term;
  if (!exact_sums::prepare(in, out, params, sequences, sequence_coefficients, exact_sums::kProductParameterLimbsMax, K, D)) return false;
  mpz_mul(D2.get_mpz_t(), D.get_mpz_t(), D.get_mpz_t());
  mpz_mul(D3.get_mpz_t(), D2.get_mpz_t(), D.get_mpz_t());

  // The parameters as integers v D, in one buffer: W1 [H x I] row-major, b1 [H], W2 [O x H] row-major, b2 [O];
  // the sums in the same layout; z, h [H], r [O], dz [H] per token.
  const std::size_t w1 = 0, b1 = H * I, w2 = b1 + H, b2 = w2 + O * H, total = b2 + O;
  thread_local std::vector<mpz_class> weights, sums, z, r, dz;
  thread_local std::vector<std::int64_t> x;
  if (weights.size() < total) weights.resize(total);
  if (sums.size() < total) sums.resize(total);
  if (z.size() < H) z.resize(H);
  if (dz.size() < H) dz.resize(H);
  if (r.size() < O) r.resize(O);
  for (std::size_t j = 0; j < total; ++j) sums[j] = 0;
  x.resize(I);
  for (std::size_t j = 0; j < H; ++j) {
    for (std::size_t k = 0; k < I; ++k)
      exact_sums::scale_to(params.tensors[0](static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(k)), D, weights[w1 + j * I + k], quotient);
    exact_sums::scale_to(params.tensors[1](static_cast<Eigen::Index>(j), 0), D, weights[b1 + j], quotient);
  }
  for (std::size_t o = 0; o < O; ++o) {
    for (std::size_t j = 0; j < H; ++j)
      exact_sums::scale_to(params.tensors[2](static_cast<Eigen::Index>(o), static_cast<Eigen::Index>(j)), D, weights[w2 + o * H + j], quotient);
    exact_sums::scale_to(params.tensors[3](static_cast<Eigen::Index>(o), 0), D, weights[b2 + o], quotient);
  }

  // dW1 += c S / (D^3 2^(2K)), db1 += c S / (D^3 2^K), dW2 += c S / (D^3 2^(2K)), db2 += c S / (D^2 2^K).
  bool touched = false;
  const auto flush = [&](const FastRational& c) {
    if (!touched) return;
    touched = false;
    const auto add = [&](mpz_class& sum, const mpz_class& denominator, int exponent, FastRational& into) {
      if (mpz_sgn(sum.get_mpz_t()) != 0) into += c * exact_sums::quotient(sum, denominator, exponent);
    };
    for (std::size_t j = 0; j < H; ++j) {
      const auto jj = static_cast<Eigen::Index>(j);
      for (std::size_t k = 0; k < I; ++k) add(sums[w1 + j * I + k], D3, 2 * K, grad.tensors[0](jj, static_cast<Eigen::Index>(k)));
      add(sums[b1 + j], D3, K, grad.tensors[1](jj, 0));
    }
    for (std::size_t o = 0; o < O; ++o) {
      const auto oo = static_cast<Eigen::Index>(o);
      for (std::size_t j = 0; j < H; ++j) add(sums[w2 + o * H + j], D3, 2 * K, grad.tensors[2](oo, static_cast<Eigen::Index>(j)));
      add(sums[b2 + o], D2, K, grad.tensors[3](oo, 0));
    }
  };

  // Any token, masked or not, takes every parameter through the forward pass.
  // Written bit by bit: vector<bool>::assign is an out-of-line call, and this runs once a token.
  const auto present = [&](const Sequence<FastRational>&, int) {
    grad.present[0] = grad.present[1] = grad.present[2] = grad.present[3] = true;
  };
  const auto token = [&](const Sequence<FastRational>& seq, int t) {
    touched = true;
    for (std::size_t k = 0; k < I; ++k) x[k] = exact_sums::scaled(seq.features(t, static_cast<int>(k)), K);
    // Z = W1 x + b1 2^K = z D 2^K; H = relu(Z), kept in z with the sign of Z read before.
    for (std::size_t j = 0; j < H; ++j) {
      mpz_mul_2exp(z[j].get_mpz_t(), weights[b1 + j].get_mpz_t(), static_cast<mp_bitcnt_t>(K));
      for (std::size_t k = 0; k < I; ++k) exact_sums::add_product(z[j].get_mpz_t(), weights[w1 + j * I + k].get_mpz_t(), x[k]);
    }
    // R = W2 relu(Z) + b2 D 2^K - y D^2 = r D^2 2^K.
    for (std::size_t o = 0; o < O; ++o) {
      mpz_mul(r[o].get_mpz_t(), weights[b2 + o].get_mpz_t(), D.get_mpz_t());
      mpz_mul_2exp(r[o].get_mpz_t(), r[o].get_mpz_t(), static_cast<mp_bitcnt_t>(K));
      mpz_mul_si(term.get_mpz_t(), D2.get_mpz_t(), exact_sums::scaled(seq.targets(t, static_cast<int>(o)), K));
      mpz_sub(r[o].get_mpz_t(), r[o].get_mpz_t(), term.get_mpz_t());
      for (std::size_t j = 0; j < H; ++j)
        if (mpz_sgn(z[j].get_mpz_t()) > 0) mpz_addmul(r[o].get_mpz_t(), weights[w2 + o * H + j].get_mpz_t(), z[j].get_mpz_t());
    }
    // dW2 += R H^T, db2 += R; dZ = [Z > 0] W2^T R; dW1 += dZ x^T, db1 += dZ.
    for (std::size_t o = 0; o < O; ++o) {
      for (std::size_t j = 0; j < H; ++j)
        if (mpz_sgn(z[j].get_mpz_t()) > 0) mpz_addmul(sums[w2 + o * H + j].get_mpz_t(), r[o].get_mpz_t(), z[j].get_mpz_t());
      mpz_add(sums[b2 + o].get_mpz_t(), sums[b2 + o].get_mpz_t(), r[o].get_mpz_t());
    }
    for (std::size_t j = 0; j < H; ++j) {
      if (mpz_sgn(z[j].get_mpz_t()) <= 0) continue;  // relu'(0) = 0: no gradient through a unit at or below zero
      dz[j] = 0;
      for (std::size_t o = 0; o < O; ++o) mpz_addmul(dz[j].get_mpz_t(), weights[w2 + o * H + j].get_mpz_t(), r[o].get_mpz_t());
      for (std::size_t k = 0; k < I; ++k) exact_sums::add_product(sums[w1 + j * I + k].get_mpz_t(), dz[j].get_mpz_t(), x[k]);
      mpz_add(sums[b1 + j].get_mpz_t(), sums[b1 + j].get_mpz_t(), dz[j].get_mpz_t());
    }
  };
  exact_sums::for_each_run(sequences, sequence_coefficients, present, token, flush);
  return true;
}

}  // namespace accumcheck::models::mlp_model
