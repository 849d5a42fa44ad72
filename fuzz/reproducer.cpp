// Reproducers: JSON, GoogleTest, PyTorch and Markdown exports of a finding.
//
// Each exporter embeds the exact scenario as JSON (sim/json/scenario_json.h) instead of re-deriving it in the
// target language, so the reproducer rebuilds the very scenario that failed, rationals and all. Text is
// assembled from fixed templates with the finding's values substituted; nothing depends on time or paths.
#include "fuzz/reproducer.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "fuzz/explain.h"
#include "sim/external/adapter_protocol.h"
#include "sim/json/scenario_json.h"
#include "sim/loss_normaliser.h"

namespace accumcheck::fuzz {

namespace {

using nlohmann::json;
using models::Rational;

// Markdown data tables list at most this many sequences; the full data is in the embedded JSON.
constexpr std::size_t kMarkdownSequencesMax = 48;

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// Text for a `//` comment line: one line, and never ending in a backslash (which would continue the comment
// onto the next line).
std::string comment_text(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  if (!text.empty() && text.back() == '\\') text += '.';
  return text;
}

std::string cpp_string_literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string identifier(std::string_view text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// Text safe inside a Python docstring: no backslash escapes, no closing quotes.
std::string docstring_text(std::string text) {
  std::replace(text.begin(), text.end(), '\\', '/');
  std::replace(text.begin(), text.end(), '"', '\'');
  return text;
}

std::string markdown_cell(std::string text) {
  replace_all(text, "|", "\\|");
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string file_stem(const Finding& f) {
  std::string name = finding_file_name(f);
  if (name.ends_with(".json")) name.resize(name.size() - 5);
  return name;
}

std::string property_description(const Finding& f) {
  const properties::Property* p = properties::find_property(f.property);
  return p ? std::string(p->description()) : std::string("(this build of accumcheck does not know this property)");
}

std::string decimal(const Rational& value) { return fmt::format("{}", value.to_double()); }

// JSON for people: objects and arrays one member per line, except that any value whose one-line form fits in
// kJsonLineWidth characters stays on one line (a token row, a sequence, a small matrix). Parses to the same value.
constexpr std::size_t kJsonLineWidth = 120;
std::string readable_json(const json& j, bool ascii, std::size_t indent = 0) {
  const std::string flat = j.dump(-1, ' ', ascii);
  if (!j.is_structured() || j.empty() || indent + flat.size() <= kJsonLineWidth) return flat;
  const std::string pad(indent + 2, ' ');
  std::string out = j.is_object() ? "{\n" : "[\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out += first ? "" : ",\n";
    first = false;
    out += pad;
    if (j.is_object()) out += json(it.key()).dump(-1, ' ', ascii) + ": ";
    out += readable_json(it.value(), ascii, indent + 2);
  }
  return out + "\n" + std::string(indent, ' ') + (j.is_object() ? "}" : "]");
}

// ---------------------------------------------------------------------------------------------------------
// GoogleTest

constexpr const char* kGtestTemplate = R"cpp(// Regression test exported by accumcheck from a finding: @TARGET@ fails @PROPERTY@.
//
// Property: @PROPERTY_DESCRIPTION@
// Recorded verdict: @MESSAGE@
@RECORDED@//
// This test EXPECTS the property to hold, so it FAILS while the bug is present and PASSES once the target is
// fixed. It rebuilds the finding's scenario from the JSON below (accumcheck::sim::scenario_from_json), makes the
// target by name (sim::make_target), finds the property by name (properties::find_property) and runs the pair
// exactly as campaigns and `accumcheck replay` do (fuzz::check_pair, scalar @SCALAR@).
//
// Build it against accumcheck, for example in a CMake project that adds accumcheck's source tree with
// add_subdirectory (or inside accumcheck's own tree):
//   add_executable(finding_test @FILE@)
//   target_link_libraries(finding_test PRIVATE accumcheck_fuzz GTest::gtest_main)
//   add_test(NAME finding_test COMMAND finding_test)
// accumcheck_fuzz brings the include path (accumcheck's source root) and every library it needs.
// The same finding replays with: @REPLAY@
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fuzz/campaign.h"
#include "sim/json/scenario_json.h"
#include "properties/property.h"
#include "sim/target.h"

namespace {

// The finding's scenario (sim/json/scenario_json.h: rationals are "n/d" strings).
constexpr const char* kScenarioJson = R"@DELIMITER@(
@SCENARIO@
)@DELIMITER@";

}  // namespace

TEST(AccumcheckFinding, @TEST_NAME@) {
  using namespace accumcheck;
  const sim::Scenario scenario = sim::scenario_from_json(nlohmann::json::parse(kScenarioJson));
  const auto target = sim::make_target(@TARGET_LITERAL@);
  const properties::Property* property = properties::find_property(@PROPERTY_LITERAL@);
  ASSERT_NE(property, nullptr) << "this build of accumcheck has no property " << @PROPERTY_LITERAL@;
  const properties::Verdict verdict = fuzz::check_pair(*target, *property, scenario, sim::parse_scalar_kind(@SCALAR_LITERAL@));
  std::string report = verdict.message;
  for (const auto& m : verdict.mismatches)
    report += "\n  " + m.where + ": expected " + m.expected.to_string() + ", actual " + m.actual.to_string();
  if (verdict.membership) report += "\n  membership: " + verdict.membership->summary;
  EXPECT_EQ(std::string(properties::to_string(verdict.outcome)), "pass")
      << target->name() << " does not satisfy " << property->name() << ": " << report;
}
)cpp";

// ---------------------------------------------------------------------------------------------------------
// PyTorch

constexpr const char* kPytorchTemplate = R"py(#!/usr/bin/python3
"""Reproducer exported by accumcheck: @TARGET@ fails @PROPERTY@.

Property: @PROPERTY_DESCRIPTION@
Recorded verdict: @MESSAGE@

This script needs only torch (numpy is not used). It
  1. rebuilds the model, its initial parameters and every micro-batch exactly from the JSON below: rationals are
     strings ("n" or "n/d"), read with fractions.Fraction and rounded once to torch.float64. The model is the one
     of accumcheck's models/ (docs/oracle.md): parameters in the order of FINDING["parameter_names"] with the
     shapes [rows, cols] of FINDING["parameter_shapes"] (vectors are [n, 1] columns), frozen parameters with
     requires_grad=False;
       linear          y_hat = W_e x + b_e, e the expert a token is routed to (e = 0 with one expert)
       mlp             y_hat = W2 relu(W1 x + b1) + b2
       tied_embedding  y_hat = E E[id] + b (one table for the input lookup and the output projection)
     with the token loss l = 1/2 |y_hat - y|^2; masked tokens go through the forward pass with weight 0;
  2. computes each optimizer step's full-batch expected gradient with torch autograd in float64: the objective
     J_s = sum_i c_i sum_t M_it l_it over every sequence of every micro-batch of every rank of step s, with the
     window-global coefficients c_i of the aggregation mode (docs/oracle.md, "The objective of one step"), then
     clipping and the optimizer as torch.optim does, so that later steps start from the right parameters;
  3. runs the same data through a plain PyTorch accumulation loop (plain_accumulation_loop below): for each
     micro-batch and each rank, backward of that rank's loss times 1/(G R) (the engine's 1/G and the
     data-parallel average, G = @G@, R = @R@), the loss weighted by the per-sequence coefficients of the framework
     layer "@LAYER@" that the target uses (computed by accumcheck, embedded below); one clip and one optimizer
     step per window;
  4. prints both next to the values recorded in the finding: the expected values (accumcheck's exact full-batch
     oracle) and what @TARGET@ produced in accumcheck.

What it cannot do: it does not run DeepSpeed, or any other framework. The recorded actual values come from
accumcheck's behavioural model of the target, a deterministic simulation in exact rational arithmetic, not from
the real software. To check your own stack, run its training loop on the same data in place of
plain_accumulation_loop and compare its gradients with the full-batch expected ones.

Run: /usr/bin/python3 @FILE@   (exit status 0; the comparison is printed, not asserted)
Replay in accumcheck: @REPLAY@
"""
import json
import sys
from fractions import Fraction

import torch

FINDING = json.loads(r'''@JSON@''')

SCENARIO = FINDING["scenario"]
TRAINING = SCENARIO["training"]
MODEL = TRAINING["model"]
ENGINE = SCENARIO["engine"]
NAMES = FINDING["parameter_names"]
SHAPES = FINDING["parameter_shapes"]
FROZEN = set(MODEL["frozen"])
DTYPE = torch.float64
# Two float64 computations of one exact value agree to a few ulps of the values summed; beyond this it differs.
RELATIVE_TOLERANCE = 1e-9
LINES_MAX = 400


def to_float(text):
    """An exact rational string ("n" or "n/d") rounded once to the nearest double."""
    return float(Fraction(text))


def matrix(rows, cols):
    """A JSON matrix (rows of rational strings) as a [len(rows), cols] float64 tensor."""
    return torch.tensor([to_float(v) for row in rows for v in row], dtype=DTYPE).reshape(len(rows), cols)


def initial_parameters():
    params = []
    for name, (rows, cols) in zip(NAMES, SHAPES):
        p = matrix(SCENARIO["initial_parameters"][name], cols).clone()
        p.requires_grad_(name not in FROZEN)
        params.append(p)
    return params


def token_batch(sequences, coefficients):
    """The tokens of `sequences` as one batch; token t of sequence i has weight w_t = c_i M_it (exact, then float)."""
    kind = MODEL["kind"]
    features, ids, experts, targets, weights = [], [], [], [], []
    for seq, c in zip(sequences, coefficients):
        for t, mask in enumerate(seq["loss_mask"]):
            if kind == "tied_embedding":
                ids.append(seq["token_ids"][t])
            else:
                features.extend(to_float(v) for v in seq["features"][t])
            if kind == "linear" and MODEL["expert_count"] > 1:
                experts.append(seq["expert_index"][t])
            targets.extend(to_float(v) for v in seq["targets"][t])
            weights.append(float(Fraction(c) * mask))
    n = len(weights)
    width = MODEL["vocab_size"] if kind == "tied_embedding" else MODEL["output_size"]
    return {
        "n": n,
        "x": None if kind == "tied_embedding" else torch.tensor(features, dtype=DTYPE).reshape(n, MODEL["input_size"]),
        "ids": torch.tensor(ids, dtype=torch.long),
        "expert": torch.tensor(experts, dtype=torch.long),
        "y": torch.tensor(targets, dtype=DTYPE).reshape(n, width),
        "w": torch.tensor(weights, dtype=DTYPE),
    }


def token_losses(y_hat, y, w):
    """sum_t w_t 1/2 |y_hat_t - y_t|^2"""
    return (w * 0.5 * ((y_hat - y) ** 2).sum(dim=1)).sum()


def weighted_loss(params, batch):
    """The batch's weighted loss; None when no parameter took part (every routed expert idle)."""
    kind = MODEL["kind"]
    if kind == "linear":
        total = None
        expert_count = MODEL["expert_count"]
        for e in range(expert_count):
            W, b = params[2 * e], params[2 * e + 1]
            if expert_count == 1:
                rows = torch.arange(batch["n"])
            else:
                rows = (batch["expert"] == e).nonzero().reshape(-1)
                if rows.numel() == 0:
                    continue  # no token routed to expert e: autograd leaves its .grad as None
            part = token_losses(batch["x"][rows] @ W.T + b.reshape(-1), batch["y"][rows], batch["w"][rows])
            total = part if total is None else total + part
        return total
    if kind == "mlp":
        W1, b1, W2, b2 = params
        h = torch.relu(batch["x"] @ W1.T + b1.reshape(-1))  # relu'(0) = 0, as in accumcheck
        return token_losses(h @ W2.T + b2.reshape(-1), batch["y"], batch["w"])
    E, b = params
    return token_losses(E[batch["ids"]] @ E.T + b.reshape(-1), batch["y"], batch["w"])


def backward(loss):
    # An empty batch still runs the forward pass, so dense parameters get zero gradients (docs/oracle.md).
    if loss is not None and loss.requires_grad:
        loss.backward()


def window_global_coefficients(sequences):
    """c_i of docs/oracle.md, exactly, with counts over the whole window (every micro-batch, every rank)."""
    aggregation = TRAINING["aggregation"]
    mode = aggregation["mode"]
    valid = [sum(seq["loss_mask"]) for seq in sequences]
    token_count = sum(valid)
    sequence_count = sum(1 for v in valid if v > 0)
    out = []
    for v in valid:
        if mode == "token-mean":
            c = Fraction(1, token_count) if token_count > 0 else Fraction(0)
        elif mode == "seq-mean-token-sum":
            c = Fraction(1, sequence_count) if v > 0 else Fraction(0)
        elif mode == "seq-mean-token-mean":
            c = Fraction(1, sequence_count * v) if v > 0 else Fraction(0)
        elif mode == "seq-mean-token-sum-norm":
            c = 1 / Fraction(aggregation["norm_constant"])
        elif mode == "sum":
            c = Fraction(1)
        else:
            raise ValueError(f"unknown aggregation mode {mode!r}")
        out.append(c)
    return out


def make_optimizer(params):
    """The optimizer as torch.optim defines it, over the trainable parameters; None when every one is frozen."""
    o = TRAINING["optimizer"]
    trainable = [p for p in params if p.requires_grad]
    if not trainable:
        return None
    lr, weight_decay = to_float(o["lr"]), to_float(o["weight_decay"])
    if o["kind"] == "sgd":
        return torch.optim.SGD(trainable, lr=lr, momentum=to_float(o["momentum"]), dampening=to_float(o["dampening"]),
                               weight_decay=weight_decay, nesterov=o["nesterov"])
    kind = torch.optim.Adam if o["kind"] == "adam" else torch.optim.AdamW
    return kind(trainable, lr=lr, betas=(to_float(o["beta1"]), to_float(o["beta2"])), eps=to_float(o["eps"]),
                weight_decay=weight_decay)


def finish_step(params, optimizer):
    """The end of a window: clip, record the applied gradient (None where absent), step, clear the gradients."""
    with_grad = [p for p in params if p.grad is not None]
    if TRAINING["max_grad_norm"] is not None and with_grad:
        torch.nn.utils.clip_grad_norm_(with_grad, to_float(TRAINING["max_grad_norm"]))
    applied = [None if p.grad is None else p.grad.detach().clone() for p in params]
    if FINDING["missing_gradient_is_zero"]:
        # The target's optimizer runs on a flat partition (DeepSpeed ZeRO): a trainable parameter without a
        # gradient is stepped as if its gradient were zeros, and the oracle follows the same rule.
        for p in params:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    if optimizer is not None:
        optimizer.step()
    for p in params:
        p.grad = None
    return applied


def full_batch_expected():
    """Each step's applied gradient of full-batch training: one backward of J_s per step."""
    params = initial_parameters()
    optimizer = make_optimizer(params)
    applied = []
    for window in SCENARIO["steps"]:
        sequences = [seq for micro_batch in window for rank in micro_batch for seq in rank]
        backward(weighted_loss(params, token_batch(sequences, window_global_coefficients(sequences))))
        applied.append(finish_step(params, optimizer))
    return applied


def plain_accumulation_loop():
    """A plain PyTorch accumulation loop: one backward per micro-batch and rank into .grad, one step per window.

    Rank r's loss for micro-batch k is sum_i a_kri sum_t M l with the framework layer's coefficients a_kri; the
    engine multiplies it by 1/G and averages over the R ranks. Replace this function with your framework's loop.
    """
    G, R = ENGINE["accumulation_steps"], ENGINE["rank_count"]
    params = initial_parameters()
    optimizer = make_optimizer(params)
    applied = []
    for s, window in enumerate(SCENARIO["steps"]):
        for k, micro_batch in enumerate(window):
            for r, sequences in enumerate(micro_batch):
                coefficients = [Fraction(a) / (G * R) for a in FINDING["framework_coefficients"][s][k][r]]
                backward(weighted_loss(params, token_batch(sequences, coefficients)))
        applied.append(finish_step(params, optimizer))
    return applied


def show(value):
    return "None" if value is None else repr(value)


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= RELATIVE_TOLERANCE * max(1.0, abs(a), abs(b))


def main():
    torch.set_num_threads(1)
    target = FINDING["target"]
    print(f"accumcheck finding: {target} fails {FINDING['property']}")
    print(f"  {FINDING['verdict']['message']}")
    print(f"target: {FINDING['target_description']}")
    print(f"configuration: {FINDING['configuration']}")
    print(f"plain loop normalisation: framework layer {FINDING['framework_layer']} ({FINDING['framework_description']})")
    print()
    expected = full_batch_expected()
    plain = plain_accumulation_loop()
    print("full-batch expected gradient (torch autograd, float64) next to the plain PyTorch accumulation loop:")
    expected_at = {}
    lines = 0
    for s in range(len(expected)):
        for p, name in enumerate(NAMES):
            if name in FROZEN:
                print(f"  step {s} / gradient / {name}: frozen (requires_grad=False), no gradient")
                continue
            rows, cols = SHAPES[p]
            for c in range(cols):
                for r in range(rows):
                    where = f"step {s} / gradient / {name}[{r},{c}]"
                    e = None if expected[s][p] is None else expected[s][p][r, c].item()
                    a = None if plain[s][p] is None else plain[s][p][r, c].item()
                    expected_at[where] = e
                    lines += 1
                    if lines <= LINES_MAX:
                        flag = "" if close(e, a) else "   <- differs"
                        print(f"  {where}: full-batch expected {show(e)}   plain loop {show(a)}{flag}")
    if lines > LINES_MAX:
        print(f"  ... {lines - LINES_MAX} more values")
    verdict = FINDING["verdict"]
    print()
    print(f"recorded in the finding (exact rationals from accumcheck's simulation; nearest doubles in brackets):")
    for m in verdict["mismatches"]:
        print(f"  {m['where']}: expected {m['expected']} ({show(to_float(m['expected']))})   "
              f"what {target} produced in accumcheck: {m['actual']} ({show(to_float(m['actual']))})")
        if FINDING["property"] == "accumulated_update_equals_full_batch_update" and m["where"] in expected_at:
            e = expected_at[m["where"]]
            verb = "agrees with" if close(e, to_float(m["expected"])) else "DISAGREES with"
            print(f"    torch's full-batch expected value here, {show(e)}, {verb} accumcheck's exact expected value")
    if not verdict["mismatches"]:
        print("  (no value mismatches recorded)")
    membership = verdict["membership"]
    if membership is not None:
        print(f"  membership: {membership['summary']}")
        for w in membership["wrong"]:
            print(f"    micro-batch {w['micro_batch']} of step {w['step']} on rank {w['rank']}: "
                  f"applied {w['multiplicity']} times in the gradient of step {w['applied_in_step']}")
        print("  (property 5 runs a probe with this engine configuration and window shapes but its own scalar model "
              "and data, in which micro-batch number id has gradient 10^id)")
    print()
    print(f"replay in accumcheck: {FINDING['replay']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
)py";

// One pass over the template: a value is never scanned again, so a value that happens to contain "@KEY@"
// stays as it is.
std::string substitute(std::string_view text, const std::vector<std::pair<std::string_view, std::string>>& values) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    bool replaced = false;
    if (text[at] == '@')
      for (const auto& [key, value] : values)
        if (text.substr(at).starts_with(key)) {
          out += value;
          at += key.size();
          replaced = true;
          break;
        }
    if (!replaced) out += text[at++];
  }
  return out;
}

}  // namespace

