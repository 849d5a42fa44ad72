// `accumcheck audit`: was a past run affected by a known accumulation defect? (docs/audit.md)
//
// For each run (run_configuration.h) and each defect of docs/targets.md that the frameworks' own training loops
// can meet, a status: affected, not affected, or cannot tell, with every trigger condition that decided it
// (version band, ZeRO stage, offload, G, world size, loss aggregation), the value each condition saw and the
// input that stated it. A condition no input states is unknown, and an unknown condition that could decide the
// verdict makes it "cannot tell", never "not affected".
//
// The damage of an engine defect is measured, not recited: the membership probe (properties/membership.h) runs
// on our model of the run's DeepSpeed release with the run's G, ranks, ZeRO stage and offload, and its decoded
// digits say which micro-batches reached the optimizer. Where that model and the version rule disagree the
// verdict is "cannot tell" and says so. Loss-weighting defects are stated as the exact per-token weights.
//
// Exit codes (run_audit's return): 0 no run affected and every defect decided; 1 some run affected; 3 none
// affected but something could not be decided; 2 a usage or input error (surface/cli.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "surface/run_configuration.h"

namespace accumcheck::surface {

inline constexpr int kExitAuditCannotTell = 3;

enum class AuditStatus { affected, not_affected, cannot_tell };
std::string_view to_string(AuditStatus status);

struct AuditCondition {
  std::string what;    // "DeepSpeed in 0.15.2 - 0.18.9"
  std::string value;   // "0.16.4", or "unknown"
  std::string source;  // the input that stated the value; empty when unknown
  std::optional<bool> holds;  // nullopt: unknown
};

struct DefectVerdict {
  std::string id;        // "deepspeed-zero2-offload-drop"
  std::string title;     // one line
  std::string where;     // docs/targets.md section and upstream references
  std::string evidence;  // "measured on the real releases" or "by reading"
  AuditStatus status = AuditStatus::cannot_tell;
  std::vector<AuditCondition> conditions;
  std::string damage;     // words and numbers, for an affected (or possibly affected) run
  nlohmann::json numbers = nlohmann::json::object();  // the damage's figures, for machines
};

// --confirm: the run's DeepSpeed configuration re-run on the real installed release (adapter:deepspeed-X.Y.Z)
// and on our model of it, on the same synthetic scenario: the membership probe's data (micro-batch k of a window
// has gradient 10^id), a window of min(G, 5) (10^9 is the last power of ten exact in fp32 that two windows need), one rank, fp32 on the real release. Property 1 (the accumulated
// update equals the full-batch update) decides each. Where the real release and our model disagree, the
// verdicts of the engine defects become cannot tell.
struct Confirmation {
  bool ran = false;
  std::string target;       // "adapter:deepspeed-0.16.4"
  std::string why_not;      // when !ran: why it could not run (never reported as a pass)
  bool real_shows_defect = false;
  bool model_shows_defect = false;
  std::string real_message;  // the real release's verdict in one line
  std::string scenario;      // what was run, in words
  std::string finding_file, reproducer_file;  // written when the real release fails
};

struct RunAudit {
  RunConfiguration run;
  std::vector<DefectVerdict> defects;
  AuditStatus overall = AuditStatus::cannot_tell;  // affected if any defect is; cannot tell if any is; else not
  std::optional<Confirmation> confirmation;
};

RunAudit audit_run(const RunConfiguration& run);

// Runs the confirmation (above) and folds it into the verdicts. A finding of the real release is written to
// `findings_dir` with its deepspeed reproducer beside it. Needs the adapter targets enabled
// (sim::external::enable_adapter_targets).
void confirm_run(RunAudit& audit, const std::filesystem::path& findings_dir);

std::string audit_text(const std::vector<RunAudit>& audits);
nlohmann::json audit_json(const std::vector<RunAudit>& audits);
int audit_exit_code(const std::vector<RunAudit>& audits);

}  // namespace accumcheck::surface
