// Scenario transformations that must not change a correct target's result: the "metamorphic" half of the
// metamorphic properties. Each keeps every optimizer step's global batch (so the full-batch truth is
// unchanged) and changes only how it is split, ordered or driven.
#pragma once

#include <optional>

#include "sim/scenario.h"

namespace accumcheck::properties {

// The same global batch per step, re-dealt into windows of `accumulation_steps` micro-batches over
// `rank_count` ranks (sequence i of the step goes to micro-batch (i / R) % G, rank i % R), automatic boundary.
sim::Scenario resplit(const sim::Scenario& scenario, int rank_count, int accumulation_steps);

// Every window's micro-batches rotated by one: the first becomes the last. (Reversal would keep the middle
// of a window in the middle, where a drop of the middle micro-batches cannot see it.)
sim::Scenario rotate_micro_batches(const sim::Scenario& scenario);

// The same windows driven with a manual boundary set by the caller (set_gradient_accumulation_boundary(k ==
// last) before each backward), step() after every backward. Requires every window to have G micro-batches.
std::optional<sim::Scenario> with_manual_boundary(const sim::Scenario& scenario);
// The same windows with the automatic boundary: G set to the common window size. nullopt if windows differ.
std::optional<sim::Scenario> with_automatic_boundary(const sim::Scenario& scenario);

// With a single data-carrying step, the membership probe: see membership.h.
}  // namespace accumcheck::properties
