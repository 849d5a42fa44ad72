// Finding: a failed property with its shrunk scenario, as a file someone else can replay bit for bit.
//
// JSON schema (docs/fuzzing.md, "Finding files"; format "accumcheck-finding", version 1):
//   {"format": "accumcheck-finding", "version": 1,
//    "target": "deepspeed@0.16.0", "property": "accumulated_update_equals_full_batch_update",
//    "scalar": "fast-rational", "campaign_seed": "1", "trial": 17, "trial_seed": "...",
//    "scenario": Scenario (sim/json/scenario_json.h), "original_size": 123, "shrunk_size": 45,
//    "shrink": {"attempts": 210, "accepted": 14},
//    "verdict": {"outcome": "fail", "message": "...",
//                "mismatches": [{"where": "...", "expected": "37", "actual": "101/3",
//                                "expected_float": 37.0, "actual_float": 33.666...}],
//                "membership": null | {"summary": "...", "wrong": [{"applied_in_step": 0, "step": 0,
//                                      "micro_batch": 1, "rank": 0, "multiplicity": "0"}]}},
//    "adapter": null | {"name": "my_loop", "command": "python3 my_loop.py", "working_directory": "/home/me",
//                       "dtype": "fp32"},
//    "replay": "accumcheck replay FILE",
//    "accumcheck": {"version": "0.1.0", "commit": "...", "argv": ["accumcheck", "fuzz", ...]}}
// Float targets' mismatches also carry "tolerance", the rounding bound the difference exceeds, and the
// verdict a "rounding_gap" {"gap", "bound", "where"}: the largest difference that stayed within its bound.
// Exact values are rational strings; the *_float fields are their nearest doubles, for readers and for
// float targets across a process boundary, and never compared.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/property.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::fuzz {

inline constexpr const char* kFindingFormat = "accumcheck-finding";
inline constexpr int kFindingVersion = 1;

struct Finding {
  std::string target;
  std::string property;
  sim::ScalarKind scalar = sim::ScalarKind::fast_rational;
  std::uint64_t campaign_seed = 0;
  std::int64_t trial = -1;  // trial index in the campaign; -1 for a corpus replay
  std::uint64_t trial_seed = 0;
  sim::Scenario scenario;   // shrunk
  std::size_t original_size = 0, shrunk_size = 0;
  std::size_t shrink_attempts = 0, shrink_accepted = 0;
  properties::Verdict verdict;
  // External targets: how to start the adapter again, {"name", "command", "working_directory", "dtype"}, so
  // that the finding replays where that adapter is not registered by name.
  std::optional<nlohmann::json> adapter;
  // What made it: {"version", "commit", "argv"} (fuzz/build_info.h); null in files from before it was recorded.
  // Like a report's "timing", not part of what a seed determines.
  nlohmann::json made_by;
};

nlohmann::json to_json(const Finding& finding);
// Throws std::invalid_argument naming the JSON path of the first problem.
Finding finding_from_json(const nlohmann::json& j);
nlohmann::json to_json(const properties::Verdict& verdict);
// "pass", "fail", "cannot-run" or "target-fault" (properties::to_string); throws std::invalid_argument otherwise.
properties::Outcome outcome_from_string(const std::string& text);

// Writes atomically: a temporary file in the same folder, flushed and synced, then renamed over `path`, so a
// reader (or a killed campaign) never sees half a finding.
// A path that exists and is not a regular file (a device, a symbolic link, a folder) is refused with
// std::invalid_argument; a failed write (a full disk) removes the temporary file and throws std::runtime_error.
void write_json_atomically(const std::filesystem::path& path, const nlohmann::json& j);
void write_text_atomically(const std::filesystem::path& path, const std::string& text);
// Reads and parses; throws std::invalid_argument naming the file and the problem (missing, not JSON).
nlohmann::json read_json_file(const std::filesystem::path& path);

// A file name that two findings share only if they are the same finding:
// <target>--<property>--s<campaign seed>-t<trial>-<8 hex digits of finding_content_digest>.json ("corpus" for
// the trial of a corpus replay), with characters other than letters, digits and "-._@" replaced by "_".
std::string finding_file_name(const Finding& finding);
// A digest of what a seed determines about the finding: target, property, scalar, seed, trial, scenario, verdict.
std::uint64_t finding_content_digest(const Finding& finding);
// Writes the finding into `dir` under finding_file_name and returns the path. A file of that name that holds the
// same finding is kept as it is; one that holds anything else is never overwritten: the name gets "-2", "-3"...
std::filesystem::path write_finding(const std::filesystem::path& dir, const Finding& finding);

// The program that replays findings, as finding files, explanations and exports print it: "accumcheck", or a
// user's own binary as invoked (run_cli with engine models sets it), since plain accumcheck lacks its engines.
// Set at start-up, before any finding is written.
void set_replay_program(std::string program);
const std::string& replay_program();
// "<replay_program()> replay <finding_file_name(finding)>".
std::string replay_command(const Finding& finding);

}  // namespace accumcheck::fuzz
