// What the offload engine's tests share (offload_engine_test.cpp on the CPU, offload_engine_device_test.cpp on a
// device): the engines registered once, and a campaign of every property on the linear model.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "cuda/offload_engine.h"
#include "fuzz/campaign.h"
#include "sim/target.h"

namespace accumcheck::cuda {

// The registry is process-wide and gtest runs every test in one process: register once.
inline void register_offload_engines() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const auto& engine : offload_engine_models()) sim::register_engine_model(engine);
  });
}

// `trials` trials of all nine properties on `target`, one model (the linear one unless said), exact fast-rational
// runs, two jobs.
inline fuzz::CampaignReport run_offload_campaign(const std::string& target, std::uint64_t trials, std::uint64_t seed,
                                                 models::ModelKind model = models::ModelKind::linear) {
  register_offload_engines();
  fuzz::CampaignConfig config;
  config.targets = {target};
  config.seed = seed;
  config.trials = trials;
  config.jobs = 2;
  config.generator.model = model;
  config.shrink_budget = 500;
  return fuzz::run_campaign(config);
}

}  // namespace accumcheck::cuda