std::string_view to_string(ExportFormat format) {
  switch (format) {
    case ExportFormat::json: return "json";
    case ExportFormat::gtest: return "gtest";
    case ExportFormat::pytorch: return "pytorch";
    case ExportFormat::markdown: return "markdown";
  }
  return "?";
}

ExportFormat parse_export_format(std::string_view text) {
  for (auto f : {ExportFormat::json, ExportFormat::gtest, ExportFormat::pytorch, ExportFormat::markdown})
    if (to_string(f) == text) return f;
  throw std::invalid_argument("unknown export format '" + std::string(text) +
                              "' (expected json, gtest, pytorch or markdown)");
}

std::string_view file_suffix(ExportFormat format) {
  switch (format) {
    case ExportFormat::json: return ".json";
    case ExportFormat::gtest: return "_test.cpp";
    case ExportFormat::pytorch: return ".py";
    case ExportFormat::markdown: return ".md";
  }
  return "";
}

std::string export_finding(const Finding& finding, ExportFormat format) {
  switch (format) {
    case ExportFormat::json: return export_json(finding);
    case ExportFormat::gtest: return export_gtest(finding);
    case ExportFormat::pytorch: return export_pytorch(finding);
    case ExportFormat::markdown: return export_markdown(finding);
  }
  throw std::invalid_argument("unknown export format");
}

