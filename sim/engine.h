// Engine<S>: the training-engine API as real frameworks expose it, for every rank of a data-parallel group at
// once, in scalar type S. The reference engine and every behavioural model of a framework release implement
// it; a user plugs in their own engine the same way (docs/targets.md, "Plugging in your own engine").
//
// Contract, following DeepSpeed's engine (deepspeed/runtime/engine.py):
//   backward(data, coefficients)  one micro-batch on every rank. Rank r's loss is
//                                  sum_i coefficients[r][i] sum_t M_it l_it over its sequences; the engine
//                                  multiplies it by 1/G (configured G) and averages gradients over ranks.
//   set_gradient_accumulation_boundary(b)   caller override of the boundary, sticky until set again.
//   step()                         at a boundary: reduce, clip, update, zero gradients; otherwise it only
//                                  advances the micro-step counter (DeepSpeed's step() is called every
//                                  micro-step and acts only at boundaries).
//   zero_grad()                    clears accumulated gradients.
//   save_checkpoint / load_checkpoint   between steps: parameters, optimizer state, engine counters.
//   take_applied_step()            the update applied by the most recent effective step() not yet taken:
//                                  the gradient the optimizer received, the norm the engine reported.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "models/clipping.h"
#include "models/optimizer.h"
#include "models/tensor.h"
#include "sim/trace.h"

namespace accumcheck::sim {

template <class S>
using RankSequences = std::vector<std::vector<models::Sequence<S>>>;  // [R][sequences]
template <class S>
using RankCoefficients = std::vector<std::vector<S>>;  // [R][sequence coefficient]

template <class S>
struct AppliedStep {
  models::Gradient<S> gradient;  // what the optimizer consumed: reduced over ranks, unscaled, clipped
  S grad_norm;                   // the norm the engine reports (before clipping)
  S clip_coefficient;            // 1 when not clipped
};

template <class S>
struct EngineCheckpoint {
  models::Parameters<S> parameters;
  models::OptimizerState<S> optimizer_state;
  long micro_steps = 0;
  long global_steps = 0;
};

template <class S>
class Engine {
 public:
  virtual ~Engine() = default;
  virtual void backward(const RankSequences<S>& data, const RankCoefficients<S>& coefficients) = 0;
  virtual void set_gradient_accumulation_boundary(bool is_boundary) = 0;
  virtual void step() = 0;
  virtual void zero_grad() = 0;
  virtual EngineCheckpoint<S> save_checkpoint() = 0;
  virtual void load_checkpoint(const EngineCheckpoint<S>& checkpoint) = 0;
  virtual std::optional<AppliedStep<S>> take_applied_step() = 0;
  virtual models::Parameters<S> parameters() const = 0;
  virtual models::OptimizerState<S> optimizer_state() const = 0;
  virtual const Trace& trace() const = 0;
};

}  // namespace accumcheck::sim
