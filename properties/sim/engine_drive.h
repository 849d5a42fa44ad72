// drive(): an engine driven straight through a scenario, for tests that compare two engines' runs without a
// target around them (a reset engine against a new one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "sim/convert.h"
#include "sim/engine.h"
#include "sim/scenario.h"

namespace accumcheck::sim {

// What an engine gives when driven through a scenario's micro-batches, every sequence with coefficient 1 (the
// engine does not care where its coefficients come from), stopped after `micro_batch_limit` of them.
template <class S>
struct Driven {
  std::vector<std::optional<AppliedStep<S>>> applied;
  models::Parameters<S> parameters;
  models::OptimizerState<S> state;
  std::uint64_t digest = 0, events = 0;
  std::vector<std::string> lines;
  std::string error;  // what the engine threw, if it threw
};

template <class S>
Driven<S> drive(Engine<S>& engine, const Scenario& s, std::size_t micro_batch_limit = SIZE_MAX) {
  Driven<S> out;
  std::size_t done = 0;
  try {
    for (const StepPlan& plan : s.steps) {
      for (std::size_t k = 0; k < plan.micro_batches.size(); ++k) {
        if (done++ == micro_batch_limit) return out;
        RankSequences<S> data;
        RankCoefficients<S> coefficients;
        for (const auto& rank : plan.micro_batches[k].rank_sequences) {
          data.emplace_back();
          for (const auto& seq : rank) data.back().push_back(to_scalar<S>(seq));
          coefficients.emplace_back(rank.size(), S(1));
        }
        if (s.engine.boundary == BoundaryMode::manual) engine.set_gradient_accumulation_boundary(k + 1 == plan.micro_batches.size());
        engine.backward(data, coefficients);
        if (s.engine.step_after_every_backward) engine.step();
      }
      if (!s.engine.step_after_every_backward) engine.step();
      out.applied.push_back(engine.take_applied_step());
    }
  } catch (const std::exception& e) {  // a modelled release's crash or refusal, which both engines must give alike
    out.error = e.what();
    return out;
  }
  out.parameters = engine.parameters();
  out.state = engine.optimizer_state();
  out.digest = engine.trace().digest();
  out.events = engine.trace().event_count();
  out.lines = engine.trace().lines();
  return out;
}

// The micro-batches drive() takes an engine through in `s`; and where a reset property stops it before resetting it:
// after the whole run half the time, else before one of them.
inline std::size_t drive_length(const Scenario& s) {
  std::size_t micro_batches = 0;
  for (const auto& plan : s.steps) micro_batches += plan.micro_batches.size();
  return micro_batches;
}

inline std::size_t gen_reset_point(const Scenario& s) {
  const std::size_t micro_batches = drive_length(s);
  return *rc::gen::arbitrary<bool>() ? micro_batches : *rc::gen::inRange<std::size_t>(0, micro_batches);
}

// Both runs alike: the same applied steps, final state, trace and error.
template <class S>
void assert_same_run(const Driven<S>& a, const Driven<S>& b) {
  RC_ASSERT(a.error == b.error);
  RC_ASSERT(a.applied.size() == b.applied.size());
  for (std::size_t i = 0; i < a.applied.size(); ++i) {
    RC_ASSERT(a.applied[i].has_value() == b.applied[i].has_value());
    if (!a.applied[i]) continue;
    RC_ASSERT(a.applied[i]->gradient == b.applied[i]->gradient);
    RC_ASSERT(a.applied[i]->grad_norm == b.applied[i]->grad_norm);
    RC_ASSERT(a.applied[i]->clip_coefficient == b.applied[i]->clip_coefficient);
  }
  RC_ASSERT(a.parameters == b.parameters);
  RC_ASSERT(a.state == b.state);
  RC_ASSERT(a.digest == b.digest);
  RC_ASSERT(a.events == b.events);
  RC_ASSERT(a.lines == b.lines);
}

}  // namespace accumcheck::sim
