#include "cuda/float_linear.h"

#include <Eigen/Core>

#include <stdexcept>
#include <string>

#include "cuda/exact_values.h"
#include "models/float_bound.h"
#include "models/model.h"
#include "models/scalar.h"

namespace accumcheck::cuda {

namespace {

using models::Rational;

// The batch's values in T, each Rational by `convert`, in float_linear_batch.h's layout.
template <class T>
struct Values {
  std::vector<T> weights, biases, features, targets;
};

template <class T, class Convert>
Values<T> values_of(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                    std::span<const models::Sequence<Rational>> sequences, Convert convert) {
  Values<T> v;
  for (int e = 0; e < spec.expert_count; ++e) {
    const auto& W = params.tensors[static_cast<std::size_t>(2 * e)];
    const auto& b = params.tensors[static_cast<std::size_t>(2 * e + 1)];
    for (int o = 0; o < spec.output_size; ++o)
      for (int k = 0; k < spec.input_size; ++k) v.weights.push_back(convert(W(o, k)));
    for (int o = 0; o < spec.output_size; ++o) v.biases.push_back(convert(b(o, 0)));
  }
  for (const auto& seq : sequences)
    for (int t = 0; t < seq.token_count(); ++t) {
      for (int k = 0; k < spec.input_size; ++k) v.features.push_back(convert(seq.features(t, k)));
      for (int o = 0; o < spec.output_size; ++o) v.targets.push_back(convert(seq.targets(t, o)));
    }
  return v;
}

template <class T>
LinearView<T> view_of(const FloatLinearBatch& shape, const std::vector<T>& w, const std::vector<T>& b,
                      const std::vector<T>& x, const std::vector<T>& y) {
  return LinearView<T>{shape.input_size, shape.output_size, shape.expert_count, shape.token_count(), w.data(), b.data(),
                       x.data(), y.data(), shape.expert.data(), shape.group.data(), shape.mask.data(),
                       shape.sum_count()};
}

std::vector<FloatSumBound> bounds_of(const FloatLinearBatch& shape, const models::ModelSpec& spec,
                                     const models::Parameters<Rational>& params,
                                     std::span<const models::Sequence<Rational>> sequences, FloatStorage storage) {
  using Bound = models::FloatBound<models::FloatFormatKind::fp32>;
  // The stored values, exactly (a float is a dyadic rational), as FloatBound inputs: representable, so uncharged.
  const auto stored = [&](const Rational& q) { return Rational(mpq_class(static_cast<double>(to_float_storage(q, storage)))); };
  const auto b = values_of<Bound>(spec, params, sequences, [&](const Rational& q) { return Bound::from_rational(stored(q)); });
  const auto s = values_of<Rational>(spec, params, sequences, stored);
  const auto original = values_of<Rational>(spec, params, sequences, [](const Rational& q) { return q; });
  const LinearView<Bound> bound_view = view_of(shape, b.weights, b.biases, b.features, b.targets);
  const LinearView<Rational> stored_view = view_of(shape, s.weights, s.biases, s.features, s.targets);
  const LinearView<Rational> exact_view = view_of(shape, original.weights, original.biases, original.features, original.targets);
  std::vector<FloatSumBound> out(shape.sum_count());
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = detail::sum_bound([&] { return linear_float_sum(bound_view, i); },
                               [&] { return linear_float_sum(stored_view, i); },
                               [&] { return linear_float_sum(exact_view, i); });
  return out;
}

}  // namespace

float to_float_storage(const Rational& q, FloatStorage storage) {
  const float f = models::from_rational<float>(q);
  return storage == FloatStorage::bf16 ? static_cast<float>(Eigen::bfloat16(f)) : f;
}

FloatLinearBatch lay_out_float(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                               std::span<const models::Sequence<Rational>> sequences, std::span<const int> sequence_group,
                               int group_count, FloatStorage storage) {
  detail::validate_layout("lay_out_float", models::ModelKind::linear, spec, params, sequences, sequence_group, group_count);
  FloatLinearBatch b;
  b.input_size = spec.input_size;
  b.output_size = spec.output_size;
  b.expert_count = spec.expert_count;
  b.group_count = group_count;
  b.storage = storage;
  auto v = values_of<float>(spec, params, sequences, [&](const Rational& q) { return to_float_storage(q, storage); });
  b.weights = std::move(v.weights);
  b.biases = std::move(v.biases);
  b.features = std::move(v.features);
  b.targets = std::move(v.targets);
  for (std::size_t i = 0; i < sequences.size(); ++i)
    for (int t = 0; t < sequences[i].token_count(); ++t) {
      b.expert.push_back(spec.expert_count == 1 ? 0 : sequences[i].expert_index[static_cast<std::size_t>(t)]);
      b.group.push_back(sequence_group[i]);
      b.mask.push_back(sequences[i].loss_mask[static_cast<std::size_t>(t)] != 0 ? 1 : 0);
    }
  return b;
}

std::vector<float> host_float_sums(const FloatLinearBatch& b) {
  const LinearView<float> v = view_of(b, b.weights, b.biases, b.features, b.targets);
  std::vector<float> sums(b.sum_count());
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = linear_float_sum(v, i);
  return sums;
}

std::vector<FloatSumBound> float_sum_bounds(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                                            std::span<const models::Sequence<Rational>> sequences,
                                            std::span<const int> sequence_group, int group_count, FloatStorage storage) {
  // The routing and groups, as the kernel sees them (its float values are not used).
  const FloatLinearBatch shape = lay_out_float(spec, params, sequences, sequence_group, group_count, storage);
  return bounds_of(shape, spec, params, sequences, storage);
}

}  // namespace accumcheck::cuda
