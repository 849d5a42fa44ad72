// The fp32 and bf16 kernels of the MLP and the tied embedding on a device (cuda/float_models.cu): bit-identical to
// their CPU twins on random micro-batches and across launch configurations, and so within the bounds FloatBound
// derives (float_models_host_test.cpp). Without a device every test skips, saying why.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cuda/float_models.h"
#include "cuda/random_linear_batch.h"
#include "properties/cuda/skip_without_device.h"

namespace accumcheck::cuda {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

FloatMlpBatch random_mlp(std::mt19937_64& rng, int max_size, FloatStorage storage) {
  std::uniform_int_distribution<int> size(1, max_size), sequences(0, 8);
  const int in = size(rng), hidden = size(rng), out = size(rng);
  const RandomBatch r = random_batch(rng, mlp_spec(in, hidden, out), sequences(rng), 16);
  const auto group = one_group_per_sequence(r.sequences.size());
  return lay_out_float_mlp(r.spec, r.params, r.sequences, group, std::max<int>(1, static_cast<int>(group.size())),
                           storage);
}

FloatTiedBatch random_tied(std::mt19937_64& rng, int max_size, FloatStorage storage) {
  std::uniform_int_distribution<int> vocab(2, max_size + 1), embed(1, max_size), sequences(0, 8);
  const int v = vocab(rng), e = embed(rng);
  const RandomBatch r = random_batch(rng, tied_spec(v, e), sequences(rng), 16);
  const auto group = one_group_per_sequence(r.sequences.size());
  return lay_out_float_tied(r.spec, r.params, r.sequences, group, std::max<int>(1, static_cast<int>(group.size())),
                            storage);
}

TEST(FloatModelsDevice, bit_identical_to_the_cpu_twins_on_random_batches) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(8);
  for (const FloatStorage storage : {FloatStorage::fp32, FloatStorage::bf16})
    for (int trial = 0; trial < 300; ++trial) {
      const FloatMlpBatch mlp = random_mlp(rng, 8, storage);
      ASSERT_TRUE(same_bits(device_float_mlp_sums(mlp, LaunchConfig{}), host_float_mlp_sums(mlp))) << "MLP trial " << trial;
      const FloatTiedBatch tied = random_tied(rng, 8, storage);
      ASSERT_TRUE(same_bits(device_float_tied_sums(tied, LaunchConfig{}), host_float_tied_sums(tied)))
          << "tied trial " << trial;
    }
}

TEST(FloatModelsDevice, bit_identical_across_launch_configurations) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 10; ++trial) {
    const FloatMlpBatch mlp = random_mlp(rng, 32, FloatStorage::fp32);
    const FloatTiedBatch tied = random_tied(rng, 32, FloatStorage::fp32);
    const auto first_mlp = device_float_mlp_sums(mlp, LaunchConfig{});
    const auto first_tied = device_float_tied_sums(tied, LaunchConfig{});
    for (int block : {32, 256, 1024})
      for (int grid : {1, 7, 1024}) {
        ASSERT_TRUE(same_bits(device_float_mlp_sums(mlp, LaunchConfig{block, grid}), first_mlp));
        ASSERT_TRUE(same_bits(device_float_tied_sums(tied, LaunchConfig{block, grid}), first_tied));
      }
  }
}

}  // namespace
}  // namespace accumcheck::cuda
