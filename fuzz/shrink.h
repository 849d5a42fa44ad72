// Shrinking a failing scenario toward the smallest world that still fails the same property.
//
// Greedy and deterministic: a fixed list of candidate simplifications is tried in order, the first that
// still fails is kept, and the list restarts, until no candidate fails or the attempt budget runs out.
// Candidates, biggest first: fewer steps; fewer micro-batches per window (G shrinks with them under an
// automatic boundary); fewer ranks; fewer sequences (never the last of a rank's micro-batch); fewer tokens
// (never the last of a sequence); the scalar model (one parameter w, bias
// frozen) in place of the model; smaller model dimensions (also of each expert and of the tied embedding's
// vocabulary and width) and fewer experts; plain SGD, then one optimizer feature at a time; no clipping, no
// checkpoint; the engine toward ZeRO-0, no offload, one bucket, an automatic boundary, a smaller G under a
// manual one; the `sum` aggregation;
// then every value toward 0, then 1, then its integer part. Configuration, data and schedule shrink together
// because every candidate is a whole valid scenario.
#pragma once

#include <cstddef>
#include <functional>

#include "sim/scenario.h"

namespace accumcheck::fuzz {

struct ShrinkResult {
  sim::Scenario scenario;
  std::size_t attempts = 0;  // predicate evaluations
  std::size_t accepted = 0;  // simplifications kept
  bool budget_exhausted = false;
};

// `still_fails` must be deterministic. Candidates that are not valid scenarios are skipped without calling it.
ShrinkResult shrink(const sim::Scenario& failing, const std::function<bool(const sim::Scenario&)>& still_fails,
                    std::size_t attempt_budget = 4000);

// A size to compare scenarios by (steps, micro-batches, ranks, sequences, tokens, parameters, values):
// smaller is simpler.
std::size_t scenario_size(const sim::Scenario& scenario);

}  // namespace accumcheck::fuzz
