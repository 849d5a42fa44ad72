#include "cuda/exact_tied.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/exact_values.h"
#include "models/model.h"

namespace accumcheck::cuda {

namespace {

using detail::kSumsMax;
constexpr auto& largest = detail::largest_magnitude;
using detail::raw_of;
using detail::Where;
using detail::widen;
using models::Rational;

}  // namespace

ExactTiedBatch lay_out_tied(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                            std::span<const models::Sequence<Rational>> sequences, std::span<const int> sequence_group,
                            int group_count) {
  detail::validate_layout("lay_out_tied", models::ModelKind::tied_embedding, spec, params, sequences, sequence_group,
                          group_count);
  if (spec.vocab_size > kTiedVocabMax)
    throw ExactRangeError(ExactLimit::width, "vocab_size " + std::to_string(spec.vocab_size) + " is above 256");
  std::size_t tokens = 0;
  for (const auto& seq : sequences) tokens += static_cast<std::size_t>(seq.token_count());
  if (tokens > static_cast<std::size_t>(kTokenCountMax))
    throw ExactRangeError(ExactLimit::token_count, std::to_string(tokens) + " tokens are above 2^16");

  const auto& E = params.tensors[0];
  const auto& bias = params.tensors[1];
  mpz_class common = 1;
  for (Eigen::Index i = 0; i < E.size(); ++i) widen(common, E(i), Where{"embedding element", static_cast<std::size_t>(i)});
  for (Eigen::Index i = 0; i < bias.size(); ++i) widen(common, bias(i), Where{"bias element", static_cast<std::size_t>(i)});
  for (std::size_t i = 0; i < sequences.size(); ++i)
    for (Eigen::Index j = 0; j < sequences[i].targets.size(); ++j)
      widen(common, sequences[i].targets(j), Where{"target of sequence", i});

  ExactTiedBatch b;
  b.vocab_size = spec.vocab_size;
  b.embed_size = spec.embed_size;
  b.group_count = group_count;
  b.denominator = common.get_si();
  for (Eigen::Index v = 0; v < E.rows(); ++v) {
    for (Eigen::Index d = 0; d < E.cols(); ++d)
      b.embedding.push_back(raw_of(E(v, d), common, Where{"embedding row", static_cast<std::size_t>(v)}));
    b.bias.push_back(raw_of(bias(v, 0), common, Where{"bias row", static_cast<std::size_t>(v)}));
  }
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      for (int v = 0; v < spec.vocab_size; ++v) b.targets.push_back(raw_of(seq.targets(t, v), common, Where{"target of sequence", i}));
      b.token_id.push_back(seq.token_ids[static_cast<std::size_t>(t)]);
      b.group.push_back(sequence_group[i]);
      b.mask.push_back(seq.loss_mask[static_cast<std::size_t>(t)] != 0 ? 1 : 0);
    }
  }

  // Every intermediate, bounded from the largest values (exact_tied_batch.h): |r| <= R with its partial sums, a
  // token's dE terms at most R e (V + 1), and each sum at most T times its largest term.
  const double D = static_cast<double>(b.denominator), V = spec.vocab_size, Dm = spec.embed_size;
  const double e = largest(b.embedding), T = static_cast<double>(std::max<std::size_t>(tokens, 1));
  const double R = D * (largest(b.bias) + largest(b.targets)) + Dm * e * e;
  const double bound = std::max({R, T * R, T * R * e * (V + 1)});
  if (!(bound < kSumsMax))
    throw ExactRangeError(ExactLimit::sums, "the tied embedding's sums could reach 2^" +
                                                std::to_string(static_cast<int>(std::log2(bound))) + ", above 2^120");
  b.sums_bound = bound;
  return b;
}

std::vector<Int128> host_tied_sums(const ExactTiedBatch& b) {
  const TiedView v{b.vocab_size,      b.embed_size,       b.token_count(),  b.denominator, b.embedding.data(),
                   b.bias.data(),     b.targets.data(),   b.token_id.data(), b.group.data(), b.mask.data(),
                   b.sum_count()};
  std::vector<Int128> sums(b.sum_count());
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = tied_entry_sum(v, i);
  return sums;
}

models::Gradient<Rational> to_tied_gradient(const models::ModelSpec& spec, const ExactTiedBatch& b,
                                            std::span<const Int128> sums, std::span<const Rational> group_coefficients) {
  detail::check_sums("to_tied_gradient", sums.size(), b.sum_count(), group_coefficients.size(), b.group_count);
  models::Gradient<Rational> grad = models::zero_gradient<Rational>(spec);
  const mpz_class d(static_cast<long>(b.denominator));
  const Rational embedding_scale(mpq_class(mpz_class(1), d * d * d)), bias_scale(mpq_class(mpz_class(1), d * d));
  const std::size_t per_group = b.group_entry_count();
  for (int g = 0; g < b.group_count; ++g) {
    const Rational& c = group_coefficients[static_cast<std::size_t>(g)];
    if (c.sign() == 0) continue;
    std::size_t index = static_cast<std::size_t>(g) * per_group;
    auto& dE = grad.tensors[0];
    auto& db = grad.tensors[1];
    for (int v = 0; v < b.vocab_size; ++v)
      for (int k = 0; k < b.embed_size; ++k, ++index)
        if (sums[index] != 0) dE(v, k) += c * to_rational(sums[index]) * embedding_scale;
    for (int v = 0; v < b.vocab_size; ++v, ++index)
      if (sums[index] != 0) db(v, 0) += c * to_rational(sums[index]) * bias_scale;
  }
  if (b.token_count() > 0) std::fill(grad.present.begin(), grad.present.end(), true);
  return grad;
}

}  // namespace accumcheck::cuda
