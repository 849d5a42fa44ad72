#include "cuda/exact_linear.h"

#include <gmpxx.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/exact_values.h"
#include "models/model.h"

namespace accumcheck::cuda {

const char* to_string(ExactLimit limit) {
  switch (limit) {
    case ExactLimit::denominator: return "the values' common denominator is above 2^30";
    case ExactLimit::magnitude: return "a value needs more than 31 bits over the common denominator";
    case ExactLimit::input_size: return "more than 4096 inputs";
    case ExactLimit::token_count: return "more than 2^16 tokens in one layout";
    case ExactLimit::width: return "more than 64 hidden units or outputs";
    case ExactLimit::sums: return "the sums could reach 2^120";
    case ExactLimit::multiplier: return "a coefficient over the window's common denominator needs more than 63 bits";
    case ExactLimit::step: return "an SGD step's integers need more than 255 bits";
  }
  return "out of range";
}

namespace detail {

using models::Rational;

void check_sums(const char* who, std::size_t sums, std::size_t expected, std::size_t coefficients, int groups) {
  if (sums != expected)
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(sums) + " sums for a batch of " +
                                std::to_string(expected));
  if (coefficients != static_cast<std::size_t>(groups))
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(coefficients) + " coefficients for " +
                                std::to_string(groups) + " groups");
}

double largest_magnitude(const std::vector<std::int64_t>& values) {
  double m = 0;
  for (auto v : values) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

void validate_layout(const char* who, models::ModelKind kind, const models::ModelSpec& spec,
                     const models::Parameters<Rational>& params, std::span<const models::Sequence<Rational>> sequences,
                     std::span<const int> sequence_group, int group_count) {
  if (spec.kind != kind)
    throw std::invalid_argument(std::string(who) + ": this kernel runs the " + std::string(models::to_string(kind)) +
                                " model, not " + std::string(models::to_string(spec.kind)));
  if (sequence_group.size() != sequences.size())
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(sequence_group.size()) + " groups for " +
                                std::to_string(sequences.size()) + " sequences");
  if (group_count < 1) throw std::invalid_argument(std::string(who) + ": group_count must be at least 1");
  for (int g : sequence_group)
    if (g < 0 || g >= group_count)
      throw std::invalid_argument(std::string(who) + ": group " + std::to_string(g) + " outside [0, " +
                                  std::to_string(group_count) + ")");
  models::validate_parameters(spec, params);
  for (const auto& seq : sequences) models::validate_sequence(spec, seq);
}

void widen(mpz_class& common, const Rational& v, const Where& where) {
  std::int64_t num = 0, small_den = 0;
  if (common.fits_slong_p() && v.fits_int64(num, small_den) && common.get_si() % small_den == 0) return;  // no GMP
  const mpz_class den = v.denominator();
  if (mpz_divisible_p(common.get_mpz_t(), den.get_mpz_t())) return;
  mpz_lcm(common.get_mpz_t(), common.get_mpz_t(), den.get_mpz_t());
  if (common > kDenominatorMax)
    throw ExactRangeError(ExactLimit::denominator, where.str() + " = " + v.to_string() + " takes the common denominator to " + common.get_str() +
                          ", above the exact kernels' 2^30");
}

std::int64_t raw_of(const Rational& v, const mpz_class& common, const Where& where) {
  // Without GMP when the value fits int64 words: common <= 2^30 divides by den, and num * (common / den) has the
  // raw's magnitude, checked against 2^31 before the product can leave int64 (|num| < 2^31 and the factor <= 2^30).
  std::int64_t num = 0, den = 0;
  if (v.fits_int64(num, den)) {
    const std::int64_t factor = common.get_si() / den;
    const std::int64_t limit = std::int64_t{1} << kRawBits;
    if (num > -limit && num < limit && factor < limit) {
      const std::int64_t raw = num * factor;
      if (raw > -limit && raw < limit) return raw;
    }
  }
  mpz_class raw = v.numerator() * (common / v.denominator());
  const mpz_class magnitude = abs(raw);
  if (magnitude != 0 && mpz_sizeinbase(magnitude.get_mpz_t(), 2) > static_cast<std::size_t>(kRawBits))
    throw ExactRangeError(ExactLimit::magnitude, where.str() + " = " + v.to_string() + " needs " +
                          std::to_string(mpz_sizeinbase(magnitude.get_mpz_t(), 2)) + " bits over the common denominator " +
                          common.get_str() + "; the exact kernels hold " + std::to_string(kRawBits));
  return raw.get_si();
}

}  // namespace detail

