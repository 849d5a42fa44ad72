// The accumcheck command line: parsing, dispatch and exit codes.
//   0  clean (no finding; a replayed finding no longer fails)
//   1  findings (a campaign found something; a replayed finding still fails)
//   2  usage or input error, with a message naming the problem (an adapter that cannot start included)
//   3  target faults and no finding: an external target misbehaved (crashed, hung, broke the protocol) on some
//      trials, so not everything could be checked
//   4  unchecked, and no finding or fault: a property named with --property could not run on any trial (or no
//      pair of the campaign could); a replayed finding's property could not run
//
// A binary that is accumcheck plus your own engines (examples/own-engine, docs/targets.md section 10) calls the
// overload that takes the engine models: they are registered (sim::register_engine_model), then the command runs,
// so `list targets` shows them as user engines and fuzz, replay, explain and export accept their names.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/target.h"

namespace accumcheck::surface {

inline constexpr int kExitClean = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTargetFault = 3;
inline constexpr int kExitUnchecked = 4;

// The command line. Target names are resolved while it runs, so an engine registered with
// sim::register_engine_model before this call is a target like the built-in ones; one registered later is not.
int run_cli(int argc, char** argv);

// Registers each engine model, in order, then runs the command line:
//   int main(int argc, char** argv) { return accumcheck::surface::run_cli(argc, argv, {std::make_shared<MyModel>()}); }
// A registration that throws (an empty or clashing name, or one holding '+') is a usage error: its message on
// standard error, exit 2. Registrations last for the process, so call it once per process.
int run_cli(int argc, char** argv, const std::vector<std::shared_ptr<const sim::EngineModel>>& engines);

// A subcommand that a build adds to the command line, such as the CUDA batched mode (`accumcheck batched`,
// cuda/batched_command.h): its name and one line for --help, and what runs it, with argv[0] its name and the rest
// the arguments after it, unparsed (its own --help included). It returns an exit code from the list above.
struct ExtensionCommand {
  std::string name, description;
  std::function<int(int argc, char** argv)> run;
};
// Adds `command` to every later run_cli of this process. Throws std::invalid_argument for an empty name, a command
// without `run`, or a name that is already a subcommand (a built-in one or an earlier registration).
void register_extension_command(ExtensionCommand command);

}  // namespace accumcheck::surface
