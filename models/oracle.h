// The full-batch oracle: the exact truth every property compares against (docs/oracle.md defines it).
//
// For each optimizer step s with global batch B_s (every sequence of every micro-batch on every rank):
//   1. counts    = count_scope(B_s)                         (window-global normalisation)
//   2. c_i       = sequence_coefficient(aggregation, T_i, counts)
//   3. loss_s    = sum_i c_i sum_t M_it l_it                 (at the parameters before the step)
//   4. grad_s    = dloss_s/dtheta (present only for parameters that took part, never for frozen ones)
//   5. norm_s    = grad_norm(grad_s)                        (before clipping)
//   6. if max_grad_norm: clip grad_s by it
//   7. optimizer_step(optimizer, params, grad_s, state): parameters without a gradient are skipped, or
//      stepped with zeros under OptimizerSpec::missing_gradient_is_zero
// Run it in Rational for the truth; any other scalar gives the same algorithm with that type's rounding.
#pragma once

#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "models/clipping.h"
#include "models/loss_aggregation.h"
#include "models/model.h"
#include "models/optimizer.h"

namespace accumcheck::models {

// Everything about training that is not data: the model, the objective, the update rule.
struct TrainingSpec {
  ModelSpec model;
  AggregationSpec aggregation;
  OptimizerSpec optimizer;
  std::optional<Rational> max_grad_norm;  // global-norm clipping when set

  friend bool operator==(const TrainingSpec&, const TrainingSpec&) = default;
};

// Throws std::invalid_argument naming the first problem.
void validate(const TrainingSpec& spec);

template <class S>
using StepBatch = std::vector<Sequence<S>>;

template <class S>
struct OracleStep {
  S loss;
  Gradient<S> gradient;  // full-batch gradient before clipping
  S grad_norm;           // its global norm
  S clip_coefficient;    // 1 when not clipped
  Gradient<S> applied_gradient;  // what the optimizer received (after clipping)
};

template <class S>
struct OracleResult {
  std::vector<OracleStep<S>> steps;
  Parameters<S> parameters;  // after the last step
  OptimizerState<S> state;   // after the last step
};

// The gradient of the full-batch objective of one step, without updating anything.
template <class S>
Gradient<S> full_batch_gradient(const TrainingSpec& spec, const Parameters<S>& params,
                                std::span<const Sequence<S>> batch) {
  const NormalisationCounts counts = count_scope(batch);
  const std::vector<S> coefficients = sequence_coefficients(spec.aggregation, batch, counts);
  Gradient<S> grad = zero_gradient<S>(spec.model);
  accumulate_gradient(spec.model, params, batch, std::span<const S>(coefficients), grad);
  return grad;
}

// How much of the truth a caller needs. applied_gradients fills each step's applied_gradient and, when clipping,
// its grad_norm and clip_coefficient; it computes no loss, no norm without clipping and no pre-clip gradient, skips
// the last step's optimizer update, and leaves `parameters` and `state` empty (no tensors), so that a caller that
// reads them by mistake fails on the shapes instead of comparing stale values. For property 1, which needs only
// the applied gradients; the training before the last step is the same as everything's. trajectory fills what
// applied_gradients fills and, after every update, `parameters` and `state`: property 9's final values, and
// property 1's with them when a trial shares one oracle (properties/trial_oracle.h). It too computes no loss, no
// norm without clipping and no pre-clip gradient (`gradient` is left empty).
enum class OracleScope { everything, applied_gradients, trajectory };

// Validates the spec, parameters and every sequence (std::invalid_argument on bad input), then trains.
// engine_accumulation_steps G: for a float run's bound (S a models::FloatBound), every engine scales each loss by
// 1/G, which a float target multiplies in as a rounded reciprocal (sim/rank_gradients.h) or divides by: operations
// outside the full-batch formula. With G > 1 each coefficient is computed as (c G) (1/G), 1/G an input, so that
// their rounding is charged to the bound; the exact value is c either way, and a power of two G charges nothing.
// `initial` by value: a caller's temporary (an exact run's converted parameters) becomes the result's parameters
// without a copy.
template <class S>
OracleResult<S> run_oracle(const TrainingSpec& spec, Parameters<S> initial,
                           std::span<const StepBatch<S>> steps, OracleScope scope = OracleScope::everything,
                           int engine_accumulation_steps = 1) {
  validate(spec);
  validate_parameters(spec.model, initial);
  for (const auto& batch : steps)
    for (const auto& seq : batch) validate_sequence(spec.model, seq);

  const bool everything = scope == OracleScope::everything;
  const bool last_update = scope != OracleScope::applied_gradients;  // and the final parameters and state
  // The optimizer state is built only where an update runs: applied_gradients skips the last one, so a one-step
  // run under it (property 1's usual case) never reads a state.
  const bool updates = last_update || steps.size() > 1;
  OracleResult<S> result{{}, std::move(initial), updates ? initial_optimizer_state<S>(spec.model) : OptimizerState<S>{}};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::span<const Sequence<S>> view(steps[i]);
    const NormalisationCounts counts = count_scope(view);
    std::vector<S> coefficients = sequence_coefficients(spec.aggregation, view, counts);
    if (engine_accumulation_steps > 1) {
      const S g = from_rational<S>(Rational(static_cast<long long>(engine_accumulation_steps)));
      const S inverse = from_rational<S>(Rational(1LL, static_cast<long long>(engine_accumulation_steps)));
      for (S& c : coefficients) c = c * g * inverse;
    }
    OracleStep<S> step{everything ? weighted_loss(spec.model, result.parameters, view, std::span<const S>(coefficients)) : S(0),
                       zero_gradient<S>(spec.model), S(0), S(1), {}};
    accumulate_gradient(spec.model, result.parameters, view, std::span<const S>(coefficients), step.gradient);
    if (spec.max_grad_norm) {
      if (everything) step.applied_gradient = step.gradient;  // the pre-clip gradient is kept only there
      else step.applied_gradient = std::move(step.gradient);
      const ClipResult<S> clip = clip_grad_norm(step.applied_gradient, *spec.max_grad_norm);
      step.grad_norm = clip.total_norm;
      step.clip_coefficient = clip.clip_coefficient;
    } else if (everything) {
      step.grad_norm = grad_norm(step.gradient);
      step.applied_gradient = step.gradient;
    } else {
      step.applied_gradient = std::move(step.gradient);
    }
    if (last_update || i + 1 < steps.size())
      optimizer_step(spec.optimizer, result.parameters, step.applied_gradient, result.state, frozen_mask(spec.model));
    if (!everything) step.gradient = {};
    result.steps.push_back(std::move(step));
  }
  if (!last_update) {
    result.parameters = {};
    result.state = {};
  }
  return result;
}

}  // namespace accumcheck::models