std::string export_json(const Finding& finding) { return to_json(finding).dump(2); }

std::string export_gtest(const Finding& f) {
  if (!properties::find_property(f.property))
    throw std::invalid_argument("cannot export a GoogleTest for unknown property '" + f.property + "'");
  const std::string scenario = readable_json(to_json(f.scenario), false);
  // A raw-string delimiter the JSON does not contain (at most 16 characters).
  std::string delimiter = "accumcheck";
  while (scenario.find(")" + delimiter + "\"") != std::string::npos) {
    if (delimiter.size() >= 16) throw std::invalid_argument("cannot embed this scenario in a raw string literal");
    delimiter += "_";
  }
  std::string recorded;
  for (const auto& m : f.verdict.mismatches) recorded += "//   " + comment_text(describe_mismatch(m)) + "\n";
  if (f.verdict.membership) recorded += "//   membership: " + comment_text(f.verdict.membership->summary) + "\n";
  std::string test_name = identifier(f.property) + "_on_" + identifier(f.target);
  if (f.trial >= 0) test_name += "_trial_" + std::to_string(f.trial);
  return substitute(kGtestTemplate,
                    {{"@TARGET@", comment_text(f.target)},
                     {"@PROPERTY_DESCRIPTION@", comment_text(property_description(f))},
                     {"@PROPERTY@", comment_text(f.property)},
                     {"@MESSAGE@", comment_text(f.verdict.message)},
                     {"@RECORDED@", recorded},
                     {"@SCALAR@", std::string(sim::to_string(f.scalar))},
                     {"@FILE@", file_stem(f) + std::string(file_suffix(ExportFormat::gtest))},
                     {"@REPLAY@", "accumcheck replay " + finding_file_name(f)},
                     {"@DELIMITER@", delimiter},
                     {"@SCENARIO@", scenario},
                     {"@TEST_NAME@", test_name},
                     {"@TARGET_LITERAL@", cpp_string_literal(f.target)},
                     {"@PROPERTY_LITERAL@", cpp_string_literal(f.property)},
                     {"@SCALAR_LITERAL@", cpp_string_literal(sim::to_string(f.scalar))}});
}

