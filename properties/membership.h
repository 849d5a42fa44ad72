// The membership probe (property 5): make every micro-batch's gradient distinguishable and read back which
// micro-batches the applied gradient holds.
//
// The probe keeps the scenario's engine configuration and window shapes and replaces model and data: one
// scalar parameter w (x = 1, bias frozen, w stays 0 because lr = 0), `sum` aggregation, and in micro-batch k
// of step s on rank r a single one-token sequence with target -10^id, id = its index in the run. A correct
// target's applied gradient for step s is then exactly sum over its window of 10^id, so the decimal digits of
// the actual gradient count how many times each micro-batch was applied: 1 for its own step, 0 for every
// other step. A digit 0 is a drop, 2 a duplicate, a digit in another step's place a leak, and a value that is
// not an integer a wrong weight.
#pragma once

#include <vector>

#include "properties/property.h"
#include "sim/scenario.h"

namespace accumcheck::properties {

struct MembershipProbe {
  sim::Scenario scenario;
  std::vector<MicroBatchId> ids;  // ids[id] = which micro-batch got 10^id
};

MembershipProbe membership_probe(const sim::Scenario& scenario);

// Decodes each step's applied gradient of `run` (a run of the probe). Empty `wrong` means every micro-batch
// was applied exactly once, in its own step, with weight 1.
MembershipReport decode_membership(const MembershipProbe& probe, const sim::RunResult& run);

}  // namespace accumcheck::properties
