// The exact MLP kernel's host side on the CPU (cuda/exact_mlp.h): its twin's sums turned into a gradient equal
// models/'s MLP gradient on random micro-batches, dyadic or not; a hand-computed answer through both sides of the
// ReLU; the refusals.
#include <gtest/gtest.h>

#include <random>

#include "cuda/exact_mlp.h"
#include "cuda/random_linear_batch.h"
#include "models/mlp_model.h"
#include "models/model.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

const auto& mlp = mlp_spec;

TEST(ExactMlpHost, host_sums_give_models_gradient_on_random_batches) {
  std::mt19937_64 rng(20261205);
  int relu_off = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::uniform_int_distribution<int> size(1, 4), sequences(0, 5), thirds(0, 3);
    RandomBatch r = random_batch(rng, mlp(size(rng), size(rng), size(rng)), sequences(rng), 6);
    // A quarter of the trials: parameters over 3 2^f, as after a step whose coefficient divides by a token count.
    if (thirds(rng) == 0)
      for (auto& t : r.params.tensors) t /= Rational(3);
    const RandomGroups groups = random_groups(rng, r.sequences.size());
    const int group_count = groups.count;
    const std::vector<int>& group = groups.of_sequence;
    const std::vector<Rational>& c = groups.coefficient;
    const ExactMlpBatch batch = lay_out_mlp(r.spec, r.params, r.sequences, group, group_count);
    const auto sums = host_mlp_sums(batch);
    ASSERT_EQ(to_mlp_gradient(r.spec, batch, sums, c), kernel_reference(r, group, c)) << "trial " << trial;
    for (const auto& seq : r.sequences)
      for (int t = 0; t < seq.token_count(); ++t) {
        const auto z = r.params.tensors[0] * seq.features.row(t).transpose() + r.params.tensors[1];
        for (Eigen::Index j = 0; j < z.rows(); ++j) relu_off += z(j, 0).sign() <= 0;
      }
  }
  EXPECT_GT(relu_off, 100);  // both sides of the ReLU were exercised
}

TEST(ExactMlpHost, a_known_answer_on_both_sides_of_the_relu) {
  // W1 = 1, b1 = 0, W2 = 2, b2 = 0. Token 1: x = 1, y = 1: z = h = 1, r = 2 - 1 = 1, so dW2 = r h = 1, db2 = 1,
  // dz = W2 r = 2, db1 = 2, dW1 = dz x = 2. Token 2: x = -1, y = 1: z = -1, h = 0, r = -1: db2 = -1 only.
  const models::ModelSpec spec = mlp(1, 1, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  params.tensors[0](0, 0) = Rational(1);
  params.tensors[2](0, 0) = Rational(2);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(2, 1);
  seq.features << Rational(1), Rational(-1);
  seq.targets = models::Matrix<Rational>::Constant(2, 1, Rational(1));
  seq.loss_mask = {1, 1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  const ExactMlpBatch batch = lay_out_mlp(spec, params, sequences, group, 1);
  const std::vector<Rational> c = {Rational(1, 2)};
  const auto grad = to_mlp_gradient(spec, batch, host_mlp_sums(batch), c);
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(1));     // dW1 = 2 / 2
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(1));     // db1
  EXPECT_EQ(grad.tensors[2](0, 0), Rational(1, 2));  // dW2
  EXPECT_EQ(grad.tensors[3](0, 0), Rational(0));     // db2 = (1 - 1) / 2
}

TEST(ExactMlpHost, refuses_what_it_cannot_run_exactly) {
  const std::vector<int> none;
  models::Parameters<Rational> wide_params = models::zero_parameters<Rational>(mlp(1, 65, 1));
  try {
    lay_out_mlp(mlp(1, 65, 1), wide_params, {}, none, 1);
    FAIL() << "65 hidden units were laid out";
  } catch (const ExactRangeError& e) {
    EXPECT_EQ(e.limit(), ExactLimit::width) << e.what();
  }
  // Raw values near 2^30 over D = 2^30: z near 2^61, r near 2^122, r h past 2^120.
  const models::ModelSpec spec = mlp(1, 1, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  for (auto& t : params.tensors) t(0, 0) = Rational((1LL << 30) - 1, 1LL << 30);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>::Constant(1, 1, Rational((1LL << 30) - 1, 1LL << 30));
  seq.targets = models::Matrix<Rational>::Constant(1, 1, Rational(0));
  seq.loss_mask = {1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  try {
    lay_out_mlp(spec, params, sequences, group, 1);
    FAIL() << "sums near 2^180 were laid out";
  } catch (const ExactRangeError& e) {
    EXPECT_EQ(e.limit(), ExactLimit::sums) << e.what();
  }
  models::ModelSpec linear = spec;
  linear.kind = models::ModelKind::linear;
  EXPECT_THROW(lay_out_mlp(linear, models::zero_parameters<Rational>(linear), {}, none, 1), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::cuda
