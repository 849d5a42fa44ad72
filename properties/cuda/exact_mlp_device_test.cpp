// The exact MLP kernel on a device (cuda/exact_mlp.cu): equal to its CPU twin, and so to models/, on random
// micro-batches, and bit-identical across launch configurations. Without a device every test skips, saying why.
#include <gtest/gtest.h>

#include <random>

#include "cuda/exact_mlp.h"
#include "cuda/random_linear_batch.h"
#include "properties/cuda/skip_without_device.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

ExactMlpBatch random_mlp_layout(std::mt19937_64& rng, RandomBatch* kept, int max_size, int max_sequences) {
  std::uniform_int_distribution<int> size(1, max_size), sequences(0, max_sequences);
  const int in = size(rng), hidden = size(rng), out = size(rng);
  RandomBatch r = random_batch(rng, mlp_spec(in, hidden, out), sequences(rng), 12);
  const std::vector<int> group = one_group_per_sequence(r.sequences.size());
  ExactMlpBatch b = lay_out_mlp(r.spec, r.params, r.sequences, group, std::max<int>(1, static_cast<int>(group.size())));
  if (kept) *kept = std::move(r);
  return b;
}

TEST(ExactMlpDevice, equals_models_on_random_batches) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    RandomBatch r;
    const ExactMlpBatch batch = random_mlp_layout(rng, &r, 6, 6);
    const auto device = device_mlp_sums(batch, LaunchConfig{});
    ASSERT_EQ(device, host_mlp_sums(batch)) << "trial " << trial;
    std::vector<Rational> c(static_cast<std::size_t>(batch.group_count));
    for (std::size_t g = 0; g < c.size(); ++g) c[g] = Rational(static_cast<long long>(g) + 1, 7);
    std::vector<int> group(r.sequences.size());
    for (std::size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);
    ASSERT_EQ(to_mlp_gradient(r.spec, batch, device, c), kernel_reference(r, group, c)) << "trial " << trial;
  }
}

TEST(ExactMlpDevice, bit_identical_across_launch_configurations) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 10; ++trial) {
    const ExactMlpBatch batch = random_mlp_layout(rng, nullptr, 32, 8);
    const auto first = device_mlp_sums(batch, LaunchConfig{});
    for (int block : {32, 128, 1024})
      for (int grid : {1, 7, 1024}) ASSERT_EQ(device_mlp_sums(batch, LaunchConfig{block, grid}), first);
  }
}

}  // namespace
}  // namespace accumcheck::cuda
