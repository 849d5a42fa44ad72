// The GPU half of cuda/ on a device: the exact kernel equal to models/ on random batches and bit-identical across
// launch configurations, a constructed answer, and the offload pipeline clean when synchronised and found when not.
// Without a device every test skips, saying why (CTest reports the program as skipped).
#include <gtest/gtest.h>

#include <random>

#include "cuda/device.h"
#include "cuda/exact_linear.h"
#include "cuda/random_linear_batch.h"
#include "models/linear_model.h"
#include "models/model.h"
#include "properties/cuda/skip_without_device.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

models::ModelSpec linear(int in, int out, int experts) {
  models::ModelSpec spec;
  spec.input_size = in;
  spec.output_size = out;
  spec.expert_count = experts;
  return spec;
}

ExactLinearBatch random_layout(std::mt19937_64& rng, RandomBatch* kept, int max_size, int max_sequences, int max_tokens) {
  std::uniform_int_distribution<int> size(1, max_size), experts(1, 3), sequences(0, max_sequences);
  RandomBatch r = random_batch(rng, linear(size(rng), size(rng), experts(rng)), sequences(rng), max_tokens);
  std::vector<int> group(r.sequences.size());
  for (std::size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);  // a coefficient per sequence
  ExactLinearBatch batch = lay_out(r.spec, r.params, r.sequences, group, std::max<int>(1, static_cast<int>(group.size())));
  if (kept) *kept = std::move(r);
  return batch;
}

TEST(ExactLinearDevice, equals_models_on_random_batches) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 500; ++trial) {
    RandomBatch r;
    const ExactLinearBatch batch = random_layout(rng, &r, 6, 6, 12);
    const auto device = device_sums(batch, LaunchConfig{});
    ASSERT_EQ(device, host_sums(batch)) << "trial " << trial;
    std::vector<Rational> c(static_cast<std::size_t>(batch.group_count));
    for (std::size_t g = 0; g < c.size(); ++g) c[g] = Rational(static_cast<long long>(g) + 1, 7);
    models::Gradient<Rational> want = models::zero_gradient<Rational>(r.spec);
    std::vector<Rational> per_sequence(c.begin(), c.begin() + static_cast<long>(r.sequences.size()));
    models::linear_model::accumulate_gradient<Rational>(r.spec, r.params, r.sequences, per_sequence, want);
    ASSERT_EQ(to_gradient(r.spec, batch, device, c), want) << "trial " << trial;
  }
}

TEST(ExactLinearDevice, bit_identical_across_launch_configurations) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 20; ++trial) {
    const ExactLinearBatch batch = random_layout(rng, nullptr, 32, 8, 64);
    const auto first = device_sums(batch, LaunchConfig{});
    for (int block : {32, 64, 96, 128, 256, 512, 1024})
      for (int grid : {0, 1, 3, 17, 1024})
        ASSERT_EQ(device_sums(batch, LaunchConfig{block, grid}), first) << "block " << block << " grid " << grid;
  }
}

TEST(ExactLinearDevice, a_known_answer_at_the_edge_of_the_range) {
  SKIP_WITHOUT_DEVICE();
  // I = 4096 inputs of 2^31 - 1 (raw, F = 0), weights the same, b = y = 0, 16 supervised tokens: r = 4096 (2^31-1)^2
  // and dW[o][k] = 16 r (2^31 - 1), all exact in Int128.
  ExactLinearBatch b;
  b.input_size = 4096;
  b.output_size = 1;
  const std::int64_t big = (std::int64_t{1} << 31) - 1;
  b.weights.assign(4096, big);
  b.biases = {0};
  b.features.assign(16 * 4096, big);
  b.targets.assign(16, 0);
  b.expert.assign(16, 0);
  b.group.assign(16, 0);
  b.mask.assign(16, 1);
  const Int128 r = static_cast<Int128>(4096) * big * big;
  const auto sums = device_sums(b, LaunchConfig{});
  ASSERT_EQ(sums.size(), 4097u);
  for (int k = 0; k < 4096; ++k) ASSERT_EQ(sums[static_cast<std::size_t>(k)], 16 * r * big) << k;
  EXPECT_EQ(sums[4096], 16 * r);
}

// A window of G micro-batches of one shape, the whole micro-batch one group.
std::vector<ExactLinearBatch> random_window(std::mt19937_64& rng, int micro_batches) {
  std::uniform_int_distribution<int> size(1, 24);
  const models::ModelSpec spec = linear(size(rng), size(rng), 2);
  std::vector<ExactLinearBatch> window;
  for (int j = 0; j < micro_batches; ++j) {
    const RandomBatch r = random_batch(rng, spec, 4, 32);
    const std::vector<int> group(r.sequences.size(), 0);
    window.push_back(lay_out(r.spec, r.params, r.sequences, group, 1));
  }
  return window;
}

std::vector<Int128> expected(const std::vector<ExactLinearBatch>& window) {
  std::vector<Int128> total(window.front().sum_count(), 0);
  for (const auto& b : window) {
    const auto s = host_sums(b);
    for (std::size_t i = 0; i < s.size(); ++i) total[i] += s[i];
  }
  return total;
}

TEST(OffloadPipeline, synchronised_is_exact_under_every_drawn_schedule) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(3);
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    const auto window = random_window(rng, 2 + static_cast<int>(seed % 7));
    const PipelineSchedule schedule = draw_schedule(seed, static_cast<int>(window.size()), true);
    ASSERT_EQ(run_offload_pipeline(window, schedule, LaunchConfig{}), expected(window)) << "seed " << seed;
  }
}

TEST(OffloadPipeline, the_unsynchronised_variant_is_found) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(4);
  int wrong = 0, runs = 0;
  for (std::uint64_t seed = 0; seed < 60; ++seed, ++runs) {
    const auto window = random_window(rng, 2 + static_cast<int>(seed % 7));
    const PipelineSchedule schedule = draw_schedule(seed, static_cast<int>(window.size()), false);
    wrong += run_offload_pipeline(window, schedule, LaunchConfig{}) != expected(window);
  }
  std::printf("the unsynchronised pipeline was wrong in %d of %d windows\n", wrong, runs);
  EXPECT_GT(wrong, 0) << "a missing wait on the copy event went unnoticed in every window";
}

}  // namespace
}  // namespace accumcheck::cuda
