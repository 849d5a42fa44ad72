// The linear model's gradient in exact integers; the method and its bounds are in linear_model_exact.h.
#include "models/linear_model_exact.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <vector>

#include "models/exact_sums.h"
#include "models/fast_rational.h"

namespace accumcheck::models::linear_model {

namespace {

using models::detail::Int128;
using exact_sums::Extent;
using exact_sums::scaled;

int expert_of(const ModelSpec& spec, const Sequence<FastRational>& seq, int t) {
  return spec.expert_count == 1 ? 0 : seq.expert_index[static_cast<std::size_t>(t)];
}

// A token went through its expert's forward pass, masked or not: autograd gives that expert a gradient.
auto mark_present(const ModelSpec& spec, Gradient<FastRational>& grad) {
  return [&spec, &grad](const Sequence<FastRational>& seq, int t) {
    const auto e = static_cast<std::size_t>(expert_of(spec, seq, t));
    grad.present[2 * e] = true;
    grad.present[2 * e + 1] = true;
  };
}

// What pass 2 of accumulate_gradient_dyadic needs of pass 1: the model's widths and the common exponent.
struct Sizes {
  int in, out;
  std::size_t experts;
  int K;
};

// Pass 2 of accumulate_gradient_dyadic: the sums in the accumulator type Acc (std::int64_t or Int128), which the
// caller has checked holds every partial sum, then each run's coefficient times them into `grad`.
template <class Acc>
void sum_runs(const ModelSpec& spec, const Parameters<FastRational>& params,
              std::span<const Sequence<FastRational>> sequences, std::span<const FastRational> sequence_coefficients,
              const Sizes& sizes, Gradient<FastRational>& grad) {
  // Per expert, `stride` entries: row o holds W(o, 0..in-1) then b(o), for the scaled parameters and for the sums
  // alike. Scratch is kept per thread (one set per accumulator type), so that a trial allocates nothing here after
  // its first call.
  const int in = sizes.in, out = sizes.out, K = sizes.K;
  const std::size_t experts = sizes.experts;
  const auto row = static_cast<std::size_t>(in) + 1, stride = row * static_cast<std::size_t>(out);
  thread_local std::vector<std::int64_t> weights, x;
  thread_local std::vector<Acc> sums;
  thread_local std::vector<char> touched;
  weights.resize(experts * stride);
  sums.assign(experts * stride, 0);
  touched.assign(experts, 0);
  x.resize(static_cast<std::size_t>(in));
  for (std::size_t e = 0; e < experts; ++e) {
    const Matrix<FastRational>& W = params.tensors[2 * e];
    const Matrix<FastRational>& b = params.tensors[2 * e + 1];
    for (int o = 0; o < out; ++o) {
      std::int64_t* w = &weights[e * stride + static_cast<std::size_t>(o) * row];
      for (int k = 0; k < in; ++k) w[k] = scaled(W(o, k), K);
      w[in] = scaled(b(o, 0), K);
    }
  }
  const Acc two_to_k = Acc{1} << K;
  // dW += c * sum / 2^(3K) and db += c * sum / 2^(2K) for every expert the run of sequences reached.
  const auto flush = [&](const FastRational& c) {
    for (std::size_t e = 0; e < experts; ++e) {
      if (!touched[e]) continue;
      touched[e] = 0;
      Matrix<FastRational>& dW = grad.tensors[2 * e];
      Matrix<FastRational>& db = grad.tensors[2 * e + 1];
      for (int o = 0; o < out; ++o) {
        Acc* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
        for (int k = 0; k < in; ++k)
          if (s[k] != 0) {
            dW(o, k) += c * FastRational::from_dyadic(s[k], 3 * K);
            s[k] = 0;
          }
        if (s[in] != 0) {
          db(o, 0) += c * FastRational::from_dyadic(s[in], 2 * K);
          s[in] = 0;
        }
      }
    }
  };
  const auto token = [&](const Sequence<FastRational>& seq, int t) {
    const auto e = static_cast<std::size_t>(expert_of(spec, seq, t));
    touched[e] = 1;
    for (int k = 0; k < in; ++k) x[static_cast<std::size_t>(k)] = scaled(seq.features(t, k), K);
    for (int o = 0; o < out; ++o) {
      const std::int64_t* w = &weights[e * stride + static_cast<std::size_t>(o) * row];
      Acc r = (Acc{w[in]} - scaled(seq.targets(t, o), K)) * two_to_k;  // (b - y) 2^(2K)
      for (int k = 0; k < in; ++k) r += Acc{w[k]} * x[static_cast<std::size_t>(k)];
      Acc* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
      for (int k = 0; k < in; ++k) s[k] += r * x[static_cast<std::size_t>(k)];
      s[in] += r;
    }
  };
  exact_sums::for_each_run(sequences, sequence_coefficients, mark_present(spec, grad), token, flush);
}

}  // namespace

bool accumulate_gradient_dyadic(const ModelSpec& spec, const Parameters<FastRational>& params,
                                std::span<const Sequence<FastRational>> sequences,
                                std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  const int in = spec.input_size, out = spec.output_size;
  const auto experts = static_cast<std::size_t>(spec.expert_count);
  ACCUMCHECK_ASSERT(params.size() == 2 * experts && grad.size() == 2 * experts);

  // Pass 1: every value read is an inline dyadic; the common exponent K and the scaled values' bit lengths.
  int K = 0;
  Extent p_extent, x_extent, y_extent;
  for (const auto& tensor : params.tensors)
    for (Eigen::Index i = 0; i < tensor.size(); ++i)
      if (!p_extent.add(tensor(i), K)) return false;
  std::uint64_t supervised = 0;
  if (!exact_sums::scan_data(in, out, sequences, sequence_coefficients, K, x_extent, y_extent, supervised)) return false;
  const int bp = p_extent.scaled_bits(K), bx = x_extent.scaled_bits(K), by = y_extent.scaled_bits(K);
  if (bp > 62 || bx > 62 || by > 62) return false;
  const int m = std::max({bp + bx, bp + K, by + K});
  const auto terms = static_cast<int>(std::bit_width(supervised * static_cast<std::uint64_t>(in + 2)));
  if (terms + m + bx > 126) return false;

  // Pass 2, in int64 where the sums' bound allows it (the generator's small dyadics at one step: each
  // multiply-add one instruction instead of __int128's three or four), else in __int128. The two give the same
  // integers, so the same gradient.
  const Sizes sizes{in, out, experts, K};
  if (terms + m + bx <= 62) sum_runs<std::int64_t>(spec, params, sequences, sequence_coefficients, sizes, grad);
  else sum_runs<Int128>(spec, params, sequences, sequence_coefficients, sizes, grad);
  return true;
}

bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  const int in = spec.input_size, out = spec.output_size;
  const auto experts = static_cast<std::size_t>(spec.expert_count);
  ACCUMCHECK_ASSERT(params.size() == 2 * experts && grad.size() == 2 * experts);

