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

struct RunAudit {
  RunConfiguration run;
  std::vector<DefectVerdict> defects;
  AuditStatus overall = AuditStatus::cannot_tell;  // affected if any defect is; cannot tell if any is; else not
};

RunAudit audit_run(const RunConfiguration& run);

std::string audit_text(const std::vector<RunAudit>& audits);
nlohmann::json audit_json(const std::vector<RunAudit>& audits);
int audit_exit_code(const std::vector<RunAudit>& audits);

}  // namespace accumcheck::surface
