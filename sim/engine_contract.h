// The parts of the engine contract (sim/engine.h) that results cannot show: when step() acts, and that the trace
// is deterministic.
//
// The training loops of scenarios call backward() and step() in pairs, so an engine that counts backward()
// calls instead of step() calls to place the automatic boundary (as a hand-written PyTorch loop does), or that
// ignores the caller's override, gives the same results as a correct one on most scenarios and wrong ones on
// the rest, with nothing to say why. register_engine_model runs this check on every user engine before it
// accepts it: a one-weight probe through step() calls with and without a backward, in the first configuration
// and scalar the engine model accepts, run twice so that the two traces can be compared too (an engine must be a
// deterministic function of scenario, parameters and seed).
#pragma once

#include <string>

namespace accumcheck::sim {

class EngineModel;

// Empty when the engine places boundaries as the contract says (or when it accepts none of the probe's
// configurations, so that nothing can be checked), else what it did wrong, naming the call. Exceptions the
// engine raises are reported as violations, never passed on.
std::string engine_contract_violation(const EngineModel& model);

}  // namespace accumcheck::sim