namespace {
using models::Rational;
using detail::raw_of;
using detail::Where;
using detail::widen;
}  // namespace

ExactLinearBatch lay_out(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                         std::span<const models::Sequence<Rational>> sequences, std::span<const int> sequence_group,
                         int group_count) {
  detail::validate_layout("lay_out", models::ModelKind::linear, spec, params, sequences, sequence_group, group_count);
  const int in = spec.input_size, out = spec.output_size, experts = spec.expert_count;
  if (in > kInputSizeMax)
    throw ExactRangeError(ExactLimit::input_size, "input_size " + std::to_string(in) + " is above the exact kernels' " +
                          std::to_string(kInputSizeMax));
  std::size_t tokens = 0;
  for (const auto& seq : sequences) tokens += static_cast<std::size_t>(seq.token_count());
  if (tokens > static_cast<std::size_t>(kTokenCountMax))
    throw ExactRangeError(ExactLimit::token_count, std::to_string(tokens) + " tokens are above the exact kernels' " +
                          std::to_string(kTokenCountMax));

  // The common denominator: the least common multiple of every value's.
  mpz_class common = 1;
  for (int e = 0; e < experts; ++e) {
    const auto& W = params.tensors[static_cast<std::size_t>(2 * e)];
    const auto& b = params.tensors[static_cast<std::size_t>(2 * e + 1)];
    for (int o = 0; o < out; ++o) {
      widen(common, b(o, 0), Where{"bias of expert", static_cast<std::size_t>(e)});
      for (int k = 0; k < in; ++k) widen(common, W(o, k), Where{"weight of expert", static_cast<std::size_t>(e)});
    }
  }
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      for (int k = 0; k < in; ++k) widen(common, seq.features(t, k), Where{"feature of sequence", i});
      for (int o = 0; o < out; ++o) widen(common, seq.targets(t, o), Where{"target of sequence", i});
    }
  }

  ExactLinearBatch batch;
  batch.input_size = in;
  batch.output_size = out;
  batch.expert_count = experts;
  batch.group_count = group_count;
  batch.denominator = common.get_si();
  for (int e = 0; e < experts; ++e) {
    const auto& W = params.tensors[static_cast<std::size_t>(2 * e)];
    const auto& b = params.tensors[static_cast<std::size_t>(2 * e + 1)];
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) batch.weights.push_back(raw_of(W(o, k), common, Where{"weight of expert", static_cast<std::size_t>(e)}));
    for (int o = 0; o < out; ++o) batch.biases.push_back(raw_of(b(o, 0), common, Where{"bias of expert", static_cast<std::size_t>(e)}));
  }
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const auto& seq = sequences[i];
    for (int t = 0; t < seq.token_count(); ++t) {
      for (int k = 0; k < in; ++k) batch.features.push_back(raw_of(seq.features(t, k), common, Where{"feature of sequence", i}));
      for (int o = 0; o < out; ++o) batch.targets.push_back(raw_of(seq.targets(t, o), common, Where{"target of sequence", i}));
      batch.expert.push_back(experts == 1 ? 0 : seq.expert_index[static_cast<std::size_t>(t)]);
      batch.group.push_back(sequence_group[i]);
      batch.mask.push_back(seq.loss_mask[static_cast<std::size_t>(t)] != 0 ? 1 : 0);
    }
  }
  return batch;
}

