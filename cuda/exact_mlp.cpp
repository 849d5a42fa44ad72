#include "cuda/exact_mlp.h"

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

// Appends tensor `t` of `params` to `out`, row by row (W [rows][cols], b [rows]).
void append_raw(std::vector<std::int64_t>& out, const models::Matrix<Rational>& t, const mpz_class& common, const char* what) {
  for (Eigen::Index row = 0; row < t.rows(); ++row)
    for (Eigen::Index col = 0; col < t.cols(); ++col)
      out.push_back(raw_of(t(row, col), common, Where{what, static_cast<std::size_t>(row)}));
}

}  // namespace

ExactMlpBatch lay_out_mlp(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                          std::span<const models::Sequence<Rational>> sequences, std::span<const int> sequence_group,
                          int group_count) {
  detail::validate_layout("lay_out_mlp", models::ModelKind::mlp, spec, params, sequences, sequence_group, group_count);
  if (spec.input_size > kInputSizeMax)
    throw ExactRangeError(ExactLimit::input_size, "input_size " + std::to_string(spec.input_size) + " is above 4096");
  if (spec.hidden_size > kMlpWidthMax || spec.output_size > kMlpWidthMax)
    throw ExactRangeError(ExactLimit::width, "hidden_size " + std::to_string(spec.hidden_size) + " or output_size " +
                                                 std::to_string(spec.output_size) + " is above 64");
  std::size_t tokens = 0;
  for (const auto& seq : sequences) tokens += static_cast<std::size_t>(seq.token_count());
  if (tokens > static_cast<std::size_t>(kTokenCountMax))
    throw ExactRangeError(ExactLimit::token_count, std::to_string(tokens) + " tokens are above 2^16");

  mpz_class common = 1;
  const char* names[] = {"W1 row", "b1 row", "W2 row", "b2 row"};
  for (std::size_t p = 0; p < 4; ++p)
    for (Eigen::Index i = 0; i < params.tensors[p].size(); ++i)
      widen(common, params.tensors[p](i), Where{names[p], static_cast<std::size_t>(i)});
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    for (Eigen::Index j = 0; j < sequences[i].features.size(); ++j)
      widen(common, sequences[i].features(j), Where{"feature of sequence", i});
    for (Eigen::Index j = 0; j < sequences[i].targets.size(); ++j)
      widen(common, sequences[i].targets(j), Where{"target of sequence", i});
  }

  ExactMlpBatch b;
  b.input_size = spec.input_size;
  b.hidden_size = spec.hidden_size;
  b.output_size = spec.output_size;
  b.group_count = group_count;
  b.denominator = common.get_si();
  append_raw(b.w1, params.tensors[0], common, names[0]);
  append_raw(b.b1, params.tensors[1], common, names[1]);
  append_raw(b.w2, params.tensors[2], common, names[2]);
  append_raw(b.b2, params.tensors[3], common, names[3]);
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      for (int k = 0; k < spec.input_size; ++k)
        b.features.push_back(raw_of(seq.features(t, k), common, Where{"feature of sequence", i}));
      for (int o = 0; o < spec.output_size; ++o)
        b.targets.push_back(raw_of(seq.targets(t, o), common, Where{"target of sequence", i}));
      b.group.push_back(sequence_group[i]);
      b.mask.push_back(seq.loss_mask[static_cast<std::size_t>(t)] != 0 ? 1 : 0);
    }
  }

  // Every intermediate, bounded from the largest values (exact_mlp_batch.h): |z|, |h| <= Z, |r| <= R, |dz| <= DZ,
  // and each sum at most T times its largest term (x >= D >= 1 covers db1's T DZ; db2's T R is its own).
  const double D = static_cast<double>(b.denominator), I = spec.input_size, H = spec.hidden_size, O = spec.output_size;
  const double x = std::max(largest(b.features), D), T = static_cast<double>(std::max<std::size_t>(tokens, 1));
  const double Z = D * largest(b.b1) + I * largest(b.w1) * x;
  const double R = D * D * (largest(b.b2) + largest(b.targets)) + H * largest(b.w2) * Z;
  const double DZ = O * largest(b.w2) * R;
  const double bound = std::max({Z, R, DZ, T * R, T * R * Z, T * DZ * x});
  if (!(bound < kSumsMax))
    throw ExactRangeError(ExactLimit::sums, "the MLP's sums could reach 2^" + std::to_string(static_cast<int>(std::log2(bound))) +
                                                ", above the exact kernel's 2^120");
  b.sums_bound = bound;
  return b;
}

std::vector<Int128> host_mlp_sums(const ExactMlpBatch& b) {
  const MlpView v{b.input_size, b.hidden_size, b.output_size, b.token_count(), b.denominator, b.w1.data(), b.b1.data(),
                  b.w2.data(), b.b2.data(), b.features.data(), b.targets.data(), b.group.data(), b.mask.data(),
                  b.sum_count()};
  const ExactMlpBatch& batch = b;
  std::vector<Int128> sums(batch.sum_count());
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = mlp_entry_sum(v, i);
  return sums;
}

models::Gradient<Rational> to_mlp_gradient(const models::ModelSpec& spec, const ExactMlpBatch& b,
                                           std::span<const Int128> sums, std::span<const Rational> group_coefficients) {
  detail::check_sums("to_mlp_gradient", sums.size(), b.sum_count(), group_coefficients.size(), b.group_count);
  models::Gradient<Rational> grad = models::zero_gradient<Rational>(spec);
  const mpz_class d(static_cast<long>(b.denominator));
  // The denominators of dW1, db1, dW2, db2: D^5, D^4, D^5, D^3.
  const mpz_class power[4] = {d * d * d * d * d, d * d * d * d, d * d * d * d * d, d * d * d};
  const std::size_t per_group = b.group_entry_count();
  for (int g = 0; g < b.group_count; ++g) {
    const Rational& c = group_coefficients[static_cast<std::size_t>(g)];
    if (c.sign() == 0) continue;
    std::size_t index = static_cast<std::size_t>(g) * per_group;
    for (std::size_t p = 0; p < 4; ++p) {
      auto& t = grad.tensors[p];
      const Rational scale = c * Rational(mpq_class(mpz_class(1), power[p]));
      for (Eigen::Index row = 0; row < t.rows(); ++row)
        for (Eigen::Index col = 0; col < t.cols(); ++col, ++index)
          if (sums[index] != 0) t(row, col) += to_rational(sums[index]) * scale;
    }
  }
  if (b.token_count() > 0) std::fill(grad.present.begin(), grad.present.end(), true);
  return grad;
}

}  // namespace accumcheck::cuda
