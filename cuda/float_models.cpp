#include "cuda/float_models.h"

#include <stdexcept>
#include <string>

#include "cuda/exact_values.h"
#include "models/float_bound.h"
#include "models/model.h"

namespace accumcheck::cuda {

namespace {

using models::Rational;
using Bound = models::FloatBound<models::FloatFormatKind::fp32>;

// The batches' values in T, each Rational by `convert`, in float_models_batch.h's layouts.
template <class T>
struct MlpValues {
  std::vector<T> w1, b1, w2, b2, features, targets;
};
template <class T>
struct TiedValues {
  std::vector<T> embedding, bias, targets;
};

template <class T, class Convert>
void append(std::vector<T>& out, const models::Matrix<Rational>& m, Convert convert) {
  for (Eigen::Index row = 0; row < m.rows(); ++row)
    for (Eigen::Index col = 0; col < m.cols(); ++col) out.push_back(convert(m(row, col)));
}

template <class T, class Convert>
MlpValues<T> mlp_values(const models::Parameters<Rational>& params,
                        std::span<const models::Sequence<Rational>> sequences, Convert convert) {
  MlpValues<T> v;
  append(v.w1, params.tensors[0], convert);
  append(v.b1, params.tensors[1], convert);
  append(v.w2, params.tensors[2], convert);
  append(v.b2, params.tensors[3], convert);
  for (const auto& seq : sequences) {
    append(v.features, seq.features, convert);
    append(v.targets, seq.targets, convert);
  }
  return v;
}

template <class T, class Convert>
TiedValues<T> tied_values(const models::Parameters<Rational>& params,
                          std::span<const models::Sequence<Rational>> sequences, Convert convert) {
  TiedValues<T> v;
  append(v.embedding, params.tensors[0], convert);
  append(v.bias, params.tensors[1], convert);
  for (const auto& seq : sequences) append(v.targets, seq.targets, convert);
  return v;
}

template <class T>
MlpFloatView<T> view_of(const FloatMlpBatch& shape, const MlpValues<T>& v) {
  return MlpFloatView<T>{shape.input_size, shape.hidden_size, shape.output_size, shape.token_count(), v.w1.data(),
                         v.b1.data(), v.w2.data(), v.b2.data(), v.features.data(), v.targets.data(),
                         shape.group.data(), shape.mask.data(), shape.sum_count()};
}
template <class T>
TiedFloatView<T> view_of(const FloatTiedBatch& shape, const TiedValues<T>& v) {
  return TiedFloatView<T>{shape.vocab_size, shape.embed_size, shape.token_count(), v.embedding.data(), v.bias.data(),
                          v.targets.data(), shape.token_id.data(), shape.group.data(), shape.mask.data(),
                          shape.sum_count()};
}

template <class T>
T sum_of(const MlpFloatView<T>& v, std::size_t i) { return mlp_float_sum(v, i); }
template <class T>
T sum_of(const TiedFloatView<T>& v, std::size_t i) { return tied_float_sum(v, i); }

// Every sum's bound: the kernels' function over the stored values in FloatBound (and in Rational, where FloatBound
// finds the ReLU's decision ambiguous), against the exact sum over the unrounded values.
template <class Batch, class ValuesOf>
std::vector<FloatSumBound> bounds_of(const Batch& shape, FloatStorage storage, ValuesOf values_of) {
  const auto stored = [&](const Rational& q) {
    return Rational(mpq_class(static_cast<double>(to_float_storage(q, storage))));
  };
  const auto bounded_values = values_of.template operator()<Bound>([&](const Rational& q) { return Bound::from_rational(stored(q)); });
  const auto stored_values = values_of.template operator()<Rational>(stored);
  const auto unrounded_values = values_of.template operator()<Rational>([](const Rational& q) { return q; });
  const auto bounded = view_of(shape, bounded_values);
  const auto stored_view = view_of(shape, stored_values);
  const auto unrounded = view_of(shape, unrounded_values);
  std::vector<FloatSumBound> out(shape.sum_count());
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = detail::sum_bound([&] { return sum_of(bounded, i); }, [&] { return sum_of(stored_view, i); },
                               [&] { return sum_of(unrounded, i); });
  return out;
}

template <class Batch>
std::vector<float> host_sums_of(const Batch& b, const auto& values) {
  const auto v = view_of(b, values);
  std::vector<float> sums(b.sum_count());
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = sum_of(v, i);
  return sums;
}

// Per token, for every layout: its group and whether it is supervised.
template <class Batch>
void append_tokens(Batch& b, std::span<const models::Sequence<Rational>> sequences, std::span<const int> group) {
  for (std::size_t i = 0; i < sequences.size(); ++i)
    for (int t = 0; t < sequences[i].token_count(); ++t) {
      b.group.push_back(group[i]);
      b.mask.push_back(sequences[i].loss_mask[static_cast<std::size_t>(t)] != 0 ? 1 : 0);
    }
}

}  // namespace

FloatMlpBatch lay_out_float_mlp(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                                std::span<const models::Sequence<Rational>> sequences,
                                std::span<const int> sequence_group, int group_count, FloatStorage storage) {
  detail::validate_layout("lay_out_float_mlp", models::ModelKind::mlp, spec, params, sequences, sequence_group,
                          group_count);
  if (spec.hidden_size > kMlpWidthMax || spec.output_size > kMlpWidthMax)
    throw std::invalid_argument("lay_out_float_mlp: hidden_size " + std::to_string(spec.hidden_size) +
                                " or output_size " + std::to_string(spec.output_size) +
                                " is above the float kernel's 64");
  FloatMlpBatch b;
  b.input_size = spec.input_size;
  b.hidden_size = spec.hidden_size;
  b.output_size = spec.output_size;
  b.group_count = group_count;
  b.storage = storage;
  auto v = mlp_values<float>(params, sequences, [&](const Rational& q) { return to_float_storage(q, storage); });
  b.w1 = std::move(v.w1);
  b.b1 = std::move(v.b1);
  b.w2 = std::move(v.w2);
  b.b2 = std::move(v.b2);
  b.features = std::move(v.features);
  b.targets = std::move(v.targets);
  append_tokens(b, sequences, sequence_group);
  return b;
}

FloatTiedBatch lay_out_float_tied(const models::ModelSpec& spec, const models::Parameters<Rational>& params,
                                  std::span<const models::Sequence<Rational>> sequences,
                                  std::span<const int> sequence_group, int group_count, FloatStorage storage) {
  detail::validate_layout("lay_out_float_tied", models::ModelKind::tied_embedding, spec, params, sequences,
                          sequence_group, group_count);
  if (spec.vocab_size > kTiedVocabMax)
    throw std::invalid_argument("lay_out_float_tied: vocab_size " + std::to_string(spec.vocab_size) +
                                " is above the float kernel's 256");
  FloatTiedBatch b;
  b.vocab_size = spec.vocab_size;
  b.embed_size = spec.embed_size;
  b.group_count = group_count;
  b.storage = storage;
  auto v = tied_values<float>(params, sequences, [&](const Rational& q) { return to_float_storage(q, storage); });
  b.embedding = std::move(v.embedding);
  b.bias = std::move(v.bias);
  b.targets = std::move(v.targets);
  for (const auto& seq : sequences)
    for (int t = 0; t < seq.token_count(); ++t) b.token_id.push_back(seq.token_ids[static_cast<std::size_t>(t)]);
  append_tokens(b, sequences, sequence_group);
  return b;
}

std::vector<float> host_float_mlp_sums(const FloatMlpBatch& b) {
  return host_sums_of(b, MlpValues<float>{b.w1, b.b1, b.w2, b.b2, b.features, b.targets});
}

std::vector<float> host_float_tied_sums(const FloatTiedBatch& b) {
  return host_sums_of(b, TiedValues<float>{b.embedding, b.bias, b.targets});
}

std::vector<FloatSumBound> float_mlp_sum_bounds(const models::ModelSpec& spec,
                                                const models::Parameters<Rational>& params,
                                                std::span<const models::Sequence<Rational>> sequences,
                                                std::span<const int> sequence_group, int group_count,
                                                FloatStorage storage) {
  // The shape, groups and mask as the kernel sees them (its float values are not used).
  const FloatMlpBatch shape = lay_out_float_mlp(spec, params, sequences, sequence_group, group_count, storage);
  return bounds_of(shape, storage, [&]<class T>(auto convert) { return mlp_values<T>(params, sequences, convert); });
}

std::vector<FloatSumBound> float_tied_sum_bounds(const models::ModelSpec& spec,
                                                 const models::Parameters<Rational>& params,
                                                 std::span<const models::Sequence<Rational>> sequences,
                                                 std::span<const int> sequence_group, int group_count,
                                                 FloatStorage storage) {
  const FloatTiedBatch shape = lay_out_float_tied(spec, params, sequences, sequence_group, group_count, storage);
  return bounds_of(shape, storage, [&]<class T>(auto convert) { return tied_values<T>(params, sequences, convert); });
}

}  // namespace accumcheck::cuda
