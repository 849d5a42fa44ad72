// LossNormaliser: how a training framework turns the loss aggregation mode into each rank's micro-batch loss.
//
// The engine underneath multiplies every micro-batch loss by 1/G (configured G) and averages gradients over
// R ranks, so a framework that wants the window-global objective J = sum_i c_i sum_t M l (c_i from the
// window's counts, models/loss_aggregation.h) must hand each rank's micro-batch the coefficients G R c_i.
// The frameworks we model differ only in the scope of the counts and in that compensation:
//
//   reference                 window-global counts, times G R                  (correct)
//   openrlhf@0.10.2           counts of this rank's micro-batch, no compensation (PR #923 .. v0.10.2)
//   openrlhf@0.10.3           counts of this micro-batch over all ranks, times R (global per micro-batch)
//   openrlhf@0.10.4           window-global counts, times G R                  (PR #1249)
//   transformers@4.45         counts of this rank's micro-batch, no compensation (mean CE per micro-batch)
//   transformers@4.46         counts of this rank's window, times G            (num_items_in_batch per rank;
//                             accelerate, told no G, divides nothing, which times G models over an engine that
//                             divides; ranks still averaged: per-rank normalisation). Over DeepSpeed: no
//                             compensation, DeepSpeed's own 1/G stays (4.46.0 - 4.48.x, measured on 4.46.3)
//   transformers@4.49         the same counts, times G over every engine       (PR #35808: scale_wrt_gas=False
//                             turns DeepSpeed's 1/G off under DeepSpeed; average_tokens_across_devices off by
//                             default: still per rank on several ranks, 4.49.0 - 4.53.x)
//   transformers@4.54         window-global counts, times G R                  (PR #39395: the flag on by default;
//                             the count gathered over ranks, the loss times the process count)
// docs/targets.md gives the upstream files and releases each follows.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/fast_rational.h"
#include "models/loss_aggregation.h"
#include "sim/scenario.h"

namespace accumcheck::sim {

// coefficients[k][r][i]: micro-batch k of the window, rank r, sequence i of that rank.
using WindowCoefficients = std::vector<std::vector<std::vector<Rational>>>;
// The same in FastRational, for an exact run (ComposedTarget::run_as): each micro-batch's lists are what the
// engine's backward reads.
using FastWindowCoefficients = std::vector<std::vector<std::vector<models::FastRational>>>;

class LossNormaliser {
 public:
  virtual ~LossNormaliser() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual WindowCoefficients coefficients(const StepPlan& window, const EngineConfig& engine,
                                          const models::AggregationSpec& aggregation) const = 0;
  // coefficients() in FastRational, written over `out`, whose lists keep their storage (a run keeps one `out` for
  // all its windows). This default converts coefficients(); ScopedNormaliser computes them without the Rational
  // lists.
  virtual void fast_coefficients_into(const StepPlan& window, const EngineConfig& engine,
                                      const models::AggregationSpec& aggregation, FastWindowCoefficients& out) const;
  // Empty when the framework implements this aggregation mode, else why not. A framework is modelled only for
  // the modes it has (OpenRLHF: token and sequence means; the Trainer: the token mean), never extrapolated.
  virtual std::string unsupported(const models::AggregationSpec&) const { return {}; }
  // The layer as it runs over a DeepSpeed engine model, for a framework whose compensation of the engine's 1/G
  // depends on it (the transformers Trainer, whose accelerate hands the loss to DeepSpeed's engine.backward);
  // nullptr: the same layer over every engine. ComposedTarget picks it (sim/target.cpp).
  virtual std::shared_ptr<const LossNormaliser> under_deepspeed() const { return nullptr; }
};

enum class NormalisationScope {
  window,                   // every micro-batch of the window on every rank
  micro_batch_all_ranks,    // this micro-batch, every rank
  micro_batch_this_rank,    // this micro-batch, this rank
  window_this_rank,         // every micro-batch of the window, this rank
};

// A normaliser defined by a scope and a compensation factor G^a R^b applied to every coefficient.
class ScopedNormaliser final : public LossNormaliser {
 public:
  // modes: the aggregation modes the framework implements; empty means every mode.
  ScopedNormaliser(std::string_view name, std::string_view description, NormalisationScope scope,
                   bool times_accumulation_steps, bool times_rank_count, std::vector<models::LossAggregation> modes = {},
                   std::shared_ptr<const LossNormaliser> under_deepspeed = nullptr)
      : name_(name), description_(description), scope_(scope), times_g_(times_accumulation_steps), times_r_(times_rank_count),
        modes_(std::move(modes)), under_deepspeed_(std::move(under_deepspeed)) {}
  std::string unsupported(const models::AggregationSpec& aggregation) const override;

  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  std::shared_ptr<const LossNormaliser> under_deepspeed() const override { return under_deepspeed_; }
  WindowCoefficients coefficients(const StepPlan& window, const EngineConfig& engine,
                                  const models::AggregationSpec& aggregation) const override;
  void fast_coefficients_into(const StepPlan& window, const EngineConfig& engine,
                              const models::AggregationSpec& aggregation, FastWindowCoefficients& out) const override;

 private:
  // Both of the above: `out` resized to the window and each coefficient written as a C.
  template <class C>
  void fill(const StepPlan& window, const EngineConfig& engine, const models::AggregationSpec& aggregation,
            std::vector<std::vector<std::vector<C>>>& out) const;
  std::string_view name_, description_;
  NormalisationScope scope_;
  bool times_g_, times_r_;
  std::vector<models::LossAggregation> modes_;
  std::shared_ptr<const LossNormaliser> under_deepspeed_;
};

// The built-in framework layers, by name ("reference", "openrlhf@0.10.2", ...).
const std::vector<std::shared_ptr<const LossNormaliser>>& builtin_normalisers();
std::shared_ptr<const LossNormaliser> find_normaliser(std::string_view name);  // nullptr if unknown

}  // namespace accumcheck::sim