namespace {

// A finding on an external adapter: a script that starts the user's own adapter, sends it the shrunk scenario
// through the protocol and checks the values the finding names against the exact expectation within their
// rounding bound. It runs the user's real loop, not a model of it.
std::string export_adapter_script(const Finding& f) {
  if (f.property != "accumulated_update_equals_full_batch_update" && f.property != "multi_step_trajectory_equals_full_batch_trajectory")
    throw std::invalid_argument("export --format pytorch of an adapter finding compares with the oracle, which properties 1 and 9 do; "
                                "this finding is of " + f.property + ": replay it with accumcheck replay");
  const std::string dtype = f.adapter->value("dtype", std::string("fp32"));
  const auto d = dtype == "exact" ? sim::external::DType::exact : dtype == "fp64" ? sim::external::DType::fp64 : sim::external::DType::fp32;
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& m : f.verdict.mismatches)
    checks.push_back({{"where", m.where}, {"expected", m.expected.to_string()}, {"tolerance", m.tolerance.to_string()}});
  const std::string request = sim::external::run_request(1, f.scenario, d).dump();
  std::string out = R"PY(#!/usr/bin/env python3
"""accumcheck reproducer: @PROPERTY@ fails on @TARGET@.

Starts the adapter's own command, sends it the shrunk scenario through the adapter protocol
(docs/adapter-protocol.md) and compares the values below with the exact full-batch expectation, within the
rounding bound accumcheck derived for this scenario (docs/float-bounds.md). Exit status 1 while the defect is
there, 0 once it is fixed. Standard library only; run it from anywhere:  python3 THIS_FILE
"""
import json
import subprocess
import sys
from fractions import Fraction

COMMAND = @COMMAND@
WORKING_DIRECTORY = @CWD@
REQUEST = json.loads(@REQUEST@)
CHECKS = json.loads(@CHECKS@)


def value_at(reply, where):
    # "step 0 / gradient / weight[0,0]", "final / parameters / bias[1,0]", "step 0 / applied"
    parts = [p.strip() for p in where.split("/")]
    if parts[0].startswith("step"):
        step = reply["steps"][int(parts[0].split()[1])]
        if parts[1] == "applied":
            return Fraction(1 if step["applied"] else 0)
        tensors = step["gradient"]
    else:
        tensors = reply[{"parameters": "parameters"}.get(parts[1], "optimizer_state")]
        if parts[1] != "parameters":
            tensors = tensors[parts[1]]
        if parts[1] == "step_count":
            return Fraction(tensors[parts[2]])
    name, index = parts[2].rstrip("]").split("[")
    r, c = (int(x) for x in index.split(","))
    tensor = tensors[name]
    if tensor is None:
        return Fraction(0)
    v = tensor[r][c]
    return Fraction(v) if isinstance(v, str) else Fraction(float(v))


def main():
    adapter = subprocess.Popen(COMMAND, shell=True, cwd=WORKING_DIRECTORY, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    adapter.stdin.write(json.dumps({"type": "hello", "id": 0, "protocol": 1, "client": "reproducer"}) + "\n")
    adapter.stdin.flush()
    hello = json.loads(adapter.stdout.readline())
    assert hello.get("type") == "hello", hello
    adapter.stdin.write(json.dumps(REQUEST) + "\n")
    adapter.stdin.flush()
    reply = json.loads(adapter.stdout.readline())
    adapter.stdin.write(json.dumps({"type": "shutdown"}) + "\n")
    adapter.stdin.close()
    adapter.wait(timeout=30)
    if reply.get("type") != "result":
        print("the adapter did not return a result:", reply)
        return 2
    failed = 0
    for check in CHECKS:
        expected, tolerance = Fraction(check["expected"]), Fraction(check["tolerance"])
        actual = value_at(reply, check["where"])
        ok = abs(actual - expected) <= tolerance
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {check['where']}: expected {float(expected)!r} ({expected}), "
              f"actual {float(actual)!r}, allowed rounding {float(tolerance):.3g}")
    print("still fails" if failed else "fixed: every value is within its bound")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
)PY";
  auto py_string = [](const std::string& text) { return nlohmann::json(text).dump(); };
  auto put = [&](const std::string& key, const std::string& value) {
    for (std::size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + value.size())) out.replace(at, key.size(), value);
  };
  put("@PROPERTY@", f.property);
  put("@TARGET@", f.target);
  put("@COMMAND@", py_string(f.adapter->at("command").get<std::string>()));
  put("@CWD@", py_string(f.adapter->at("working_directory").get<std::string>()));
  put("@REQUEST@", py_string(request));
  put("@CHECKS@", py_string(checks.dump()));
  return out;
}

}  // namespace

