// Helpers shared by the models' integer gradient paths (linear_model_exact.cpp, mlp_model_exact.cpp,
// tied_embedding_model_exact.cpp) and FastRational's sums (fast_rational.cpp): reading FastRational values as
// integers over a common denominator, and turning a sum back into a FastRational.
// Internal to models/: nothing outside those files includes it.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>

#include <gmpxx.h>

#include "models/fast_rational.h"
#include "models/tensor.h"

namespace accumcheck::models::exact_sums {

// The most limbs a parameter's numerator or denominator (and their common denominator) may have on a GMP path.
// With an inline coefficient, neither the generic loop's products nor a path's sums then come near the exact size
// limit (kExactBitsMax), so both give a value, the same one, and neither throws. The MLP's and the tied
// embedding's sums carry the cube of the common denominator, the linear model's its first power.
constexpr std::size_t kLinearParameterLimbsMax = 1024 / GMP_NUMB_BITS;
constexpr std::size_t kProductParameterLimbsMax = 512 / GMP_NUMB_BITS;

// What a scan learns about values of one kind (parameters, features or targets) that are all inline dyadics:
// the largest of bit_length(|n|) - e over its values n / 2^e, the bit length of the scaled value once K is known.
struct Extent {
  int most = INT_MIN / 2;  // nothing read yet
  // False when v is not an inline dyadic; else notes it, and raises exponent_max to its exponent.
  bool add(const FastRational& v, int& exponent_max) {
    const auto parts = v.inline_parts();
    if (!parts || (parts->second & (parts->second - 1)) != 0) return false;  // not a power of two
    const int e = __builtin_ctzll(static_cast<std::uint64_t>(parts->second));
    // |n| and its bit length without a branch on n's sign or on n == 0: both are random in the generator's data,
    // and the branches the compiler made mispredicted 42% and 36% of the time (cachegrind --branch-sim: 64 of a
    // trial's 1,155 mispredictions at the peer's sizes). detail::magnitude takes no branch; the bit length of 0 is
    // 0: clz of (m | 1) is 63 there, less the one for m == 0.
    const std::uint64_t magnitude = detail::magnitude(parts->first);
    const int bits = 64 - __builtin_clzll(magnitude | 1) - static_cast<int>(magnitude == 0);
    most = std::max(most, bits - e);
    exponent_max = std::max(exponent_max, e);
    return true;
  }
  // The bit length of the largest scaled value, 0 when there are none.
  int scaled_bits(int K) const { return std::max(0, most + K); }
};

// v 2^K as an integer, for an inline dyadic v with exponent <= K whose scaled value fits (Extent checked both).
inline std::int64_t scaled(const FastRational& v, int K) {
  const auto parts = *v.inline_parts();
  return parts.first * (std::int64_t{1} << (K - __builtin_ctzll(static_cast<std::uint64_t>(parts.second))));
}

// The data of a gradient call: every feature and target of a supervised token an inline dyadic (K is raised to
// their largest exponent; x and y note their sizes), and the coefficient of every sequence with one inline. A
// promoted coefficient could take the generic loop's products past the exact size limit where a path's would not:
// such a call stays on the generic loop, so that both throw alike. False where the data do not qualify.
inline bool scan_data(int feature_count, int target_count, std::span<const Sequence<FastRational>> sequences,
                      std::span<const FastRational> coefficients, int& K, Extent& x, Extent& y,
                      std::uint64_t& supervised) {
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<FastRational>& seq = sequences[i];
    bool any = false;
    for (int t = 0; t < seq.token_count(); ++t) {
      if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) continue;
      any = true;
      ++supervised;
      for (int k = 0; k < feature_count; ++k)
        if (!x.add(seq.features(t, k), K)) return false;
      for (int o = 0; o < target_count; ++o)
        if (!y.add(seq.targets(t, o), K)) return false;
    }
    if (any && !coefficients[i].is_inline()) return false;
  }
  return true;
}

