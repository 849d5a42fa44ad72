// Random micro-batches of the linear model in models/ values, for cuda/'s checks and its benchmark: the one generator
// they share, drawn only from the generator it is given.
#pragma once

#include <random>
#include <vector>

#include "models/model_spec.h"
#include "models/rational.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

// A random micro-batch of the linear model for the checks and the benchmark: `spec`'s sizes, `sequences`
// sequences of 0 to `max_tokens` tokens (about one in six unsupervised), dyadic values with up to 12 fraction bits
// in [-4, 4), random experts. Drawn only from `rng`.
struct RandomBatch {
  models::ModelSpec spec;
  models::Parameters<models::Rational> params;
  std::vector<models::Sequence<models::Rational>> sequences;
};
RandomBatch random_batch(std::mt19937_64& rng, const models::ModelSpec& spec, int sequences, int max_tokens);

}  // namespace accumcheck::cuda
