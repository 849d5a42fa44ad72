// UpdateMemo: one trial's memo of the optimizer's elementwise update, shared by the engine runs of that trial.
//
// The variants a trial's properties run (offload or partitioning toggled, micro-batches rotated or split anew, a
// checkpoint resumed) reach the same accumulated gradient in exact arithmetic, so each element's update,
// models::update_element, gets the same inputs as in the trial's own run. In FastRational that update is thousands of
// instructions an element (GMP with a gcd per operation, Adam's root); a stored one is a lookup.
//
// - Element by element, never a whole step: the engines still walk their own partitions, owners and slices, where a
//   partitioning bug would skip or double an element, and only the arithmetic of one element is handed on.
// - Sound: an element is answered only from a stored one whose inputs are all equal: the optimizer spec and the
//   step's constants (compared in full once a step, then by the id they were interned under), the parameter, its
//   gradient and both moments. A hash picks the candidates (sim/memo_hash.h).
// - Scope, threads and bound as BackwardMemo's: exact runs in FastRational inside an ExactMemoScope
//   (sim/exact_memos.h); a mutex, as a trial's checks run on several threads; kEntriesMax entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "models/fast_rational.h"
#include "models/optimizer.h"

namespace accumcheck::sim {

class UpdateMemo {
 public:
  using S = models::FastRational;
  struct Counts {
    std::uint64_t hits = 0;    // elements answered from a stored one
    std::uint64_t misses = 0;  // elements computed (and stored while under the bound)
  };
  static constexpr std::size_t kEntriesMax = std::size_t{1} << 17;

  // An id for (spec, k), the same for equal pairs.
  std::size_t intern(const models::OptimizerSpec& spec, const models::StepConstants<S>& k);
  // models::update_element(spec, k, theta, g, first, second), with (spec, k) interned as `id`.
  void update(std::size_t id, const models::OptimizerSpec& spec, const models::StepConstants<S>& k, S& theta,
              const S& g, S& first, S& second);
  Counts counts() const;

 private:
  struct Constants {
    models::OptimizerSpec spec;
    models::StepConstants<S> k;
  };
  struct Entry {
    std::size_t id;
    S theta, g, first, second;              // the inputs
    S theta_out, first_out, second_out;     // what the update left
  };
  mutable std::mutex mutex_;
  std::vector<Constants> constants_;
  std::unordered_multimap<std::uint64_t, Entry> entries_;
  Counts counts_;
};

// One element's update for one (spec, constants): through the current trial's UpdateMemo in an exact run inside an
// ExactMemoScope, else models::update_element itself. Made once a parameter a step, called once an element.
template <class S>
class ElementUpdate {
 public:
  ElementUpdate(const models::OptimizerSpec& spec, const models::StepConstants<S>& k);
  void operator()(S& theta, const S& g, S& first, S& second) const;

 private:
  const models::OptimizerSpec* spec_;
  const models::StepConstants<S>* k_;
  UpdateMemo* memo_ = nullptr;
  std::size_t id_ = 0;
};

}  // namespace accumcheck::sim

// ElementUpdate's bodies need ExactMemoScope, so they come with sim/exact_memos.h, which ends with them.
#include "sim/exact_memos.h"
