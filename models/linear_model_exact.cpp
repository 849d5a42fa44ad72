// The linear model's gradient in exact integers; the method and its bounds are in linear_model_exact.h.
#include "models/linear_model_exact.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <vector>

#include "models/fast_rational.h"

namespace accumcheck::models::linear_model {

namespace {

using models::detail::Int128;

// What pass 1 learns about the values of one kind (parameters, features or targets): the largest of
// bit_length(|n|) - e over its values n / 2^e, which is the bit length of the scaled value once K is known.
struct Extent {
  int most = INT_MIN / 2;  // nothing read yet
  // False when v is not an inline dyadic.
  bool add(const FastRational& v, int& exponent_max) {
    const auto parts = v.inline_parts();
    if (!parts || (parts->second & (parts->second - 1)) != 0) return false;  // not a power of two
    const int e = std::countr_zero(static_cast<std::uint64_t>(parts->second));
    const int bits = static_cast<int>(std::bit_width(parts->first < 0 ? 0 - static_cast<std::uint64_t>(parts->first)
                                                                       : static_cast<std::uint64_t>(parts->first)));
    most = std::max(most, bits - e);
    exponent_max = std::max(exponent_max, e);
    return true;
  }
  // The bit length of the largest scaled value, 0 when there are none.
  int scaled_bits(int K) const { return std::max(0, most + K); }
};

// v 2^K as an integer; pass 1 has checked that v is an inline dyadic with exponent <= K and that it fits.
std::int64_t scaled(const FastRational& v, int K) {
  const auto parts = *v.inline_parts();
  const int e = std::countr_zero(static_cast<std::uint64_t>(parts.second));
  return parts.first * (std::int64_t{1} << (K - e));
}

int expert_of(const ModelSpec& spec, const Sequence<FastRational>& seq, int t) {
  return spec.expert_count == 1 ? 0 : seq.expert_index[static_cast<std::size_t>(t)];
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
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<FastRational>& seq = sequences[i];
    bool any = false;
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      any = true;
      ++supervised;
      for (int k = 0; k < in; ++k)
        if (!x_extent.add(seq.features(t, k), K)) return false;
      for (int o = 0; o < out; ++o)
        if (!y_extent.add(seq.targets(t, o), K)) return false;
    }
    // A promoted coefficient could take the generic loop's products past the exact size limit where these
    // would not: such a call stays on the generic loop, so that both throw alike.
    if (any && !sequence_coefficients[i].is_inline()) return false;
  }
  const int bp = p_extent.scaled_bits(K), bx = x_extent.scaled_bits(K), by = y_extent.scaled_bits(K);
  if (bp > 62 || bx > 62 || by > 62) return false;
  const int m = std::max({bp + bx, bp + K, by + K});
  const auto terms = static_cast<int>(std::bit_width(supervised * static_cast<std::uint64_t>(in + 2)));
  if (terms + m + bx > 126) return false;

  // Pass 2. Per expert, `stride` entries: row o holds W(o, 0..in-1) then b(o), for the scaled parameters and
  // for the sums alike. Scratch is kept per thread, so that a trial allocates nothing here after its first call.
  const auto row = static_cast<std::size_t>(in) + 1, stride = row * static_cast<std::size_t>(out);
  thread_local std::vector<std::int64_t> weights, x;
  thread_local std::vector<Int128> sums;
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
  const Int128 two_to_k = Int128{1} << K;
  // dW += c * sum / 2^(3K) and db += c * sum / 2^(2K) for every expert the run of sequences reached.
  const auto flush = [&](const FastRational& c) {
    for (std::size_t e = 0; e < experts; ++e) {
      if (!touched[e]) continue;
      touched[e] = 0;
      Matrix<FastRational>& dW = grad.tensors[2 * e];
      Matrix<FastRational>& db = grad.tensors[2 * e + 1];
      for (int o = 0; o < out; ++o) {
        Int128* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
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
  const FastRational* coefficient = nullptr;  // of the run of sequences summed so far
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<FastRational>& seq = sequences[i];
    if (coefficient && !(*coefficient == sequence_coefficients[i])) flush(*coefficient);
    coefficient = &sequence_coefficients[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      const auto e = static_cast<std::size_t>(expert_of(spec, seq, t));
      // The token went through expert e's forward pass, masked or not: autograd gives e a gradient.
      grad.present[2 * e] = true;
      grad.present[2 * e + 1] = true;
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      touched[e] = 1;
      for (int k = 0; k < in; ++k) x[static_cast<std::size_t>(k)] = scaled(seq.features(t, k), K);
      for (int o = 0; o < out; ++o) {
        const std::int64_t* w = &weights[e * stride + static_cast<std::size_t>(o) * row];
        Int128 r = (Int128{w[in]} - scaled(seq.targets(t, o), K)) * two_to_k;  // (b - y) 2^(2K)
        for (int k = 0; k < in; ++k) r += Int128{w[k]} * x[static_cast<std::size_t>(k)];
        Int128* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
        for (int k = 0; k < in; ++k) s[k] += r * x[static_cast<std::size_t>(k)];
        s[in] += r;
      }
    }
  }
  if (coefficient) flush(*coefficient);
  return true;
}

namespace {

// The most limbs a parameter's numerator or denominator may have on the GMP path: with an inline coefficient,
// neither the generic loop's products nor these sums then come near the exact size limit (kExactBitsMax), so
// both paths give a value, the same one, and neither throws.
constexpr std::size_t kParameterLimbsMax = 1024 / GMP_NUMB_BITS;

// x * v for a signed int64 v, added to (or subtracted from) acc, in GMP without a temporary.
void add_product(mpz_ptr acc, mpz_srcptr x, std::int64_t v) {
  if (v >= 0) mpz_addmul_ui(acc, x, static_cast<unsigned long>(v));
  else mpz_submul_ui(acc, x, 0UL - static_cast<unsigned long>(v));
}

}  // namespace

bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == sequence_coefficients.size());
  const int in = spec.input_size, out = spec.output_size;
  const auto experts = static_cast<std::size_t>(spec.expert_count);
  ACCUMCHECK_ASSERT(params.size() == 2 * experts && grad.size() == 2 * experts);

