// The fp32 and bf16 kernels of the MLP and the tied embedding, their host side on the CPU (cuda/float_models.h): the
// twins' sums within the bound models::FloatBound derives of the exact sums over the stored values, those minus the
// storage gap the exact kernels' sums, rounding really happening (so the check is not vacuous), the ReLU's decision
// at its kink left unchecked rather than passed, and the refusals.
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <stdexcept>

#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/float_models.h"
#include "cuda/random_linear_batch.h"
#include "models/model.h"
#include "properties/cuda/float_checks.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

const auto& mlp = mlp_spec;
const auto& tied = tied_spec;

Rational power(const Rational& d, int n) {
  Rational out(1);
  for (int i = 0; i < n; ++i) out *= d;
  return out;
}

// One model's float sums, bounds and exact reference: the exact kernel's integer sums over their denominators.
struct FloatCase {
  std::vector<float> computed;
  std::vector<FloatSumBound> bounds;
  std::vector<Rational> reference;  // empty where the exact kernel refuses the batch
};

FloatCase mlp_case(const RandomBatch& r, const RandomGroups& g, FloatStorage storage) {
  FloatCase c;
  c.computed = host_float_mlp_sums(lay_out_float_mlp(r.spec, r.params, r.sequences, g.of_sequence, g.count, storage));
  c.bounds = float_mlp_sum_bounds(r.spec, r.params, r.sequences, g.of_sequence, g.count, storage);
  try {
    const ExactMlpBatch exact = lay_out_mlp(r.spec, r.params, r.sequences, g.of_sequence, g.count);
    const auto sums = host_mlp_sums(exact);
    const Rational d(static_cast<long long>(exact.denominator));
    for (std::size_t i = 0; i < sums.size(); ++i) {
      // dW1 and dW2 at D^5, db1 at D^4, db2 at D^3 (exact_mlp_batch.h).
      const int kind = mlp_sum_index(i, exact.input_size, exact.hidden_size, exact.output_size).kind;
      const int n = kind == mlp_db2 ? 3 : (kind == mlp_db1 ? 4 : 5);
      c.reference.push_back(to_rational(sums[i]) / power(d, n));
    }
  } catch (const ExactRangeError&) {
  }
  return c;
}

FloatCase tied_case(const RandomBatch& r, const RandomGroups& g, FloatStorage storage) {
  FloatCase c;
  c.computed = host_float_tied_sums(lay_out_float_tied(r.spec, r.params, r.sequences, g.of_sequence, g.count, storage));
  c.bounds = float_tied_sum_bounds(r.spec, r.params, r.sequences, g.of_sequence, g.count, storage);
  try {
    const ExactTiedBatch exact = lay_out_tied(r.spec, r.params, r.sequences, g.of_sequence, g.count);
    const auto sums = host_tied_sums(exact);
    const Rational d(static_cast<long long>(exact.denominator));
    for (std::size_t i = 0; i < sums.size(); ++i)  // dE at D^3, db at D^2 (exact_tied_batch.h)
      c.reference.push_back(to_rational(sums[i]) /
                            power(d, tied_sum_index(i, exact.vocab_size, exact.embed_size).is_bias ? 2 : 3));
  } catch (const ExactRangeError&) {
  }
  return c;
}