  // The data inline dyadics over one exponent K; the parameters any rationals of bounded size, over their least
  // common denominator D.
  int K = 0;
  thread_local mpz_class D, quotient, r, yD;
  if (!exact_sums::prepare(in, out, params, sequences, sequence_coefficients, exact_sums::kLinearParameterLimbsMax, K, D)) return false;

  // Per expert, `stride` entries: row o holds W(o, 0..in-1) then b(o), as integers v D, and the sums alike.
  const auto row = static_cast<std::size_t>(in) + 1, stride = row * static_cast<std::size_t>(out);
  thread_local std::vector<mpz_class> weights, sums;
  thread_local std::vector<std::int64_t> x;
  thread_local std::vector<char> touched;
  if (weights.size() < experts * stride) weights.resize(experts * stride);
  if (sums.size() < experts * stride) sums.resize(experts * stride);
  for (std::size_t j = 0; j < experts * stride; ++j) sums[j] = 0;
  touched.assign(experts, 0);
  x.resize(static_cast<std::size_t>(in));
  const auto scale = [&](const FastRational& v, mpz_class& into) { exact_sums::scale_to(v, D, into, quotient); };
  for (std::size_t e = 0; e < experts; ++e) {
    const Matrix<FastRational>& W = params.tensors[2 * e];
    const Matrix<FastRational>& b = params.tensors[2 * e + 1];
    for (int o = 0; o < out; ++o) {
      mpz_class* w = &weights[e * stride + static_cast<std::size_t>(o) * row];
      for (int k = 0; k < in; ++k) scale(W(o, k), w[k]);
      scale(b(o, 0), w[in]);
    }
  }
  // dW += c * sum / (D 2^(2K)) and db += c * sum / (D 2^K): r D 2^K summed, times x 2^K for dW.
  const auto flush = [&](const FastRational& c) {
    for (std::size_t e = 0; e < experts; ++e) {
      if (!touched[e]) continue;
      touched[e] = 0;
      Matrix<FastRational>& dW = grad.tensors[2 * e];
      Matrix<FastRational>& db = grad.tensors[2 * e + 1];
      for (int o = 0; o < out; ++o) {
        mpz_class* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
        for (int k = 0; k <= in; ++k) {
          if (mpz_sgn(s[k].get_mpz_t()) == 0) continue;
          const FastRational term = c * exact_sums::quotient(s[k], D, k < in ? 2 * K : K);
          if (k < in) dW(o, k) += term;
          else db(o, 0) += term;
        }
      }
    }
  };
  const auto token = [&](const Sequence<FastRational>& seq, int t) {
    const auto e = static_cast<std::size_t>(expert_of(spec, seq, t));
    touched[e] = 1;
    for (int k = 0; k < in; ++k) x[static_cast<std::size_t>(k)] = scaled(seq.features(t, k), K);
    for (int o = 0; o < out; ++o) {
      const mpz_class* w = &weights[e * stride + static_cast<std::size_t>(o) * row];
      // r D 2^K = b D 2^K - y 2^K D + sum_k W D x 2^K
      mpz_mul_2exp(r.get_mpz_t(), w[in].get_mpz_t(), static_cast<mp_bitcnt_t>(K));
      mpz_mul_si(yD.get_mpz_t(), D.get_mpz_t(), scaled(seq.targets(t, o), K));
      mpz_sub(r.get_mpz_t(), r.get_mpz_t(), yD.get_mpz_t());
      for (int k = 0; k < in; ++k) exact_sums::add_product(r.get_mpz_t(), w[k].get_mpz_t(), x[static_cast<std::size_t>(k)]);
      mpz_class* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
      for (int k = 0; k < in; ++k) exact_sums::add_product(s[k].get_mpz_t(), r.get_mpz_t(), x[static_cast<std::size_t>(k)]);
      mpz_add(s[in].get_mpz_t(), s[in].get_mpz_t(), r.get_mpz_t());
    }
  };
  exact_sums::for_each_run(sequences, sequence_coefficients, mark_present(spec, grad), token, flush);
  return true;
}

}  // namespace accumcheck::models::linear_model