  // The data: inline dyadics over one exponent K, scaled into int64 (as on the __int128 path).
  int K = 0;
  Extent x_extent, y_extent;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<FastRational>& seq = sequences[i];
    bool any = false;
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      any = true;
      for (int k = 0; k < in; ++k)
        if (!x_extent.add(seq.features(t, k), K)) return false;
      for (int o = 0; o < out; ++o)
        if (!y_extent.add(seq.targets(t, o), K)) return false;
    }
    if (any && !sequence_coefficients[i].is_inline()) return false;
  }
  if (x_extent.scaled_bits(K) > 62 || y_extent.scaled_bits(K) > 62) return false;

  // The parameters: any rationals of bounded size, over their least common denominator D.
  thread_local mpz_class D, quotient, r, yD;
  D = 1;
  for (const auto& tensor : params.tensors)
    for (Eigen::Index i = 0; i < tensor.size(); ++i) {
      const FastRational& v = tensor(i);
      if (const auto parts = v.inline_parts()) {
        const auto d = static_cast<unsigned long>(parts->second);
        if (d != 1 && !mpz_divisible_ui_p(D.get_mpz_t(), d)) mpz_lcm_ui(D.get_mpz_t(), D.get_mpz_t(), d);
      } else {
        const mpq_class& q = *v.promoted_value();
        if (mpz_size(q.get_num_mpz_t()) > kParameterLimbsMax || mpz_size(q.get_den_mpz_t()) > kParameterLimbsMax) return false;
        if (!mpz_divisible_p(D.get_mpz_t(), q.get_den_mpz_t())) mpz_lcm(D.get_mpz_t(), D.get_mpz_t(), q.get_den_mpz_t());
      }
    }
  if (mpz_size(D.get_mpz_t()) > kParameterLimbsMax) return false;

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
  const auto scale = [&](const FastRational& v, mpz_class& into) {
    if (const auto parts = v.inline_parts()) {
      mpz_divexact_ui(quotient.get_mpz_t(), D.get_mpz_t(), static_cast<unsigned long>(parts->second));
      mpz_mul_si(into.get_mpz_t(), quotient.get_mpz_t(), parts->first);
    } else {
      const mpq_class& q = *v.promoted_value();
      mpz_divexact(quotient.get_mpz_t(), D.get_mpz_t(), q.get_den_mpz_t());
      mpz_mul(into.get_mpz_t(), quotient.get_mpz_t(), q.get_num_mpz_t());
    }
  };
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
          mpq_class q;
          mpz_swap(q.get_num_mpz_t(), s[k].get_mpz_t());  // leaves s[k] as q's old numerator, 0
          mpz_mul_2exp(q.get_den_mpz_t(), D.get_mpz_t(), static_cast<mp_bitcnt_t>(k < in ? 2 * K : K));
          mpq_canonicalize(q.get_mpq_t());
          const FastRational term = c * FastRational::from_canonical_mpq(std::move(q));
          if (k < in) dW(o, k) += term;
          else db(o, 0) += term;
        }
      }
    }
  };
  const FastRational* coefficient = nullptr;  // of the run of sequences summed so far
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<FastRational>& seq = sequences[i];
    if (coefficient && !(*coefficient == sequence_coefficients[i])) flush(*coefficient);
    coefficient = &sequence_coefficients[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      const auto e = static_cast<std::size_t>(expert_of(spec, seq, t));
      grad.present[2 * e] = true;
      grad.present[2 * e + 1] = true;
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      touched[e] = 1;
      for (int k = 0; k < in; ++k) x[static_cast<std::size_t>(k)] = scaled(seq.features(t, k), K);
      for (int o = 0; o < out; ++o) {
        const mpz_class* w = &weights[e * stride + static_cast<std::size_t>(o) * row];
        // r D 2^K = b D 2^K - y 2^K D + sum_k W D x 2^K
        mpz_mul_2exp(r.get_mpz_t(), w[in].get_mpz_t(), static_cast<mp_bitcnt_t>(K));
        mpz_mul_si(yD.get_mpz_t(), D.get_mpz_t(), scaled(seq.targets(t, o), K));
        mpz_sub(r.get_mpz_t(), r.get_mpz_t(), yD.get_mpz_t());
        for (int k = 0; k < in; ++k) add_product(r.get_mpz_t(), w[k].get_mpz_t(), x[static_cast<std::size_t>(k)]);
        mpz_class* s = &sums[e * stride + static_cast<std::size_t>(o) * row];
        for (int k = 0; k < in; ++k) add_product(s[k].get_mpz_t(), r.get_mpz_t(), x[static_cast<std::size_t>(k)]);
        mpz_add(s[in].get_mpz_t(), s[in].get_mpz_t(), r.get_mpz_t());
      }
    }
  }
  if (coefficient) flush(*coefficient);
  return true;
}

}  // namespace accumcheck::models::linear_model
