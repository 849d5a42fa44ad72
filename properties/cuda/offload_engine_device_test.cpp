// The offload pipeline as a target on a device (cuda/offload_engine.h): the synchronised pipeline is clean under
// every property and computes what its CPU twin does, exactly; the unsynchronised one is found. The same of its fp32
// variants, whose results equal their twin's bit for bit (the kernels round as the twins do). Without a device
// every test skips, saying why.
#include <gtest/gtest.h>

#include <optional>

#include "cuda/device.h"
#include "fuzz/generator.h"
#include "properties/cuda/offload_campaign.h"
#include "properties/cuda/skip_without_device.h"

namespace accumcheck::cuda {
namespace {

// `device` against `twin` on the random scenarios of 200 seeds of `model` that the device runs: the same parameters,
// optimizer state and trace digest. A scenario the twin refuses while running (values the integers cannot hold; in
// fp32, a value that overflows) the device must refuse too, and is not counted. Returns how many were compared.
int compare_with_twin(const sim::Target& device, const sim::Target& twin, models::ModelKind model,
                      sim::ScalarKind scalar) {
  fuzz::GeneratorOptions options;
  options.model = model;
  int compared = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const sim::Scenario s = fuzz::generate_scenario(seed, options);
    if (!device.unsupported(s).empty()) continue;
    std::optional<sim::RunResult> b;
    try {
      b = twin.run(s, sim::RunOptions{.scalar = scalar});
    } catch (const std::exception&) {
      EXPECT_ANY_THROW(device.run(s, sim::RunOptions{.scalar = scalar})) << "seed " << seed;
      continue;
    }
    const sim::RunResult a = device.run(s, sim::RunOptions{.scalar = scalar});
    EXPECT_EQ(a.parameters, b->parameters) << "seed " << seed;
    EXPECT_EQ(a.optimizer_state, b->optimizer_state) << "seed " << seed;
    EXPECT_EQ(a.trace_digest, b->trace_digest) << "seed " << seed;
    ++compared;
  }
  std::printf("%s equals its CPU twin on %d of 200 random %s scenarios (the rest refused by both)\n",
              device.name().c_str(), compared, std::string(models::to_string(model)).c_str());
  return compared;
}

TEST(OffloadEngineDevice, equals_its_cpu_twin_on_random_scenarios_of_every_model) {
  SKIP_WITHOUT_DEVICE();
  register_offload_engines();
  const auto device = sim::make_target("cuda-offload"), twin = sim::make_target("cuda-offload-host-twin");
  for (const models::ModelKind model : {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding})
    EXPECT_GT(compare_with_twin(*device, *twin, model, sim::ScalarKind::rational), 100);
}

TEST(OffloadEngineDevice, the_synchronised_pipeline_is_clean_under_every_property) {
  SKIP_WITHOUT_DEVICE();
  for (const models::ModelKind model : {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
    const fuzz::CampaignReport report = run_offload_campaign("cuda-offload", 400, 20261205, model);
    for (const auto& p : report.pairs) {
      EXPECT_FALSE(p.finding.has_value()) << p.property << ": " << (p.finding ? p.finding->verdict.message : "");
      EXPECT_EQ(p.target_faults, 0u) << p.property << ": " << p.first_fault;
      std::printf("cuda-offload %-6s %-58s %llu trials, %llu could not run\n",
                  std::string(models::to_string(model)).c_str(), p.property.c_str(),
                  static_cast<unsigned long long>(p.trials), static_cast<unsigned long long>(p.cannot_run));
    }
  }
}

TEST(OffloadEngineDevice, the_unsynchronised_pipeline_is_found) {
  SKIP_WITHOUT_DEVICE();
  const fuzz::CampaignReport report = run_offload_campaign("cuda-offload-nosync", 400, 20261205);
  bool found = false;
  for (const auto& p : report.pairs) {
    if (!p.finding) continue;
    found = true;
    std::printf("cuda-offload-nosync fails %s after %llu trials: %s\n", p.property.c_str(),
                static_cast<unsigned long long>(p.trials), p.finding->verdict.message.c_str());
  }
  EXPECT_TRUE(found);
}

TEST(OffloadEngineDevice, the_fp32_pipeline_equals_its_cpu_twin_bit_for_bit_is_clean_and_its_unsynchronised_twin_found) {
  SKIP_WITHOUT_DEVICE();
  register_offload_engines();
  const auto device = sim::make_target("cuda-offload-fp32"), twin = sim::make_target("cuda-offload-fp32-host-twin");
  for (const models::ModelKind model : {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
    EXPECT_GT(compare_with_twin(*device, *twin, model, sim::ScalarKind::fp32), 150);
    const fuzz::CampaignReport clean = run_offload_campaign("cuda-offload-fp32", 300, 21, model);
    for (const auto& p : clean.pairs) {
      EXPECT_FALSE(p.finding.has_value()) << p.property << ": " << (p.finding ? p.finding->verdict.message : "");
      EXPECT_EQ(p.target_faults, 0u) << p.property << ": " << p.first_fault;
    }
  }
  const fuzz::CampaignReport found = run_offload_campaign("cuda-offload-fp32-nosync", 300, 21);
  bool any = false;
  for (const auto& p : found.pairs) any = any || p.finding.has_value();
  EXPECT_TRUE(any);
}

}  // namespace
}  // namespace accumcheck::cuda
