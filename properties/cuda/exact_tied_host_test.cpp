// The exact tied-embedding kernel's host side on the CPU (cuda/exact_tied.h): its twin's sums turned into a gradient
// equal models/'s on random micro-batches, dyadic or not; a hand-computed answer with both uses of the embedding;
// the refusals.
#include <gtest/gtest.h>

#include <random>

#include "cuda/exact_tied.h"
#include "cuda/random_linear_batch.h"
#include "models/model.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

const auto& tied = tied_spec;

TEST(ExactTiedHost, host_sums_give_models_gradient_on_random_batches) {
  std::mt19937_64 rng(20261207);
  for (int trial = 0; trial < 300; ++trial) {
    std::uniform_int_distribution<int> vocab(2, 6), embed(1, 4), sequences(0, 5), thirds(0, 3);
    RandomBatch r = random_batch(rng, tied(vocab(rng), embed(rng)), sequences(rng), 6);
    if (thirds(rng) == 0)
      for (auto& t : r.params.tensors) t /= Rational(3);
    const RandomGroups groups = random_groups(rng, r.sequences.size());
    const int group_count = groups.count;
    const std::vector<int>& group = groups.of_sequence;
    const std::vector<Rational>& c = groups.coefficient;
    const ExactTiedBatch batch = lay_out_tied(r.spec, r.params, r.sequences, group, group_count);
    ASSERT_EQ(to_tied_gradient(r.spec, batch, host_tied_sums(batch), c), kernel_reference(r, group, c))
        << "trial " << trial;
  }
}

TEST(ExactTiedHost, a_known_answer_with_both_uses_of_the_embedding) {
  // V = 2, D = 1, E = [1; 2], b = 0, one token of id 0 with y = [0, 0]: r = E e_0 = [1, 2]. Output projection:
  // dE[v] += r[v] E[0] = [1, 2]; input lookup (row 0): dE[0] += E^T r = 1 + 4 = 5. So dE = [6, 2], db = [1, 2].
  const models::ModelSpec spec = tied(2, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  params.tensors[0](0, 0) = Rational(1);
  params.tensors[0](1, 0) = Rational(2);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(1, 0);
  seq.targets = models::Matrix<Rational>::Constant(1, 2, Rational(0));
  seq.token_ids = {0};
  seq.loss_mask = {1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  const ExactTiedBatch batch = lay_out_tied(spec, params, sequences, group, 1);
  const std::vector<Rational> c = {Rational(1)};
  const auto grad = to_tied_gradient(spec, batch, host_tied_sums(batch), c);
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(6));
  EXPECT_EQ(grad.tensors[0](1, 0), Rational(2));
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(1));
  EXPECT_EQ(grad.tensors[1](1, 0), Rational(2));
}

TEST(ExactTiedHost, refuses_what_it_cannot_run_exactly) {
  const std::vector<int> none;
  const models::ModelSpec wide = tied(257, 1);
  try {
    lay_out_tied(wide, models::zero_parameters<Rational>(wide), {}, none, 1);
    FAIL() << "a vocabulary of 257 was laid out";
  } catch (const ExactRangeError& e) {
    EXPECT_EQ(e.limit(), ExactLimit::width) << e.what();
  }
  // A target of 2^40: more than 31 bits over any denominator.
  const models::ModelSpec spec = tied(2, 1);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(1, 0);
  seq.targets = models::Matrix<Rational>::Constant(1, 2, Rational(1LL << 40));
  seq.token_ids = {1};
  seq.loss_mask = {1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  try {
    lay_out_tied(spec, models::zero_parameters<Rational>(spec), sequences, group, 1);
    FAIL() << "a target of 2^40 was laid out";
  } catch (const ExactRangeError& e) {
    EXPECT_EQ(e.limit(), ExactLimit::magnitude) << e.what();
  }
}

}  // namespace
}  // namespace accumcheck::cuda
