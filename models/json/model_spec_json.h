// JSON forms of the exact inputs of a training run, so that an external implementation (or a finding file)
// can rebuild the same model, parameters and data bit for bit.
//
// Rationals are strings "n" or "n/d" (never JSON numbers, which would round). Matrices are arrays of rows.
//   ModelSpec:     {"kind": "linear", "input_size": 4, "output_size": 2, "hidden_size": 0, "vocab_size": 0,
//                   "embed_size": 0, "expert_count": 1, "frozen": ["bias"]}
//   TrainingSpec:  {"model": ModelSpec, "aggregation": {"mode": "token-mean", "norm_constant": "1"},
//                   "optimizer": {"kind": "adamw", "lr": "1/10", ...}, "max_grad_norm": "1" | null}
//   Parameters:    {"weight": [["1/2", "0"], ...], "bias": [["0"], ...]}   (keyed by parameter name)
//   Sequence:      {"features": [[...], ...], "token_ids": [...], "expert_index": [...],
//                   "targets": [[...], ...], "loss_mask": [1, 0, ...]}
// Readers validate as they go and throw std::invalid_argument naming the JSON path of the first problem.
#pragma once

#include <nlohmann/json.hpp>

#include "models/oracle.h"
#include "models/rational.h"

namespace accumcheck::models::json {

nlohmann::json to_json(const Rational& value);
Rational rational_from_json(const nlohmann::json& j, const std::string& path);

nlohmann::json to_json(const ModelSpec& spec);
ModelSpec model_spec_from_json(const nlohmann::json& j);

nlohmann::json to_json(const TrainingSpec& spec);
TrainingSpec training_spec_from_json(const nlohmann::json& j);

nlohmann::json to_json(const ModelSpec& spec, const Parameters<Rational>& params);
Parameters<Rational> parameters_from_json(const ModelSpec& spec, const nlohmann::json& j);

nlohmann::json to_json(const Sequence<Rational>& seq);
Sequence<Rational> sequence_from_json(const ModelSpec& spec, const nlohmann::json& j, const std::string& path);

}  // namespace accumcheck::models::json
