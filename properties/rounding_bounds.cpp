// Rounding bounds from the oracle run in models::FloatBound.
#include "properties/rounding_bounds.h"

#include <algorithm>
#include <span>

#include "models/float_bound.h"
#include "sim/convert.h"

namespace accumcheck::properties {

using models::Rational;

bool compared_within_bounds(sim::ScalarKind scalar) {
  return scalar == sim::ScalarKind::fp32 || scalar == sim::ScalarKind::fp64;
}

namespace {

template <models::FloatFormatKind F>
std::variant<RunBounds, std::string> bounds_in(const models::TrainingSpec& training, const sim::Scenario& scenario) {
  using B = models::FloatBound<F>;
  try {
    const auto batches = sim::oracle_batches<B>(scenario, [](const models::Sequence<Rational>& seq) {
      return models::to_float_bound<F>(seq);
    });
    // The engines' 1/G, charged to each coefficient (models/oracle.h).
    const auto oracle = models::run_oracle(training, models::to_float_bound<F>(scenario.initial_parameters),
                                           std::span<const models::StepBatch<B>>(batches), models::OracleScope::everything,
                                           scenario.engine.accumulation_steps);
    RunBounds b;
    for (std::size_t s = 0; s < oracle.steps.size(); ++s) {
      const std::string step = "step " + std::to_string(s);
      b.step_gradient.push_back(sim::bounds_of<F>(oracle.steps[s].applied_gradient.tensors, step + " / gradient"));
      b.step_grad_norm.push_back(sim::grad_norm_bound<F>(oracle.steps[s].grad_norm, oracle.steps[s].gradient, step + " / grad_norm"));
      b.step_clip_coefficient.push_back(sim::bound_of(oracle.steps[s].clip_coefficient, step + " / clip_coefficient"));
    }
    b.parameters = sim::bounds_of<F>(oracle.parameters.tensors, "final / parameters");
    b.first_moment = sim::bounds_of<F>(oracle.state.first_moment, "final / first_moment");
    b.second_moment = sim::bounds_of<F>(oracle.state.second_moment, "final / second_moment");
    return b;
  } catch (const models::AmbiguousComparison& e) {
    return sim::ambiguous_comparison_reason(e);
  } catch (const sim::NoRoundingBound& e) {
    return e.what();
  }
}

}  // namespace

std::variant<RunBounds, std::string> rounding_bounds(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                     sim::ScalarKind scalar) {
  if (scenario.engine.loss_scaler)
    return std::string("no rounding bound: loss scaling skips steps on overflow, which the oracle does not model");
  // 16-bit storage rounds more than the run's scalar; charging every operation the 16-bit unit roundoff is an
  // over-approximation (mixed precision does some of them in fp32), so the bound stays sound.
  if (scenario.engine.precision == sim::Precision::bf16) return bounds_in<models::FloatFormatKind::bf16>(training, scenario);
  if (scenario.engine.precision == sim::Precision::fp16) return bounds_in<models::FloatFormatKind::fp16>(training, scenario);
  switch (scalar) {
    case sim::ScalarKind::fp32: return bounds_in<models::FloatFormatKind::fp32>(training, scenario);
    case sim::ScalarKind::fp64: return bounds_in<models::FloatFormatKind::fp64>(training, scenario);
    default: break;
  }
  ACCUMCHECK_ASSERT_MSG(false, "rounding_bounds needs fp32 or fp64");
  return std::string();
}

}  // namespace accumcheck::properties
