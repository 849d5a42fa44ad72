// Reproducers: a finding exported as something another person can run or file, without accumcheck's
// vocabulary.
//
//   json      the finding file itself (to_json(finding).dump(2)), for `accumcheck replay`.
//   gtest     a standalone GoogleTest .cpp that rebuilds the scenario from an embedded JSON string, runs the
//             property on the target through the project's API (check_pair) and EXPECTs it to hold: it fails
//             while the bug is there and passes once it is fixed. Link it with accumcheck_fuzz and
//             GTest::gtest_main.
//   pytorch   a Python script that needs only torch: it rebuilds the model, parameters and data exactly from
//             embedded JSON (rationals as strings, read with fractions.Fraction), computes each step's
//             full-batch expected gradient with autograd in float64, runs the same data through a plain
//             PyTorch accumulation loop with the target's framework-layer coefficients, and prints both next
//             to the values recorded in the finding. It cannot run DeepSpeed and says so.
//   deepspeed a Python script that needs only torch and deepspeed, for a finding on adapter:deepspeed-X.Y.Z (the
//             real release) or deepspeed@X.Y.Z (accumcheck's model of it): the same model, data and coefficients as
//             the pytorch script, the DeepSpeed config of adapters/deepspeed/ds_config.py (every knob pinned), the
//             scenario's engine calls through deepspeed.initialize on CPU (gloo; world size 1 in its process, more
//             as one process per rank), the applied gradient read with an optimizer step pre-hook as the adapter
//             reads it, compared element by element with the full-batch gradient: exit 1 while the bug is there,
//             0 once fixed, 2 when the run did not complete. Refused (std::invalid_argument, naming why) for other
//             targets and for scenarios DeepSpeed cannot express this way (ZeRO-3, 16-bit precision or loss
//             scaling, offload or experts with ZeRO-0, nothing trainable, a micro-batch that reaches no trainable
//             parameter, ranks routed to different experts under ZeRO-1/2, more than 8 ranks).
//   markdown  the text of an upstream issue: summary, environment, configuration table, data, expected versus
//             actual, membership, how to reproduce, and a note that the values are exact rationals from a
//             simulation. For a finding on a real DeepSpeed release (adapter:deepspeed-X.Y.Z) instead: versions,
//             CPU settings, the DeepSpeed config as JSON, expected versus actual, the loop, the deepspeed script
//             inline with the command that runs it, and which pinned releases accumcheck's models predict to pass.
// Every export is a pure function of the finding (deterministic text). Exporters throw
// std::invalid_argument when the finding names a target or property this build does not know and the format
// needs it (gtest needs the property; pytorch needs the target's framework layer), or, for deepspeed, when the
// finding is not one DeepSpeed can run.
#pragma once

#include <string>
#include <string_view>

#include "fuzz/finding.h"

namespace accumcheck::surface {

using fuzz::Finding;

enum class ExportFormat { json, gtest, pytorch, deepspeed, markdown };

std::string_view to_string(ExportFormat format);
// "json", "gtest", "pytorch", "deepspeed" or "markdown"; throws std::invalid_argument naming the text and the
// accepted names.
ExportFormat parse_export_format(std::string_view text);
// A file name suffix for the format: ".json", "_test.cpp", ".py", "_deepspeed.py", ".md".
std::string_view file_suffix(ExportFormat format);

std::string export_finding(const Finding& finding, ExportFormat format);

std::string export_json(const Finding& finding);
std::string export_gtest(const Finding& finding);
std::string export_pytorch(const Finding& finding);
std::string export_deepspeed(const Finding& finding);
std::string export_markdown(const Finding& finding);

}  // namespace accumcheck::surface
