// What built this accumcheck: its version and the git commit of its source tree, recorded in reports and
// findings and printed by `accumcheck --version` (the commit is read at build time, cmake/build_info.cmake).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace accumcheck::fuzz {

const char* accumcheck_version();  // "0.1.0"
const char* accumcheck_commit();   // a full hash, with "+modified" for uncommitted changes, or "unknown"

// The command line of this process, as run_cli received it (set at its start; empty before).
void set_command_line(std::vector<std::string> argv);
const std::vector<std::string>& command_line();

// {"version", "commit", "argv"}: what made a report or a finding.
nlohmann::json build_record();

}  // namespace accumcheck::fuzz
