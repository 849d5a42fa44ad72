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
//   markdown  the text of an upstream issue: summary, environment, configuration table, data, expected versus
//             actual, membership, how to reproduce, and a note that the values are exact rationals from a
//             simulation.
// Every export is a pure function of the finding (deterministic text). Exporters throw std::invalid_argument
// when the finding names a target or property this build does not know and the format needs it (gtest
// needs the property; pytorch needs the target's framework layer).
#pragma once

#include <string>
#include <string_view>

#include "fuzz/finding.h"

namespace accumcheck::fuzz {

enum class ExportFormat { json, gtest, pytorch, markdown };

std::string_view to_string(ExportFormat format);
// "json", "gtest", "pytorch" or "markdown"; throws std::invalid_argument naming the text and the accepted names.
ExportFormat parse_export_format(std::string_view text);
// A file name suffix for the format: ".json", "_test.cpp", ".py", ".md".
std::string_view file_suffix(ExportFormat format);

std::string export_finding(const Finding& finding, ExportFormat format);

std::string export_json(const Finding& finding);
std::string export_gtest(const Finding& finding);
std::string export_pytorch(const Finding& finding);
std::string export_markdown(const Finding& finding);

}  // namespace accumcheck::fuzz
