// The catalogue's smallest trigger as a Finding, shared by the explain and reproducer tests and by the
// generator of the exported GoogleTest: deepspeed@0.16.0 (band B1), ZeRO-2 with offload, G = 3, one rank,
// the scalar model (bias frozen), seq-mean-token-sum, SGD with lr 0, one one-token sequence per micro-batch with
// targets -1, -10, -100 in step 0 (and -1000, -10000, -100000 in step 1, so that leakage would show).
// Correct step-0 gradient 37 = 111/3; the band-B model gives 101/3 (micro-batch 1 dropped).
#pragma once

#include <stdexcept>
#include <string>

#include "fuzz/campaign.h"
#include "properties/sim/scalar_catalogue.h"

namespace accumcheck::properties {

inline fuzz::Finding catalogue_finding(const std::string& property_name) {
  const auto target = sim::make_target("deepspeed@0.16.0");
  const Property* property = find_property(property_name);
  if (!property) throw std::invalid_argument("unknown property " + property_name);
  const sim::Scenario scenario = scalar_scenario({{1, 10, 100}, {1000, 10000, 100000}},
                                                 sim::EngineConfig{.rank_count = 1, .accumulation_steps = 3, .zero_stage = 2, .offload = true});
  // A shrink budget of 0 keeps the catalogue scenario exactly as written (the shrinker would move the targets
  // toward 0 and 1, losing the powers of ten).
  return fuzz::make_finding(*target, *property, scenario, sim::ScalarKind::fast_rational, /*campaign_seed=*/1,
                            /*trial=*/17, /*trial_seed=*/42, /*shrink_budget=*/0);
}

}  // namespace accumcheck::properties
