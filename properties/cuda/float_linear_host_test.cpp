// The fp32 and bf16 linear-model kernel's host side on the CPU (cuda/float_linear.h): the twin's sums within the
// bound models::FloatBound derives of the exact sums over the stored values, those minus the storage gap the integer
// kernel's exact sums, and rounding really happening (so the check is not vacuous).
#include <gtest/gtest.h>

#include <random>

#include "cuda/exact_linear.h"
#include "cuda/float_linear.h"
#include "cuda/random_linear_batch.h"
#include "properties/cuda/float_checks.h"
#include "models/model.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

TEST(FloatLinearHost, the_twin_keeps_to_the_derived_bound_on_random_batches) {
  std::mt19937_64 rng(20261206);
  for (const FloatStorage storage : {FloatStorage::fp32, FloatStorage::bf16}) {
    int sums = 0, rounded = 0, gaps = 0;
    for (int trial = 0; trial < 200; ++trial) {
      std::uniform_int_distribution<int> size(1, 6), experts(1, 3), sequences(0, 5), groups(1, 3);
      models::ModelSpec spec;
      spec.input_size = size(rng);
      spec.output_size = size(rng);
      spec.expert_count = experts(rng);
      const RandomBatch r = random_batch(rng, spec, sequences(rng), 8);
      const int group_count = groups(rng);
      std::vector<int> group;
      std::uniform_int_distribution<int> pick(0, group_count - 1);
      for (std::size_t i = 0; i < r.sequences.size(); ++i) group.push_back(pick(rng));
      const FloatLinearBatch batch = lay_out_float(r.spec, r.params, r.sequences, group, group_count, storage);
      const auto computed = host_float_sums(batch);
      const auto bounds = float_sum_bounds(r.spec, r.params, r.sequences, group, group_count, storage);
      // The exact sum over the unrounded values is the exact kernel's sum over D^3.
      const ExactLinearBatch exact = lay_out(r.spec, r.params, r.sequences, group, group_count);
      const auto integers = host_sums(exact);
      const Rational d(static_cast<long long>(exact.denominator));
      ASSERT_EQ(computed.size(), bounds.size());
      for (std::size_t i = 0; i < computed.size(); ++i) {
        ASSERT_EQ(bounds[i].exact - bounds[i].storage_gap, to_rational(integers[i]) / (d * d * d))
            << "trial " << trial << " sum " << i;
        if (storage == FloatStorage::fp32) {
          ASSERT_EQ(bounds[i].storage_gap, Rational(0));  // the generator's values are fp32 numbers
        }
        gaps += bounds[i].storage_gap != Rational(0);
        ASSERT_TRUE(within(computed[i], bounds[i]))
            << "trial " << trial << " sum " << i << ": " << computed[i] << " against " << bounds[i].exact.to_string()
            << " within " << static_cast<double>(bounds[i].bound);
        ++sums;
        rounded += Rational(mpq_class(static_cast<double>(computed[i]))) != bounds[i].exact;
      }
    }
    // Rounding happened on a good share of the sums: the bound was put to work.
    EXPECT_GT(rounded, sums / 10) << (storage == FloatStorage::bf16 ? "bf16" : "fp32");
    if (storage == FloatStorage::bf16) {
      EXPECT_GT(gaps, sums / 2);  // storing in bf16 moved most sums, which the kernel is not charged for
    }
  }
}

TEST(FloatLinearHost, rounding_is_bounded_and_storage_is_reported_apart) {
  // w = x = 1 + 2^-23, both fp32 numbers: w x = 1 + 2^-22 + 2^-46 rounds, so the sum is not exact, and a bound of
  // zero would not hold. Then w = 1 + 2^-24, not an fp32 number: stored as 1, which the storage gap says.
  models::ModelSpec spec;
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  const Rational one_ulp = Rational(1) + Rational(1, 1LL << 23);
  params.tensors[0](0, 0) = one_ulp;
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>::Constant(1, 1, one_ulp);
  seq.targets = models::Matrix<Rational>::Constant(1, 1, Rational(0));
  seq.loss_mask = {1};
  std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  auto computed = host_float_sums(lay_out_float(spec, params, sequences, group, 1, FloatStorage::fp32));
  auto bounds = float_sum_bounds(spec, params, sequences, group, 1, FloatStorage::fp32);
  // Sum 0 is r x = (w x) x, with three roundings' worth of room; sum 1 is r = w x.
  EXPECT_NE(Rational(mpq_class(static_cast<double>(computed[1]))), bounds[1].exact);
  EXPECT_TRUE(within(computed[1], bounds[1]));
  EXPECT_GT(bounds[1].bound, 0);
  EXPECT_EQ(bounds[1].storage_gap, Rational(0));
  bounds[1].bound = 0;
  EXPECT_FALSE(within(computed[1], bounds[1]));

  params.tensors[0](0, 0) = Rational(1) + Rational(1, 1LL << 24);
  sequences[0].features(0, 0) = Rational(1);
  computed = host_float_sums(lay_out_float(spec, params, sequences, group, 1, FloatStorage::fp32));
  bounds = float_sum_bounds(spec, params, sequences, group, 1, FloatStorage::fp32);
  EXPECT_EQ(bounds[1].exact, Rational(1));
  EXPECT_EQ(bounds[1].storage_gap, -Rational(1, 1LL << 24));
  EXPECT_TRUE(within(computed[1], bounds[1]));
}

}  // namespace
}  // namespace accumcheck::cuda
