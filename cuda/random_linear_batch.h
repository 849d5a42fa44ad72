// Random micro-batches of the linear model in models/ values, for cuda/'s checks and its benchmark: the one generator
// they share, drawn only from the generator it is given.
#pragma once

#include <random>
#include <vector>

#include "models/model_spec.h"
#include "models/rational.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

// A random micro-batch of `spec`'s model (linear, MLP or tied embedding) for the checks and the benchmark: its sizes,
// `sequences` sequences of 0 to `max_tokens` tokens (about one in six unsupervised), dyadic values with up to 12
// fraction bits in [-4, 4), random experts (linear) or token ids (tied embedding). Drawn only from `rng`.
struct RandomBatch {
  models::ModelSpec spec;
  models::Parameters<models::Rational> params;
  std::vector<models::Sequence<models::Rational>> sequences;
};
RandomBatch random_batch(std::mt19937_64& rng, const models::ModelSpec& spec, int sequences, int max_tokens);

// Every value of `r` (parameters, features, targets) truncated to an integer in (-4, 4): sums that fp32 holds
// exactly, and gradients whose denominators stay small enough for stepped parameters to fit the next layout.
void truncate_to_integers(RandomBatch& r);

// The MLP's and the tied embedding's specs of these sizes, the rest default.
models::ModelSpec mlp_spec(int inputs, int hidden, int outputs);
models::ModelSpec tied_spec(int vocab, int embed);
// Group i for sequence i: the layouts' groups when every sequence has its own coefficient.
std::vector<int> one_group_per_sequence(std::size_t sequences);

// Random groups for a batch's sequences: 1 to 3 groups, each sequence in one drawn uniformly, with a coefficient
// each of -9/1 to 9/7 (token counts need not be dyadic). Drawn only from `rng`.
struct RandomGroups {
  int count = 1;
  std::vector<int> of_sequence;
  std::vector<models::Rational> coefficient;
};
RandomGroups random_groups(std::mt19937_64& rng, std::size_t sequences);

// The reference of the exact kernels' gradients: the model's own backward in models/ (linear_model, mlp_model or
// tied_embedding_model,
// without models::accumulate_gradient's rules for frozen parameters and empty batches, which the engines apply),
// with coefficient c[g] for the sequences of group groups[i].
models::Gradient<models::Rational> kernel_reference(const RandomBatch& r, const std::vector<int>& groups,
                                                    const std::vector<models::Rational>& c);

}  // namespace accumcheck::cuda
