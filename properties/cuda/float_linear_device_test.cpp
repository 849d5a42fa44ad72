// The fp32 and bf16 linear-model kernel on a device (cuda/float_linear.cu): bit-identical to its CPU twin on random
// micro-batches and across launch configurations, and so within the bound FloatBound derives. Without a device
// every test skips, saying why.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cuda/float_linear.h"
#include "cuda/random_linear_batch.h"
#include "properties/cuda/skip_without_device.h"

namespace accumcheck::cuda {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

FloatLinearBatch random_float_batch(std::mt19937_64& rng, int max_size, FloatStorage storage) {
  std::uniform_int_distribution<int> size(1, max_size), experts(1, 3), sequences(0, 8);
  models::ModelSpec spec;
  spec.input_size = size(rng);
  spec.output_size = size(rng);
  spec.expert_count = experts(rng);
  const RandomBatch r = random_batch(rng, spec, sequences(rng), 16);
  const std::vector<int> group = one_group_per_sequence(r.sequences.size());
  return lay_out_float(r.spec, r.params, r.sequences, group, std::max<int>(1, static_cast<int>(group.size())), storage);
}

TEST(FloatLinearDevice, bit_identical_to_the_cpu_twin_on_random_batches) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(6);
  for (const FloatStorage storage : {FloatStorage::fp32, FloatStorage::bf16})
    for (int trial = 0; trial < 300; ++trial) {
      const FloatLinearBatch batch = random_float_batch(rng, 8, storage);
      ASSERT_TRUE(same_bits(device_float_sums(batch, LaunchConfig{}), host_float_sums(batch))) << "trial " << trial;
    }
}

TEST(FloatLinearDevice, bit_identical_across_launch_configurations) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    const FloatLinearBatch batch = random_float_batch(rng, 48, FloatStorage::fp32);
    const auto first = device_float_sums(batch, LaunchConfig{});
    for (int block : {32, 256, 1024})
      for (int grid : {1, 7, 1024}) ASSERT_TRUE(same_bits(device_float_sums(batch, LaunchConfig{block, grid}), first));
  }
}

}  // namespace
}  // namespace accumcheck::cuda
