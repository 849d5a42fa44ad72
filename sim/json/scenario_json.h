// The JSON form of a scenario: exact, complete, and readable by a script in any language (numbers that could
// round are strings: rationals as "n/d", the 64-bit schedule seed as a decimal string).
//   {"training": TrainingSpec (models/json), "engine": {...}, "initial_parameters": {...},
//    "steps": [[[ [sequence, ...] (rank 0), [...] (rank 1) ] (micro-batch 0), ...] (step 0), ...],
//    "checkpoint_after_step": null | s, "schedule_seed": "123"}
// docs/fuzzing.md documents every field. scenario_from_json validates as it reads and throws
// std::invalid_argument naming the JSON path of the first problem.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/scenario.h"

namespace accumcheck::sim {

nlohmann::json to_json(const sim::EngineConfig& engine);
sim::EngineConfig engine_config_from_json(const nlohmann::json& j);

nlohmann::json to_json(const sim::Scenario& scenario);
sim::Scenario scenario_from_json(const nlohmann::json& j);

}  // namespace accumcheck::sim
