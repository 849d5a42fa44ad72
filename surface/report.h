// `accumcheck report`: a campaign report, a finding or an audit as one self-contained HTML page
// (surface/html_page.h: Chart.js inlined, nothing fetched when the page is opened).
//
// The kind is read from the file: {"format": "accumcheck-report"} (fuzz --report), {"format": "accumcheck-finding"}
// (a finding file) or {"audit": 1} (audit --json). Each page opens with its verdict, then:
//   finding   the configuration; which micro-batch reached which optimizer step with what weight, measured on the
//             target (membership_weights below); expected against actual per value; the story (explain); the
//             replay and export commands.
//   campaign  per target and property: trials checked and not, the finding with its minimal configuration and the
//             commands that replay and show it; what the checked scenarios exercised.
//   audit     per run: the configuration with the file that stated each value, every defect's verdict with the
//             conditions that decided it, the damage, and for a micro-batch drop which micro-batches of a window
//             reached the optimizer; the --confirm result.
// A document of none of these kinds, or one whose fields are of the wrong type, is refused with
// std::invalid_argument naming the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/rational.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::surface {

// The weight with which each micro-batch's gradient reached each optimizer step, measured on `target`: the
// membership probe's scenario (properties/membership.h: the scalar model, SGD with lr 0, `sum`) run once per
// micro-batch with only that micro-batch's gradient set to 1, so the applied gradient of step s is exactly the
// weight of that micro-batch in step s. A correct target gives 1 in the micro-batch's own step and 0 elsewhere.
// Linear engines only (the probe has no clipping and no Adam, so every built-in engine is). Empty `why_not`
// when measured.
struct MembershipWeights {
  std::vector<std::string> micro_batches;            // "s0 k1 r0": step, micro-batch, rank
  std::vector<int> own_step;                         // [micro-batch] its own step
  std::vector<std::vector<models::Rational>> weight;  // [optimizer step][micro-batch]
  std::string why_not;
};
inline constexpr std::size_t kMembershipWeightsMicroBatchMax = 64;
MembershipWeights membership_weights(const sim::Target& target, const sim::Scenario& scenario);

// The page for a parsed document; `source` names the file in the page. Throws std::invalid_argument for a
// document of no known kind or with a field of the wrong type.
std::string report_html(const nlohmann::json& document, const std::string& source);

}  // namespace accumcheck::surface