// Over 200 random micro-batches of each storage: every sum within its bound, or (the ReLU at its kink) unchecked;
// the exact sum over the stored values, less the storage gap, the exact kernel's.
template <class DrawSpec, class Case>
void check_random_batches(std::uint64_t seed, DrawSpec draw_spec, Case run_case) {
  std::mt19937_64 rng(seed);
  for (const FloatStorage storage : {FloatStorage::fp32, FloatStorage::bf16}) {
    const char* name = storage == FloatStorage::bf16 ? "bf16" : "fp32";
    int sums = 0, rounded = 0, gaps = 0, referenced = 0, ambiguous = 0;
    for (int trial = 0; trial < 200; ++trial) {
      std::uniform_int_distribution<int> sequences(0, 5), quarter(0, 3);
      RandomBatch r = random_batch(rng, draw_spec(rng), sequences(rng), 6);
      // A quarter of the trials: parameters over 3 2^f, which fp32 cannot hold, as after a step dividing by 3 tokens.
      const bool thirds = quarter(rng) == 0;
      if (thirds)
        for (auto& t : r.params.tensors) t /= Rational(3);
      const RandomGroups groups = random_groups(rng, r.sequences.size());
      const FloatCase c = run_case(r, groups, storage);
      ASSERT_EQ(c.computed.size(), c.bounds.size());
      referenced += !c.reference.empty();
      for (std::size_t i = 0; i < c.computed.size(); ++i) {
        const FloatSumBound& b = c.bounds[i];
        if (!c.reference.empty()) {
          ASSERT_EQ(b.exact - b.storage_gap, c.reference[i]) << name << " trial " << trial << " sum " << i;
        }
        if (storage == FloatStorage::fp32 && !thirds) {
          ASSERT_EQ(b.storage_gap, Rational(0));  // the generator's values are fp32 numbers
        }
        gaps += b.storage_gap != Rational(0);
        ++sums;
        if (b.ambiguous) {
          ASSERT_FALSE(b.bounded);
          ++ambiguous;
          continue;
        }
        ASSERT_TRUE(within(c.computed[i], b)) << name << " trial " << trial << " sum " << i << ": " << c.computed[i]
                                              << " against " << b.exact.to_string() << " within "
                                              << static_cast<double>(b.bound);
        rounded += Rational(mpq_class(static_cast<double>(c.computed[i]))) != b.exact;
      }
    }
    std::cout << name << ": " << sums << " sums, " << rounded << " rounded, " << gaps << " moved by storage, "
              << ambiguous << " unchecked at the ReLU's kink; " << referenced << " of 200 batches against the exact kernel\n";
    EXPECT_GT(rounded, sums / 10) << name;  // rounding happened on a good share of the sums: the bound was put to work
    EXPECT_GT(referenced, 150) << name;     // and most batches were compared with the exact kernel
    if (storage == FloatStorage::bf16) {
      EXPECT_GT(gaps, sums / 3);  // storing in bf16 moved many sums (the ReLU zeroes some whatever the storage), which the kernel is not charged for
    }
  }
}

TEST(FloatModelsHost, the_mlp_twin_keeps_to_the_derived_bound_on_random_batches) {
  check_random_batches(
      20261208,
      [](std::mt19937_64& rng) {
        std::uniform_int_distribution<int> size(1, 4);
        return mlp(size(rng), size(rng), size(rng));
      },
      mlp_case);
}

TEST(FloatModelsHost, the_tied_embedding_twin_keeps_to_the_derived_bound_on_random_batches) {
  check_random_batches(
      20261209,
      [](std::mt19937_64& rng) {
        std::uniform_int_distribution<int> vocab(2, 6), embed(1, 4);
        return tied(vocab(rng), embed(rng));
      },
      tied_case);
}