std::string export_pytorch(const Finding& f) {
  if (f.adapter) return export_adapter_script(f);
  const std::string layer = framework_layer_of(f.target);
  const auto normaliser = sim::find_normaliser(layer);
  if (!normaliser) throw std::invalid_argument("cannot export a PyTorch script: unknown framework layer '" + layer + "'");
  const sim::Scenario run = scenario_as_run(f.target, f.scenario);
  const models::ModelSpec& spec = f.scenario.training.model;

  bool missing_gradient_is_zero = f.scenario.training.optimizer.missing_gradient_is_zero;
  try {
    // The oracle follows the target's optimizer semantics for parameters without a gradient
    // (properties/comparison.h, oracle_training_for).
    missing_gradient_is_zero = sim::make_target(f.target)->optimizer_steps_missing_gradients_as_zero();
  } catch (const std::invalid_argument&) {
  }

  json coefficients = json::array();
  for (const auto& window : run.steps) {
    const sim::WindowCoefficients c = normaliser->coefficients(window, run.engine, run.training.aggregation);
    json steps = json::array();
    for (const auto& k : c) {
      json ranks = json::array();
      for (const auto& r : k) {
        json seqs = json::array();
        for (const auto& ci : r) seqs.push_back(ci.to_string());
        ranks.push_back(std::move(seqs));
      }
      steps.push_back(std::move(ranks));
    }
    coefficients.push_back(std::move(steps));
  }
  json shapes = json::array();
  for (const auto& [rows, cols] : models::parameter_shapes(spec)) shapes.push_back({rows, cols});

  const json data{{"target", f.target},
                  {"target_description", target_description(f.target)},
                  {"property", f.property},
                  {"property_description", property_description(f)},
                  {"configuration", describe_configuration(f.scenario, f.scalar)},
                  {"framework_layer", layer},
                  {"framework_description", std::string(normaliser->description())},
                  {"parameter_names", models::parameter_names(spec)},
                  {"parameter_shapes", std::move(shapes)},
                  {"missing_gradient_is_zero", missing_gradient_is_zero},
                  {"framework_coefficients", std::move(coefficients)},
                  {"scenario", to_json(f.scenario)},
                  {"verdict", to_json(f.verdict)},
                  {"replay", "accumcheck replay " + finding_file_name(f)}};
  // ASCII only, and no single quote anywhere (JSON allows \u0027 for it inside strings; outside strings JSON has
  // none), so the text is safe inside a Python r'''...''' literal.
  std::string text = readable_json(data, true);
  replace_all(text, "'", "\\u0027");

  return substitute(kPytorchTemplate,
                    {{"@TARGET@", docstring_text(f.target)},
                     {"@PROPERTY_DESCRIPTION@", docstring_text(property_description(f))},
                     {"@PROPERTY@", docstring_text(f.property)},
                     {"@MESSAGE@", docstring_text(f.verdict.message)},
                     {"@G@", std::to_string(run.engine.accumulation_steps)},
                     {"@R@", std::to_string(run.engine.rank_count)},
                     {"@LAYER@", docstring_text(layer)},
                     {"@FILE@", file_stem(f) + std::string(file_suffix(ExportFormat::pytorch))},
                     {"@REPLAY@", docstring_text("accumcheck replay " + finding_file_name(f))},
                     {"@JSON@", text}});
}