std::vector<Int128> host_sums(const ExactLinearBatch& b) {
  const int in = b.input_size, out = b.output_size;
  const std::int64_t one = b.denominator;
  std::vector<Int128> sums(b.sum_count(), 0);
  std::vector<Int128> r(static_cast<std::size_t>(out));
  for (int t = 0; t < b.token_count(); ++t) {
    const auto tu = static_cast<std::size_t>(t);
    if (!b.mask[tu]) continue;
    const int e = b.expert[tu], g = b.group[tu];
    const std::int64_t* x = b.features.data() + tu * static_cast<std::size_t>(in);
    for (int o = 0; o < out; ++o) {
      const std::size_t eo = static_cast<std::size_t>(e) * static_cast<std::size_t>(out) + static_cast<std::size_t>(o);
      Int128 acc = static_cast<Int128>(b.biases[eo]) * one - static_cast<Int128>(b.targets[tu * static_cast<std::size_t>(out) + static_cast<std::size_t>(o)]) * one;
      const std::int64_t* w = b.weights.data() + eo * static_cast<std::size_t>(in);
      for (int i = 0; i < in; ++i) acc += static_cast<Int128>(w[i]) * x[i];
      r[static_cast<std::size_t>(o)] = acc;
    }
    for (int o = 0; o < out; ++o) {
      const std::size_t base =
          ((static_cast<std::size_t>(g) * static_cast<std::size_t>(b.expert_count) + static_cast<std::size_t>(e)) *
               static_cast<std::size_t>(out) + static_cast<std::size_t>(o)) * static_cast<std::size_t>(in + 1);
      const Int128 ro = r[static_cast<std::size_t>(o)];
      for (int k = 0; k < in; ++k) sums[base + static_cast<std::size_t>(k)] += ro * x[k];
      sums[base + static_cast<std::size_t>(in)] += ro * one;
    }
  }
  return sums;
}

Rational to_rational(Int128 value) {
  const bool negative = value < 0;
  // The magnitude as unsigned: -(most negative) is representable in the unsigned type.
  const UInt128 magnitude = negative ? -static_cast<UInt128>(value) : static_cast<UInt128>(value);
  const std::uint64_t limbs[2] = {static_cast<std::uint64_t>(magnitude), static_cast<std::uint64_t>(magnitude >> 64)};
  mpz_class z;
  mpz_import(z.get_mpz_t(), 2, -1, sizeof(std::uint64_t), 0, 0, limbs);
  if (negative) z = -z;
  return Rational(z);
}

models::Gradient<Rational> to_gradient(const models::ModelSpec& spec, const ExactLinearBatch& b,
                                       std::span<const Int128> sums, std::span<const Rational> group_coefficients) {
  detail::check_sums("to_gradient", sums.size(), b.sum_count(), group_coefficients.size(), b.group_count);
  models::Gradient<Rational> grad = models::zero_gradient<Rational>(spec);
  const mpz_class d(static_cast<long>(b.denominator));
  const Rational scale(mpq_class(mpz_class(1), d * d * d));
  const int in = b.input_size, out = b.output_size;
  for (int g = 0; g < b.group_count; ++g)
    for (int e = 0; e < b.expert_count; ++e)
      for (int o = 0; o < out; ++o) {
        const std::size_t base =
            ((static_cast<std::size_t>(g) * static_cast<std::size_t>(b.expert_count) + static_cast<std::size_t>(e)) *
                 static_cast<std::size_t>(out) + static_cast<std::size_t>(o)) * static_cast<std::size_t>(in + 1);
        const Rational& c = group_coefficients[static_cast<std::size_t>(g)];
        auto& dW = grad.tensors[static_cast<std::size_t>(2 * e)];
        auto& db = grad.tensors[static_cast<std::size_t>(2 * e + 1)];
        for (int k = 0; k < in; ++k) {
          const Int128 s = sums[base + static_cast<std::size_t>(k)];
          if (s != 0) dW(o, k) += c * to_rational(s) * scale;
        }
        const Int128 s = sums[base + static_cast<std::size_t>(in)];
        if (s != 0) db(o, 0) += c * to_rational(s) * scale;
      }
  for (int e : b.expert) {
    grad.present[static_cast<std::size_t>(2 * e)] = true;
    grad.present[static_cast<std::size_t>(2 * e + 1)] = true;
  }
  return grad;
}

}  // namespace accumcheck::cuda
