// The catalogue's scalar world for hand traces: one parameter w (bias frozen), x = 1, and a micro-batch whose
// single one-token sequence has target -c, so that at w = 0 its gradient in w is c (times the coefficient).
#pragma once

#include <vector>

#include "sim/scenario.h"

namespace accumcheck::properties {

inline models::Sequence<models::Rational> scalar_tokens(const std::vector<models::Rational>& targets) {
  models::Sequence<models::Rational> seq;
  const auto T = static_cast<Eigen::Index>(targets.size());
  seq.features = models::Matrix<models::Rational>::Constant(T, 1, models::Rational(1));
  seq.targets = models::Matrix<models::Rational>(T, 1);
  for (Eigen::Index t = 0; t < T; ++t) seq.targets(t, 0) = targets[static_cast<std::size_t>(t)];
  seq.loss_mask.assign(targets.size(), 1);
  return seq;
}

// A one-token sequence for the 2-input, 1-output linear model (features (1, 1), target 0).
inline models::Sequence<models::Rational> scalar_tokens_2d() {
  models::Sequence<models::Rational> seq;
  seq.features = models::Matrix<models::Rational>::Constant(1, 2, models::Rational(1));
  seq.targets = models::Matrix<models::Rational>::Zero(1, 1);
  seq.loss_mask = {1};
  return seq;
}

// SGD with lr = 0 keeps w = 0, so every step's gradient is exactly sum_k c_k / G and leakage between steps
// shows as a wrong second step. token-mean with one one-token sequence per micro-batch: c_i = 1 / (window size),
// a mode every framework layer implements.
inline sim::Scenario scalar_scenario(const std::vector<std::vector<long long>>& steps_c, sim::EngineConfig engine) {
  sim::Scenario s;
  s.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  s.training.model.frozen = {"bias"};
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  s.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = models::Rational(0)};
  s.engine = engine;
  s.initial_parameters = models::zero_parameters<models::Rational>(s.training.model);
  for (const auto& c : steps_c) {
    sim::StepPlan plan;
    for (long long ck : c) plan.micro_batches.push_back(sim::MicroBatch{{{scalar_tokens({models::Rational(-ck)})}}});
    s.steps.push_back(std::move(plan));
  }
  return s;
}

}  // namespace accumcheck::properties
