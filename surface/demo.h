// `accumcheck demo`: runs the exact oracle on the built-in examples of the bug catalogue and prints the
// numbers, so that a new user sees in one command what "accumulated equals full batch" means and how the
// catalogued bugs move it. Every number is computed on the spot by models/; nothing is canned.
#pragma once

#include <ostream>

namespace accumcheck::surface {

// Writes the demo report to out. Returns 0 when every built-in example gave the value the catalogue states
// (the oracle's self-check), 1 otherwise.
int run_demo(std::ostream& out);

}  // namespace accumcheck::surface
