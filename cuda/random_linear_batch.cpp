#include "cuda/random_linear_batch.h"

#include "models/linear_model.h"
#include "models/mlp_model.h"
#include "models/model.h"

namespace accumcheck::cuda {

using models::Rational;

RandomBatch random_batch(std::mt19937_64& rng, const models::ModelSpec& spec, int sequences, int max_tokens) {
  RandomBatch r;
  r.spec = spec;
  std::uniform_int_distribution<int> bits(0, 12);
  const auto value = [&]() {
    const int f = bits(rng);
    // in [-4, 4): an integer numerator in [-4 2^f, 4 2^f) over 2^f
    std::uniform_int_distribution<long long> numerator(-(4LL << f), (4LL << f) - 1);
    return Rational(numerator(rng), 1LL << f);
  };
  for (const auto& [rows, cols] : models::parameter_shapes(spec)) {
    models::Matrix<Rational> m(rows, cols);
    for (int c = 0; c < cols; ++c)
      for (int row = 0; row < rows; ++row) m(row, c) = value();
    r.params.tensors.push_back(std::move(m));
  }
  std::uniform_int_distribution<int> token_count(0, max_tokens), expert(0, spec.expert_count - 1), die(0, 5);
  for (int i = 0; i < sequences; ++i) {
    models::Sequence<Rational> seq;
    const int T = token_count(rng);
    seq.features.resize(T, spec.input_size);
    seq.targets.resize(T, spec.output_size);
    for (int t = 0; t < T; ++t) {
      for (int k = 0; k < spec.input_size; ++k) seq.features(t, k) = value();
      for (int o = 0; o < spec.output_size; ++o) seq.targets(t, o) = value();
      if (spec.expert_count > 1) seq.expert_index.push_back(expert(rng));
      seq.loss_mask.push_back(die(rng) == 0 ? 0 : 1);
    }
    r.sequences.push_back(std::move(seq));
  }
  return r;
}

models::Gradient<Rational> kernel_reference(const RandomBatch& r, const std::vector<int>& groups,
                                            const std::vector<Rational>& c) {
  std::vector<Rational> per_sequence;
  for (int g : groups) per_sequence.push_back(c.at(static_cast<std::size_t>(g)));
  models::Gradient<Rational> grad = models::zero_gradient<Rational>(r.spec);
  if (r.spec.kind == models::ModelKind::mlp)
    models::mlp_model::accumulate_gradient<Rational>(r.spec, r.params, r.sequences, per_sequence, grad);
  else
    models::linear_model::accumulate_gradient<Rational>(r.spec, r.params, r.sequences, per_sequence, grad);
  return grad;
}

}  // namespace accumcheck::cuda
