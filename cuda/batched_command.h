// `accumcheck batched`: the batched mode (batched_trials.h) as a subcommand, which the accumcheck command registers
// in a build with nvcc (surface::register_extension_command). It runs run_batched_campaign on the device (or on the
// kernel's CPU twin with --cpu-twin), prints what was checked where, writes the first failure's shrunk finding as
// `accumcheck fuzz` does, and exits as surface/cli.h says: 0 clean, 1 a finding, 2 an error (a disagreement between
// the batched check and the CPU path included), 4 nothing checked (no device and no --cpu-twin).
#pragma once

#include "surface/cli.h"

namespace accumcheck::cuda {

surface::ExtensionCommand batched_command();

}  // namespace accumcheck::cuda
