// sim/sequence_pool.h: a sequence converted or taken from the pool is the one to_scalar (or the generator) would
// build, whatever storage it reuses; the pool keeps what it is given up to its bound and no further; and a scenario
// generated in storage a finished trial gave back equals the one generated in fresh storage.
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "fuzz/generator.h"
#include "models/fast_rational.h"
#include "sim/convert.h"
#include "sim/json/scenario_json.h"
#include "sim/sequence_pool.h"

namespace accumcheck::sim {
namespace {

using models::FastRational;
using models::Rational;
using models::Sequence;

// Every sequence of a generated scenario, in order.
std::vector<Sequence<Rational>> sequences_of(const Scenario& s) {
  std::vector<Sequence<Rational>> out;
  for (const auto& step : s.steps)
    for (const auto& mb : step.micro_batches)
      for (const auto& rank : mb.rank_sequences) out.insert(out.end(), rank.begin(), rank.end());
  return out;
}

template <class S>
void expect_same(const Sequence<S>& a, const Sequence<S>& b) {
  RC_ASSERT(a.features.rows() == b.features.rows());
  RC_ASSERT(a.features.cols() == b.features.cols());
  RC_ASSERT(a.targets.rows() == b.targets.rows());
  RC_ASSERT(a.targets.cols() == b.targets.cols());
  RC_ASSERT(models::matrices_equal(a.features, b.features));
  RC_ASSERT(models::matrices_equal(a.targets, b.targets));
  RC_ASSERT(a.token_ids == b.token_ids);
  RC_ASSERT(a.expert_index == b.expert_index);
  RC_ASSERT(a.loss_mask == b.loss_mask);
}

// Sequences of two generated scenarios (every model kind, with experts and token ids) converted one after another in
// one pool, each given back before the next is converted: the second scenario's sequences reuse the first's storage
// wherever the sizes allow (including a matrix of the same size and another shape), and each equals to_scalar's.
RC_GTEST_PROP(SequencePool, a_converted_sequence_equals_to_scalar_whatever_storage_it_reuses, ()) {
  const auto first = *rc::gen::inRange<std::uint64_t>(0, 1u << 20);
  const auto second = *rc::gen::inRange<std::uint64_t>(0, 1u << 20);
  fuzz::GeneratorOptions options;
  options.token_count_max = *rc::gen::inRange(1, 5);  // few sizes, so that storage is often reused
  SequencePool<FastRational> pool;
  for (const std::uint64_t seed : {first, second, first}) {
    const std::vector<Sequence<Rational>> sequences = sequences_of(fuzz::generate_scenario(seed, options));
    std::vector<Sequence<FastRational>> converted;
    for (const auto& seq : sequences) converted.push_back(pool.convert(seq));
    for (std::size_t i = 0; i < sequences.size(); ++i) expect_same(converted[i], to_scalar<FastRational>(sequences[i]));
    pool.give_all(converted);
  }
}

// A taken sequence has T tokens of the asked features and targets, and empty lists.
void expect_taken(const Sequence<Rational>& seq, Eigen::Index tokens, Eigen::Index features, Eigen::Index targets) {
  EXPECT_EQ(seq.features.rows(), tokens);
  EXPECT_EQ(seq.features.cols(), features);
  EXPECT_EQ(seq.targets.rows(), tokens);
  EXPECT_EQ(seq.targets.cols(), targets);
  EXPECT_TRUE(seq.token_ids.empty());
  EXPECT_TRUE(seq.expert_index.empty());
  EXPECT_TRUE(seq.loss_mask.empty());
}

TEST(SequencePool, a_taken_sequence_has_the_asked_shape_and_empty_lists) {
  SequencePool<Rational> pool;
  Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>::Constant(3, 2, Rational(5));
  seq.targets = models::Matrix<Rational>::Constant(3, 1, Rational(7));
  seq.token_ids = {1, 2, 3};
  seq.expert_index = {0, 1, 0};
  seq.loss_mask = {1, 0, 1};
  pool.give(std::move(seq));
  EXPECT_EQ(pool.size(), 1u);
  // 2 tokens: 6 feature values as given back, but 2 target values where 3 were: a new sequence.
  expect_taken(pool.take(2, 3, 1), 2, 3, 1);
  EXPECT_EQ(pool.size(), 1u);
  // 1 token of 6 features and 3 targets: the sizes given back, in another shape, so the storage is reused.
  expect_taken(pool.take(1, 6, 3), 1, 6, 3);
  EXPECT_EQ(pool.size(), 0u);
}

TEST(SequencePool, it_keeps_no_more_than_its_bound) {
  SequencePool<Rational> pool;
  // Sequences of 1,000 values: the pool keeps them until the next would pass kValuesMax, then starts again.
  const auto per_sequence = std::size_t{1000} + 1;
  const std::size_t fit = SequencePool<Rational>::kValuesMax / per_sequence;
  for (std::size_t i = 0; i < fit; ++i) pool.give(pool.take(500, 1, 1));
  EXPECT_EQ(pool.size(), 1u);  // each take reused the one given back
  std::vector<Sequence<Rational>> many;
  for (std::size_t i = 0; i < fit + 1; ++i) many.push_back(pool.take(500, 1, 1));
  pool.give_all(many);
  EXPECT_LE(pool.size(), fit);
  EXPECT_GE(pool.size(), 1u);
  // One sequence past the bound on its own is not kept at all.
  pool.give(pool.take(SequencePool<Rational>::kValuesMax, 1, 1));
  EXPECT_EQ(pool.size(), 0u);
}

// The campaign gives a finished trial's sequences to its thread's pool and the generator takes from it: a scenario
// generated after others were given back is the one generated by a thread whose pool is empty.
TEST(SequencePool, a_scenario_generated_in_reused_storage_equals_one_generated_afresh) {
  fuzz::GeneratorOptions options;
  options.token_count_max = 3;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    Scenario before = fuzz::generate_scenario(seed + 1000, options);
    for (auto& step : before.steps)
      for (auto& mb : step.micro_batches) SequencePool<Rational>::local().give_all(mb.rank_sequences);
    const nlohmann::json reused = to_json(fuzz::generate_scenario(seed, options));
    nlohmann::json fresh;
    std::thread([&] { fresh = to_json(fuzz::generate_scenario(seed, options)); }).join();
    ASSERT_EQ(reused, fresh) << "seed " << seed;
  }
}

}  // namespace
}  // namespace accumcheck::sim
