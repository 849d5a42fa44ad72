// The batched mode on a device (cuda/batched_check.cu): the device's flags equal the CPU twin's on many trials of the
// correct and of wrong framework layers, whatever the launch configuration; an empty batch is no launch. Without a
// device every test skips, saying why.
#include <gtest/gtest.h>

#include "cuda/batched_trials.h"
#include "fuzz/generator.h"
#include "properties/cuda/skip_without_device.h"
#include "sim/target.h"

namespace accumcheck::cuda {
namespace {

BatchedTrials batch_of(const std::string& framework, std::uint64_t seed, int trials) {
  const auto normaliser = sim::find_normaliser(framework);
  const auto target = sim::make_target(framework == "reference" ? "reference" : framework + "+reference");
  const fuzz::GeneratorOptions options = batched_one_step();  // every model
  BatchedTrials batch;
  for (int i = 0; i < trials; ++i) {
    sim::Scenario s = fuzz::generate_scenario(fuzz::trial_seed(seed, static_cast<std::uint64_t>(i)), options);
    if (fuzz::fit_to_target(s, *target)) (void)add_batched_trial(batch, s, *normaliser);
  }
  return batch;
}

TEST(BatchedDevice, equals_the_cpu_twin_on_every_trial) {
  SKIP_WITHOUT_DEVICE();
  for (const char* framework : {"reference", "openrlhf@0.10.2", "openrlhf@0.10.3", "transformers@4.45", "transformers@4.46"}) {
    const BatchedTrials batch = batch_of(framework, 7, 20000);
    const auto device = device_batched_failures(batch, LaunchConfig{});
    const auto twin = host_batched_failures(batch);
    ASSERT_EQ(device, twin) << framework;
    long failing = 0;
    for (auto f : device) failing += f;
    std::printf("%-18s %d batched trials, %ld fail property 1 on the device and on the CPU twin\n", framework,
                batch.trial_count(), failing);
  }
}

TEST(BatchedDevice, bit_identical_across_launch_configurations) {
  SKIP_WITHOUT_DEVICE();
  const BatchedTrials batch = batch_of("openrlhf@0.10.2", 8, 3000);
  const auto first = device_batched_failures(batch, LaunchConfig{});
  for (int block : {32, 64, 256, 1024})
    for (int grid : {1, 7, 64, 1024}) ASSERT_EQ(device_batched_failures(batch, LaunchConfig{block, grid}), first);
}

TEST(BatchedDevice, a_campaign_on_the_device_confirms_every_failure_on_the_cpu_path) {
  SKIP_WITHOUT_DEVICE();
  BatchedCampaignConfig config;
  config.framework = "transformers@4.45";
  config.seed = 9;
  config.trials = 20000;
  config.shrink_budget = 500;
  const BatchedCampaignReport report = run_batched_campaign(config);
  EXPECT_TRUE(report.disagreements.empty()) << report.disagreements.front();
  ASSERT_TRUE(report.finding.has_value());
  EXPECT_TRUE(device_batched_failures(BatchedTrials{}, LaunchConfig{}).empty());
}

}  // namespace
}  // namespace accumcheck::cuda
