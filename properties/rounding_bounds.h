// Rounding bounds: how far a correct float run of a scenario may be from the exact oracle, value by value.
//
// Method: the full-batch oracle runs once more in models::FloatBound<F> (models/float_bound.h), which carries
// beside each exact value a bound on the distance of ANY IEEE evaluation of the same formula in format F:
// any order of summation, any association of products, and the usual algebraic rewrites of a correct
// implementation. A correct target's value lies within its bound; a dropped or doubled micro-batch lies far
// outside. docs/float-bounds.md derives the rules. A scenario whose bound cannot be computed (a ReLU kink or
// a clipping threshold within rounding of its input, a division by a value that rounding could make zero)
// comes back as the reason, and the property then says it could not check, never a pass.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "models/oracle.h"
#include "sim/result_bounds.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::properties {

using RunBounds = sim::ResultBounds;

// True for the float scalars whose results are compared within a bound (fp32, fp64).
bool compared_within_bounds(sim::ScalarKind scalar);

// The bounds of a correct run of `scenario` in `scalar` (fp32 or fp64), for the oracle's view `training`;
// or the reason none can be given.
std::variant<RunBounds, std::string> rounding_bounds(const models::TrainingSpec& training, const sim::Scenario& scenario,
                                                     sim::ScalarKind scalar);

}  // namespace accumcheck::properties
