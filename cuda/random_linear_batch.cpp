#include "cuda/random_linear_batch.h"

#include <algorithm>
#include <cmath>

#include "models/linear_model.h"
#include "models/mlp_model.h"
#include "models/tied_embedding_model.h"
#include "models/model.h"

namespace accumcheck::cuda {

using models::Rational;

models::ModelSpec mlp_spec(int inputs, int hidden, int outputs) {
  models::ModelSpec spec;
  spec.kind = models::ModelKind::mlp;
  spec.input_size = inputs;
  spec.hidden_size = hidden;
  spec.output_size = outputs;
  return spec;
}

models::ModelSpec tied_spec(int vocab, int embed) {
  models::ModelSpec spec;
  spec.kind = models::ModelKind::tied_embedding;
  spec.input_size = spec.output_size = 0;
  spec.vocab_size = vocab;
  spec.embed_size = embed;
  return spec;
}

std::vector<int> one_group_per_sequence(std::size_t sequences) {
  std::vector<int> group(sequences);
  for (std::size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);
  return group;
}

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
  const bool tied = spec.kind == models::ModelKind::tied_embedding;
  std::uniform_int_distribution<int> token_count(0, max_tokens), expert(0, std::max(spec.expert_count, 1) - 1), die(0, 5),
      token_id(0, std::max(spec.vocab_size, 1) - 1);
  const int features = models::feature_size(spec), targets = models::target_size(spec);
  for (int i = 0; i < sequences; ++i) {
    models::Sequence<Rational> seq;
    const int T = token_count(rng);
    seq.features.resize(T, features);
    seq.targets.resize(T, targets);
    for (int t = 0; t < T; ++t) {
      for (int k = 0; k < features; ++k) seq.features(t, k) = value();
      for (int o = 0; o < targets; ++o) seq.targets(t, o) = value();
      if (tied) seq.token_ids.push_back(token_id(rng));
      if (!tied && spec.expert_count > 1) seq.expert_index.push_back(expert(rng));
      seq.loss_mask.push_back(die(rng) == 0 ? 0 : 1);
    }
    r.sequences.push_back(std::move(seq));
  }
  return r;
}

RandomGroups random_groups(std::mt19937_64& rng, std::size_t sequences) {
  RandomGroups g;
  g.count = std::uniform_int_distribution<int>(1, 3)(rng);
  std::uniform_int_distribution<int> pick(0, g.count - 1);
  for (std::size_t i = 0; i < sequences; ++i) g.of_sequence.push_back(pick(rng));
  std::uniform_int_distribution<long long> num(-9, 9), den(1, 7);
  for (int k = 0; k < g.count; ++k) g.coefficient.push_back(Rational(num(rng), den(rng)));
  return g;
}

models::Gradient<Rational> kernel_reference(const RandomBatch& r, const std::vector<int>& groups,
                                            const std::vector<Rational>& c) {
  std::vector<Rational> per_sequence;
  for (int g : groups) per_sequence.push_back(c.at(static_cast<std::size_t>(g)));
  models::Gradient<Rational> grad = models::zero_gradient<Rational>(r.spec);
  if (r.spec.kind == models::ModelKind::mlp)
    models::mlp_model::accumulate_gradient<Rational>(r.spec, r.params, r.sequences, per_sequence, grad);
  else if (r.spec.kind == models::ModelKind::tied_embedding)
    models::tied_embedding_model::accumulate_gradient<Rational>(r.spec, r.params, r.sequences, per_sequence, grad);
  else
    models::linear_model::accumulate_gradient<Rational>(r.spec, r.params, r.sequences, per_sequence, grad);
  return grad;
}

void truncate_to_integers(RandomBatch& r) {
  const auto truncate = [](models::Matrix<models::Rational>& m) {
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = models::Rational(static_cast<long long>(std::trunc(m(i).to_double())));
  };
  for (auto& t : r.params.tensors) truncate(t);
  for (auto& seq : r.sequences) {
    truncate(seq.features);
    truncate(seq.targets);
  }
}

}  // namespace accumcheck::cuda