// D = lcm(D, v's denominator); false where v's numerator or denominator, or D, takes more than limbs_max limbs.
inline bool include_denominator(const FastRational& v, std::size_t limbs_max, mpz_class& D) {
  if (const auto parts = v.inline_parts()) {
    const auto d = static_cast<unsigned long>(parts->second);
    if (d != 1 && !mpz_divisible_ui_p(D.get_mpz_t(), d)) mpz_lcm_ui(D.get_mpz_t(), D.get_mpz_t(), d);
  } else {
    const mpq_srcptr q = v.promoted_value();
    if (mpz_size(mpq_numref(q)) > limbs_max || mpz_size(mpq_denref(q)) > limbs_max) return false;
    if (!mpz_divisible_p(D.get_mpz_t(), mpq_denref(q))) mpz_lcm(D.get_mpz_t(), D.get_mpz_t(), mpq_denref(q));
  }
  return mpz_size(D.get_mpz_t()) <= limbs_max;
}

// D = the least common denominator of every parameter; false where a parameter (or D) takes more than
// limbs_max limbs.
inline bool common_denominator(const Parameters<FastRational>& params, std::size_t limbs_max, mpz_class& D) {
  D = 1;
  for (const auto& tensor : params.tensors)
    for (Eigen::Index i = 0; i < tensor.size(); ++i)
      if (!include_denominator(tensor(i), limbs_max, D)) return false;
  return true;
}

// into = v D, an integer since D is a multiple of v's denominator; `scratch` holds D / denominator.
inline void scale_to(const FastRational& v, const mpz_class& D, mpz_class& into, mpz_class& scratch) {
  if (const auto parts = v.inline_parts()) {
    mpz_divexact_ui(scratch.get_mpz_t(), D.get_mpz_t(), static_cast<unsigned long>(parts->second));
    mpz_mul_si(into.get_mpz_t(), scratch.get_mpz_t(), parts->first);
  } else {
    const mpq_srcptr q = v.promoted_value();
    mpz_divexact(scratch.get_mpz_t(), D.get_mpz_t(), mpq_denref(q));
    mpz_mul(into.get_mpz_t(), scratch.get_mpz_t(), mpq_numref(q));
  }
}

// acc += x v for a signed int64 v, in GMP without a temporary.
inline void add_product(mpz_ptr acc, mpz_srcptr x, std::int64_t v) {
  if (v >= 0) mpz_addmul_ui(acc, x, static_cast<unsigned long>(v));
  else mpz_submul_ui(acc, x, 0UL - static_cast<unsigned long>(v));
}

// A GMP path's inputs: the data scanned as scan_data does, every scaled feature and target within 62 bits, and D
// the parameters' least common denominator (common_denominator, at most limbs_max limbs). False where they do not
// qualify.
inline bool prepare(int feature_count, int target_count, const Parameters<FastRational>& params,
                    std::span<const Sequence<FastRational>> sequences, std::span<const FastRational> coefficients,
                    std::size_t limbs_max, int& K, mpz_class& D) {
  Extent x, y;
  std::uint64_t supervised = 0;
  if (!scan_data(feature_count, target_count, sequences, coefficients, K, x, y, supervised)) return false;
  if (x.scaled_bits(K) > 62 || y.scaled_bits(K) > 62) return false;
  return common_denominator(params, limbs_max, D);
}

// The sequences in runs of consecutive ones that share a coefficient, as every path sums them: present(seq, t)
// for every token (masked or not: it went through the forward pass), token(seq, t) for every supervised one, and
// flush(c) at the end of every run, with the run's coefficient.
template <class Present, class Token, class Flush>
void for_each_run(std::span<const Sequence<FastRational>> sequences, std::span<const FastRational> coefficients,
                  Present present, Token token, Flush flush) {
  const FastRational* coefficient = nullptr;  // of the run summed so far
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence<FastRational>& seq = sequences[i];
    if (coefficient && !(*coefficient == coefficients[i])) flush(*coefficient);
    coefficient = &coefficients[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      present(seq, t);
      if (seq.loss_mask[static_cast<std::size_t>(t)] != 0) token(seq, t);
    }
  }
  if (coefficient) flush(*coefficient);
}

// sum / (denominator 2^exponent) in lowest terms; `sum` is left zero, ready for the next run of sequences.
inline FastRational quotient(mpz_class& sum, const mpz_class& denominator, int exponent) {
  mpq_class q;
  mpz_swap(q.get_num_mpz_t(), sum.get_mpz_t());  // leaves sum as q's old numerator, 0
  mpz_mul_2exp(q.get_den_mpz_t(), denominator.get_mpz_t(), static_cast<mp_bitcnt_t>(exponent));
  mpq_canonicalize(q.get_mpq_t());
  return FastRational::from_canonical_mpq(std::move(q));
}

}  // namespace accumcheck::models::exact_sums
