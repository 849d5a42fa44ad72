// BackwardMemo: one trial's memo of the models' backward, shared by the engine runs of that trial.
//
// A default campaign runs the engine several times a trial: on the trial's own scenario, and on the variants its
// properties build from it (offload or partitioning toggled, micro-batches rotated, a checkpoint resumed, the
// boundary made automatic). A variant changes how an engine accumulates, reduces, copies and steps, not what one
// rank's backward receives: the same parameters, micro-batch and coefficients. In exact arithmetic that backward
// (models::accumulate_gradient from zero) is a pure function of those inputs, so its result can be handed on.
//
// - Sound: a stored call answers only a call whose every input equals its own, compared in full (the model spec,
//   every parameter value, every field of every sequence, every coefficient). The hash only finds candidates. A
//   hit therefore gives, value for value, the gradient the call would compute.
// - What it leaves alone: the engines' own work (their reductions, copies, partitions, loss scales and optimizer
//   steps, where the bugs the properties look for live) runs as before, and so does the oracle, which computes its
//   own full-batch gradients and never reads the memo.
// - Scope: exact runs in FastRational, on the thread that installed it (sim/exact_memos.h, ExactMemoScope); a call
//   with no memo installed, or in another scalar, computes as always.
// - Thread-safe: a trial's checks may run on several threads. Bounded: after kStoredValuesMax stored values it
//   stores nothing more and only answers from what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "models/fast_rational.h"
#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::sim {

class BackwardMemo {
 public:
  using S = models::FastRational;
  struct Counts {
    std::uint64_t hits = 0;    // calls answered from a stored one
    std::uint64_t misses = 0;  // calls computed (and stored while under the bound)
  };
  // The most values (parameters, sequence data, coefficients and gradients) one memo keeps.
  static constexpr std::size_t kStoredValuesMax = std::size_t{1} << 19;

  // grad = the gradient of these inputs: copied from an equal stored call, or computed by `compute` (which writes
  // the whole of grad, shaped for the spec) and stored.
  void reuse_or_compute(const models::ModelSpec& spec, const models::Parameters<S>& params,
                        const std::vector<models::Sequence<S>>& sequences, const std::vector<S>& coefficients,
                        models::Gradient<S>& grad, const std::function<void(models::Gradient<S>&)>& compute);
  Counts counts() const;

 private:
  struct Entry {
    models::ModelSpec spec;
    std::vector<models::Matrix<S>> params;
    std::vector<models::Sequence<S>> sequences;
    std::vector<S> coefficients;
    models::Gradient<S> gradient;
  };
  mutable std::mutex mutex_;
  std::unordered_multimap<std::uint64_t, std::shared_ptr<const Entry>> entries_;
  std::size_t stored_values_ = 0;
  Counts counts_;
};

}  // namespace accumcheck::sim
