// Engine<S>: the training-engine API as real frameworks expose it, for every rank of a data-parallel group at
// once, in scalar type S. The reference engine and every behavioural model of a framework release implement
// it; a user plugs in their own engine the same way (docs/targets.md section 10 states this contract in full).
//
// Contract, following DeepSpeed's engine (deepspeed/runtime/engine.py):
//   backward(data, coefficients)  one micro-batch on every rank. Rank r's loss is
//                                  sum_i coefficients[r][i] sum_t M_it l_it over its sequences; the engine
//                                  multiplies it by 1/G (G as configured, also on a window shorter than G)
//                                  and averages gradients over the R ranks. The framework layer has already
//                                  multiplied every coefficient by G and R to compensate (sim/loss_normaliser.h).
//   set_gradient_accumulation_boundary(b)   caller override of the boundary, sticky until set again.
//   step()                         called once per micro-step. The boundary is the caller's override when set,
//                                  else (micro_steps + 1) % G == 0 with micro_steps counting step() calls,
//                                  not backward() calls; step() at a boundary reduces, clips, updates and zeroes
//                                  gradients, elsewhere it only advances micro_steps (DeepSpeed's step() is
//                                  called every micro-step and acts only at boundaries). register_engine_model
//                                  checks this rule (sim/engine_contract.h).
//   zero_grad()                    clears accumulated gradients.
//   save_checkpoint / load_checkpoint   between steps: parameters, optimizer state, engine counters, and in
//                                  engine_state whatever else the engine needs to resume; the driver hands
//                                  the checkpoint to a freshly created engine unchanged.
//   take_applied_step()            the update applied by the most recent effective step() not yet taken:
//                                  the gradient the optimizer received, the norm the engine reported;
//                                  give_back() returns it, read, for its storage to be reused (a hint).
//   parameters / optimizer_state   the current values (for ZeRO, gathered over the ranks' partitions).
//   trace()                        what the engine did, for humans and determinism: its digest enters the
//                                  result (two runs of one scenario must give the same digest), its lines are
//                                  kept only when asked (keep_trace_lines). Properties never read it.
// The missing-gradient policy is the engine model's (EngineModel::optimizer_steps_missing_gradients_as_zero);
// the scenario an engine is created with carries the same value in training.optimizer.missing_gradient_is_zero.
#pragma once

#include <any>
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
  // False where the engine did not take the norm (after skip_updates(), where no clipping needed it): grad_norm
  // is then no value at all, and the run reports no norm (ResultCoverage::grad_norm).
  bool grad_norm_taken = true;
};

template <class S>
struct EngineCheckpoint {
  models::Parameters<S> parameters;
  models::OptimizerState<S> optimizer_state;
  long micro_steps = 0;
  long global_steps = 0;
  // Anything else the engine needs to resume exactly (a loss scaler's scale, a persistent buffer), in a type
  // of the engine's own; empty for engines with no more state. Only the engine that saved it reads it.
  std::any engine_state;
};

template <class S>
class Engine {
 public:
  virtual ~Engine() = default;
  // `data` lives as long as the run; `coefficients` only for the call (the driver refills it for the next one):
  // an engine keeps a copy of what it needs later.
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
  // From now on step() records the applied step as ever but may leave the parameters and the optimizer state
  // as they were, and the norm untaken where no clipping needs it (AppliedStep::grad_norm_taken): the caller
  // reads nothing after this window but its applied gradient and clip coefficient (RunOptions::
  // applied_gradients_only). A hint: an engine that ignores it is still correct, only slower.
  virtual void skip_updates() {}
  // Hands back a step taken by take_applied_step() once the caller has read it, so that a later step() may write
  // its gradient into those tensors instead of making new ones (ComposedTarget's runs do: making a step's gradient
  // was about 1% of a trial at the peer's sizes, bench/README.md). A hint: an engine that ignores it is still
  // correct, only slower.
  virtual void give_back(AppliedStep<S>&& taken) { static_cast<void>(taken); }
};

}  // namespace accumcheck::sim