// One token of the MLP with one unit of each: W1 = x = 1 + 2^-23 and W2 = 1, b2 = y = 0.
struct OneUnit {
  models::ModelSpec spec = mlp(1, 1, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  std::vector<models::Sequence<Rational>> sequences;
  std::vector<int> group = {0};

  explicit OneUnit(const Rational& b1) {
    const Rational one_ulp = Rational(1) + Rational(1, 1LL << 23);
    params.tensors[0](0, 0) = one_ulp;
    params.tensors[1](0, 0) = b1;
    params.tensors[2](0, 0) = Rational(1);
    models::Sequence<Rational> seq;
    seq.features = models::Matrix<Rational>::Constant(1, 1, one_ulp);
    seq.targets = models::Matrix<Rational>::Constant(1, 1, Rational(0));
    seq.loss_mask = {1};
    sequences = {seq};
  }
  std::vector<float> computed() const {
    return host_float_mlp_sums(lay_out_float_mlp(spec, params, sequences, group, 1, FloatStorage::fp32));
  }
  std::vector<FloatSumBound> bounds() const {
    return float_mlp_sum_bounds(spec, params, sequences, group, 1, FloatStorage::fp32);
  }
};

TEST(FloatModelsHost, the_relu_at_its_kink_is_unchecked_not_passed) {
  // b1 = -(1 + 2^-22): exactly, z = (1 + 2^-23)^2 - 1 - 2^-22 = 2^-46 > 0, so the unit is on. In fp32, W1 x rounds to
  // 1 + 2^-22 and z to 0: off. No bound covers that, so every sum (each reads h) is marked ambiguous, unbounded, and
  // never within; its exact value takes the exact branch.
  const OneUnit kink(-(Rational(1) + Rational(1, 1LL << 22)));
  const auto computed = kink.computed();
  const auto bounds = kink.bounds();
  ASSERT_EQ(bounds.size(), 4u);  // dW1, db1, dW2, db2
  const Rational z(1, 1LL << 46);
  EXPECT_EQ(bounds[3].exact, z);  // db2 = r = W2 h
  EXPECT_EQ(bounds[1].exact, z);  // db1 = dz = W2 r
  EXPECT_EQ(computed[3], 0.0f);   // the float evaluation switched the unit off
  for (const FloatSumBound& b : bounds) {
    EXPECT_TRUE(b.ambiguous);
    EXPECT_FALSE(b.bounded);
  }
  for (std::size_t i = 0; i < bounds.size(); ++i) EXPECT_FALSE(within(computed[i], bounds[i])) << "sum " << i;

  // Away from the kink (b1 = 0), the same token is bounded, rounds, and keeps to its bound; a bound of zero would not.
  const OneUnit away(Rational(0));
  const auto computed_away = away.computed();
  auto bounds_away = away.bounds();
  for (std::size_t i = 0; i < bounds_away.size(); ++i) {
    EXPECT_FALSE(bounds_away[i].ambiguous);
    EXPECT_TRUE(within(computed_away[i], bounds_away[i])) << "sum " << i;
  }
  EXPECT_NE(Rational(mpq_class(static_cast<double>(computed_away[3]))), bounds_away[3].exact);
  bounds_away[3].bound = 0;
  EXPECT_FALSE(within(computed_away[3], bounds_away[3]));
}

TEST(FloatModelsHost, the_tied_embedding_rounds_within_its_bound) {
  // V = 2, Dm = 1, E = [1 + 2^-23; 1], b = 0, one token of id 0 with y = 0: r = E e_0 = [(1 + 2^-23)^2, 1 + 2^-23],
  // which fp32 rounds. db = r; dE[0] = r[0] e_0 + E^T r (both uses), dE[1] = r[1] e_0.
  const models::ModelSpec spec = tied(2, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  const Rational e = Rational(1) + Rational(1, 1LL << 23);
  params.tensors[0](0, 0) = e;
  params.tensors[0](1, 0) = Rational(1);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(1, 0);
  seq.token_ids = {0};
  seq.targets = models::Matrix<Rational>::Constant(1, 2, Rational(0));
  seq.loss_mask = {1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  const auto computed = host_float_tied_sums(lay_out_float_tied(spec, params, sequences, group, 1, FloatStorage::fp32));
  const auto bounds = float_tied_sum_bounds(spec, params, sequences, group, 1, FloatStorage::fp32);
  ASSERT_EQ(bounds.size(), 4u);  // dE[0], dE[1], db[0], db[1]
  const Rational r0 = e * e, r1 = e;
  EXPECT_EQ(bounds[2].exact, r0);
  EXPECT_EQ(bounds[3].exact, r1);
  EXPECT_EQ(bounds[0].exact, r0 * e + (e * r0 + Rational(1) * r1));
  EXPECT_EQ(bounds[1].exact, r1 * e);
  for (std::size_t i = 0; i < bounds.size(); ++i) EXPECT_TRUE(within(computed[i], bounds[i])) << "sum " << i;
  EXPECT_NE(Rational(mpq_class(static_cast<double>(computed[2]))), bounds[2].exact);  // (1 + 2^-23)^2 rounded
}

TEST(FloatModelsHost, refuses_what_a_thread_cannot_hold_and_the_wrong_model) {
  const std::vector<int> none;
  const models::ModelSpec wide = mlp(1, 65, 1);
  const auto wide_params = models::zero_parameters<Rational>(wide);
  EXPECT_THROW(lay_out_float_mlp(wide, wide_params, {}, none, 1, FloatStorage::fp32), std::invalid_argument);
  const models::ModelSpec big_vocab = tied(257, 1);
  const auto vocab_params = models::zero_parameters<Rational>(big_vocab);
  EXPECT_THROW(lay_out_float_tied(big_vocab, vocab_params, {}, none, 1, FloatStorage::fp32), std::invalid_argument);
  const models::ModelSpec small = mlp(1, 1, 1);
  EXPECT_THROW(lay_out_float_tied(small, models::zero_parameters<Rational>(small), {}, none, 1, FloatStorage::fp32),
               std::invalid_argument);
  try {
    lay_out_float_mlp(wide, wide_params, {}, none, 1, FloatStorage::fp32);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size 65"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace accumcheck::cuda