std::string export_markdown(const Finding& f) {
  std::string out;
  auto line = [&](const std::string& text = {}) { out += text + "\n"; };
  const sim::Scenario& s = f.scenario;
  const sim::Scenario run = scenario_as_run(f.target, s);
  const sim::EngineConfig& e = s.engine;

  line(fmt::format("# `{}` fails `{}`: {}", f.target, f.property, f.verdict.message));
  line();
  line("## Summary");
  line();
  line(fmt::format("accumcheck (a deterministic simulator and property-based fuzzer for gradient accumulation) found "
                   "that its model of `{}` breaks the property `{}`: {}.",
                   f.target, f.property, property_description(f)));
  line();
  line(fmt::format("Verdict: **{}**: {}", properties::to_string(f.verdict.outcome), f.verdict.message));
  if (const std::string hint = catalogue_hint(f); !hint.empty()) {
    line();
    line("This " + hint + ".");
  }
  line();
  line("## Environment");
  line();
  line(fmt::format("- Target: `{}`, accumcheck's behavioural model of this stack, not the software itself.", f.target));
  line("- What it models (with the upstream references the model was read from):");
  std::string description = target_description(f.target);
  std::size_t start = 0;
  while (start <= description.size()) {
    const std::size_t end = description.find("; ", start);
    line("  - " + description.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 2;
  }
  line(fmt::format("- Arithmetic: {}{}", sim::to_string(f.scalar),
                   f.scalar == sim::ScalarKind::rational || f.scalar == sim::ScalarKind::fast_rational ? " (exact)" : ""));
  if (f.trial >= 0)
    line(fmt::format("- Found by: campaign seed {}, trial {} (trial seed {}); shrunk from size {} to {}.", f.campaign_seed,
                     f.trial, f.trial_seed, f.original_size, f.shrunk_size));
  line();
  line("## Minimal reproducer");
  line();
  line("| setting | value |");
  line("|---|---|");
  auto row = [&](const std::string& key, const std::string& value) { line("| " + markdown_cell(key) + " | " + markdown_cell(value) + " |"); };
  row("data-parallel ranks (R)", std::to_string(e.rank_count));
  row("accumulation steps (G)", std::to_string(e.accumulation_steps));
  row("ZeRO stage", std::to_string(e.zero_stage) + (run.engine.zero_stage != e.zero_stage
                                                        ? " (the target's preset runs it as " + std::to_string(run.engine.zero_stage) + ")"
                                                        : ""));
  row("optimizer offload", std::string(e.offload ? "on" : "off") +
                               (run.engine.offload != e.offload
                                    ? std::string(" (the target's preset runs it ") + (run.engine.offload ? "on" : "off") + ")"
                                    : ""));
  row("accumulation boundary", e.boundary == sim::BoundaryMode::automatic ? "automatic" : "set by the caller on the last backward of each window");
  row("engine.step()", e.step_after_every_backward ? "after every backward" : "once per window");
  row("precision", std::string(sim::to_string(e.precision)));
  row("loss scaling", e.loss_scaler ? fmt::format("{} from {}", e.loss_scaler->dynamic ? "dynamic" : "static",
                                                  e.loss_scaler->initial_scale.to_string())
                                    : "none");
  if (e.bucket_element_count > 0) row("reduction bucket elements", std::to_string(e.bucket_element_count));
  const models::ModelSpec& spec = s.training.model;
  std::string model(models::to_string(spec.kind));
  switch (spec.kind) {
    case models::ModelKind::linear:
      model += fmt::format(": input {}, output {}", spec.input_size, spec.output_size);
      if (spec.expert_count > 1) model += fmt::format(", {} routed experts", spec.expert_count);
      break;
    case models::ModelKind::mlp:
      model += fmt::format(": input {}, hidden {}, output {}", spec.input_size, spec.hidden_size, spec.output_size);
      break;
    case models::ModelKind::tied_embedding:
      model += fmt::format(": vocabulary {}, embedding {}", spec.vocab_size, spec.embed_size);
      break;
  }
  row("model", model);
  std::string parameters;
  const auto names = models::parameter_names(spec);
  const auto shapes = models::parameter_shapes(spec);
  for (std::size_t p = 0; p < names.size(); ++p)
    parameters += fmt::format("{}`{}` [{}, {}]", p > 0 ? ", " : "", names[p], shapes[p].first, shapes[p].second);
  if (!spec.frozen.empty()) {
    parameters += "; frozen:";
    for (const auto& name : spec.frozen) parameters += " `" + name + "`";
  }
  row("parameters", parameters);
  std::string aggregation(models::to_string(s.training.aggregation.mode));
  if (s.training.aggregation.mode == models::LossAggregation::seq_mean_token_sum_norm)
    aggregation += " (C = " + s.training.aggregation.norm_constant.to_string() + ")";
  row("loss aggregation", aggregation);
  const models::OptimizerSpec& o = s.training.optimizer;
  std::string optimizer = std::string(models::to_string(o.kind)) + ", lr " + o.lr.to_string();
  if (o.kind == models::OptimizerKind::sgd) {
    if (!o.momentum.is_zero()) optimizer += ", momentum " + o.momentum.to_string();
    if (!o.dampening.is_zero()) optimizer += ", dampening " + o.dampening.to_string();
    if (o.nesterov) optimizer += ", nesterov";
  } else {
    optimizer += ", betas (" + o.beta1.to_string() + ", " + o.beta2.to_string() + "), eps " + o.eps.to_string();
  }
  if (!o.weight_decay.is_zero()) optimizer += ", weight decay " + o.weight_decay.to_string();
  row("optimizer", optimizer);
  row("gradient clipping", s.training.max_grad_norm ? "global norm " + s.training.max_grad_norm->to_string() : "none");
  row("optimizer steps", std::to_string(s.steps.size()));
  row("checkpoint", s.checkpoint_after_step ? "after step " + std::to_string(*s.checkpoint_after_step) + ", resumed in a fresh engine" : "none");
  row("schedule seed", std::to_string(s.schedule_seed));
  line();
  line("### Data");
  line();
  line("Token loss 1/2 |y_hat - y|^2; `x` features, `y` targets, `id` token id, `expert` the routed expert.");
  line();
  line("| step | micro-batch | rank | sequence | tokens |");
  line("|---|---|---|---|---|");
  std::size_t listed = 0, left_out = 0;
  for (std::size_t st = 0; st < s.steps.size(); ++st)
    for (std::size_t k = 0; k < s.steps[st].micro_batches.size(); ++k) {
      const auto& ranks = s.steps[st].micro_batches[k].rank_sequences;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].empty() && listed < kMarkdownSequencesMax) {
          line(fmt::format("| {} | {} | {} | - | no sequences |", st, k, r));
          ++listed;
        }
        for (std::size_t i = 0; i < ranks[r].size(); ++i) {
          if (listed >= kMarkdownSequencesMax) {
            ++left_out;
            continue;
          }
          std::string tokens;
          for (int t = 0; t < ranks[r][i].token_count(); ++t)
            tokens += (t > 0 ? "; " : "") + describe_token(spec, ranks[r][i], t);
          line(fmt::format("| {} | {} | {} | {} | {} |", st, k, r, i, markdown_cell(tokens.empty() ? "(empty)" : tokens)));
          ++listed;
        }
      }
    }
  if (left_out > 0) line(fmt::format("\n{} more sequences are in the scenario JSON below.", left_out));
  line();
  line("<details><summary>Initial parameters and the whole scenario as JSON (exact rationals)</summary>");
  line();
  line("```json");
  line(readable_json(to_json(s), false));
  line("```");
  line();
  line("</details>");
  line();
  line("## Expected vs actual");
  line();
  if (!f.verdict.mismatches.empty()) {
    line("| where | expected | actual | expected (decimal) | actual (decimal) | actual - expected |");
    line("|---|---|---|---|---|---|");
    for (const auto& m : f.verdict.mismatches)
      line(fmt::format("| {} | {} | {} | {} | {} | {} |", markdown_cell(m.where), m.expected.to_string(), m.actual.to_string(),
                       decimal(m.expected), decimal(m.actual), (m.actual - m.expected).to_string()));
  } else {
    line("No values were recorded; the verdict above says what failed.");
  }
  if (f.verdict.membership) {
    line();
    line("## Membership");
    line();
    line("accumcheck's membership probe keeps this engine configuration and these window shapes and gives micro-batch "
         "number id (counted across the run) the gradient 10^id, so the digits of each applied gradient count how often "
         "each micro-batch was applied.");
    line();
    line("Summary: " + f.verdict.membership->summary);
    line();
    line("| applied in step | micro-batch | of step | rank | times applied | expected | meaning |");
    line("|---|---|---|---|---|---|---|");
    for (const auto& w : f.verdict.membership->wrong)
      line(fmt::format("| {} | {} | {} | {} | {} | {} | {} |", w.applied_in_step, w.micro_batch.micro_batch, w.micro_batch.step,
                       w.micro_batch.rank, w.multiplicity.to_string(), w.applied_in_step == w.micro_batch.step ? 1 : 0,
                       markdown_cell(describe_membership_entry(*f.verdict.membership, w))));
  }
  line();
  line("## How to reproduce");
  line();
  line(fmt::format("1. With accumcheck: save the finding file as `{}` and run `accumcheck replay {}`; it re-runs the "
                   "scenario and reports whether it reproduces bit for bit.",
                   finding_file_name(f), finding_file_name(f)));
  line(fmt::format("2. With PyTorch alone: export the finding in accumcheck's `pytorch` format and run "
                   "`python3 {}.py`. It needs only torch, rebuilds this model and data exactly, computes the full-batch "
                   "expected gradient with autograd in float64 and a plain PyTorch accumulation loop, and prints them next "
                   "to the values above. It does not run the framework itself: run your training stack on the same data "
                   "and compare.",
                   file_stem(f)));
  line(fmt::format("3. As a regression test: accumcheck's `gtest` export is a GoogleTest that expects `{}` to hold on "
                   "`{}`; it fails while the bug is present.",
                   f.property, f.target));
  line();
  line("## Note");
  line();
  line("All values are exact rationals computed by accumcheck's deterministic simulation of the target (a behavioural "
       "model written from reading the upstream source), not measurements from running the real software. Decimals are "
       "the nearest doubles, for reading only.");
  return out;
}

}  // namespace accumcheck::fuzz
