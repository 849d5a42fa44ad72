// Reproducers: JSON, GoogleTest, PyTorch, DeepSpeed and Markdown exports of a finding.
//
// Each exporter embeds the exact scenario as JSON (sim/json/scenario_json.h) instead of re-deriving it in the
// target language, so the reproducer rebuilds the very scenario that failed, rationals and all. Text is
// assembled from fixed templates with the finding's values substituted; nothing depends on time or paths.
#include "surface/reproducer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "fuzz/campaign.h"
#include "surface/explain.h"
#include "sim/external/adapter_protocol.h"
#include "sim/json/scenario_json.h"
#include "sim/loss_normaliser.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives

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
// Build it against an installed accumcheck (cmake --install; docs/targets.md section 10): this CMakeLists.txt
// beside the file, then cmake -S . -B build -DCMAKE_PREFIX_PATH=<prefix> && cmake --build build && build/finding_test
//   cmake_minimum_required(VERSION 3.25)
//   project(finding_test LANGUAGES CXX)
//   set(CMAKE_CXX_STANDARD 20)
//   set(CMAKE_CXX_STANDARD_REQUIRED ON)
//   find_package(accumcheck 0.1 REQUIRED)
//   find_package(GTest REQUIRED)
//   enable_testing()
//   add_executable(finding_test @FILE@)
//   target_link_libraries(finding_test PRIVATE accumcheck::fuzz GTest::gtest_main)
//   add_test(NAME finding_test COMMAND finding_test)
// accumcheck::fuzz brings the include path and every library it needs. A finding on an engine of your own
// needs that engine registered (sim::register_engine_model) before the test runs.
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

constexpr const char* kPytorchHead = R"py(#!/usr/bin/python3
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

# Two float64 computations of one exact value agree to a few ulps of the values summed; beyond this it differs.
RELATIVE_TOLERANCE = 1e-9
LINES_MAX = 400


)py";

// The model, data, loss coefficients and full-batch expectation, shared by the PyTorch and DeepSpeed scripts. It
// reads the globals FINDING (with "scenario", "parameter_names", "parameter_shapes", "missing_gradient_is_zero"),
// SCENARIO, TRAINING, MODEL, NAMES, SHAPES, FROZEN and DTYPE (torch.float64), which it defines first from the
// finding embedded as @JSON@; each script's head imports json and torch before it.
constexpr const char* kModelPython = R"py(FINDING = json.loads(r'''@JSON@''')

SCENARIO = FINDING["scenario"]
TRAINING = SCENARIO["training"]
MODEL = TRAINING["model"]
ENGINE = SCENARIO["engine"]
NAMES = FINDING["parameter_names"]
SHAPES = FINDING["parameter_shapes"]
FROZEN = set(MODEL["frozen"])
DTYPE = torch.float64


def to_float(text):
    """An exact rational string ("n" or "n/d") rounded once to the nearest double."""
    return float(Fraction(text))


def rounded(value, dtype=DTYPE):
    """An exact rational (a Fraction or its string) rounded once to the nearest value of dtype (torch.float64 or
    torch.float32), ties to even; going through a double first could round twice for float32."""
    value = Fraction(value)
    if dtype == torch.float64:
        return float(value)  # int / int true division rounds correctly
    near = torch.tensor(float(value), dtype=dtype)
    up, down = (torch.nextafter(near, torch.tensor(v, dtype=dtype)) for v in (float("inf"), float("-inf")))
    finite = [t for t in (near, up, down) if bool(torch.isfinite(t))]
    if not finite:
        return near.item()
    return min(finite, key=lambda t: (abs(Fraction(t.item()) - value), t.view(torch.int32).item() % 2)).item()


def matrix(rows, cols, dtype=DTYPE):
    """A JSON matrix (rows of rational strings) as a [len(rows), cols] tensor of dtype."""
    return torch.tensor([rounded(v, dtype) for row in rows for v in row], dtype=dtype).reshape(len(rows), cols)


def initial_parameters(dtype=DTYPE):
    params = []
    for name, (_rows, cols) in zip(NAMES, SHAPES, strict=True):
        p = matrix(SCENARIO["initial_parameters"][name], cols, dtype).clone()
        p.requires_grad_(name not in FROZEN)
        params.append(p)
    return params


def token_batch(sequences, coefficients, dtype=DTYPE):
    """The tokens of `sequences` as one batch; token t of sequence i has weight w_t = c_i M_it (exact, then rounded
    once to dtype)."""
    kind = MODEL["kind"]
    features, ids, experts, targets, weights = [], [], [], [], []
    for seq, c in zip(sequences, coefficients, strict=True):
        for t, mask in enumerate(seq["loss_mask"]):
            if kind == "tied_embedding":
                ids.append(seq["token_ids"][t])
            else:
                features.extend(rounded(v, dtype) for v in seq["features"][t])
            if kind == "linear" and MODEL["expert_count"] > 1:
                experts.append(seq["expert_index"][t])
            targets.extend(rounded(v, dtype) for v in seq["targets"][t])
            weights.append(rounded(Fraction(c) * mask, dtype))
    n = len(weights)
    width = MODEL["vocab_size"] if kind == "tied_embedding" else MODEL["output_size"]
    return {
        "n": n,
        "x": None if kind == "tied_embedding" else torch.tensor(features, dtype=dtype).reshape(n, MODEL["input_size"]),
        "ids": torch.tensor(ids, dtype=torch.long),
        "expert": torch.tensor(experts, dtype=torch.long),
        "y": torch.tensor(targets, dtype=dtype).reshape(n, width),
        "w": torch.tensor(weights, dtype=dtype),
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


def window_gradient(params, window):
    """Backward of the window objective J_s = sum_i c_i sum_t M_it l_it over every sequence of every micro-batch of
    every rank of `window` at once, into the .grad of `params`."""
    sequences = [seq for micro_batch in window for rank in micro_batch for seq in rank]
    backward(weighted_loss(params, token_batch(sequences, window_global_coefficients(sequences))))


def full_batch_expected():
    """Each step's applied gradient of full-batch training: one backward of J_s per step."""
    params = initial_parameters()
    optimizer = make_optimizer(params)
    applied = []
    for window in SCENARIO["steps"]:
        window_gradient(params, window)
        applied.append(finish_step(params, optimizer))
    return applied


)py";

constexpr const char* kPytorchTail = R"py(def plain_accumulation_loop():
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

// ---------------------------------------------------------------------------------------------------------
// DeepSpeed: the same model, data and coefficients (kModelPython), run through the real engine.

constexpr const char* kDeepSpeedHead = R"py(#!/usr/bin/env python3
# ruff: noqa: E501
# (The finding is embedded below as JSON; its long values stay on one line.)
"""@TITLE@

Reproducer exported by accumcheck, a property-based fuzzer for gradient accumulation, from a finding on
@TARGET@ (@TARGET_KIND@).
Property: @PROPERTY@: @PROPERTY_DESCRIPTION@
Recorded verdict: @MESSAGE@
Configuration: @CONFIGURATION@

Standalone: this script needs torch and deepspeed and nothing else (no accumcheck, no numpy). It runs on CPU with
DeepSpeed's CPU accelerator and gloo on 127.0.0.1, in @WORLD_DESCRIPTION@, and
  1. rebuilds the model, its initial parameters and every micro-batch exactly from the JSON below: rationals are
     strings ("n" or "n/d"), rounded once to float32 for DeepSpeed and to float64 for the expected values.
     Parameters in the order of FINDING["parameter_names"], shapes [rows, cols] of FINDING["parameter_shapes"]
     (vectors are [n, 1] columns), frozen ones with requires_grad=False:
       linear          y_hat = W_e x + b_e, e the expert a token is routed to (e = 0 with one expert)
       mlp             y_hat = W2 relu(W1 x + b1) + b2
       tied_embedding  y_hat = E E[id] + b (one table for the input lookup and the output projection)
     token loss l = 1/2 |y_hat - y|^2; masked tokens go through the forward pass with weight 0;
  2. builds the DeepSpeed config of the scenario (FINDING["deepspeed_config"], printed when it runs) with every
     knob that affects accumulation, reduction, clipping or the optimizer pinned, since DeepSpeed changes defaults
     between releases, and a torch.optim optimizer (single-tensor implementation, every option pinned); calls
     deepspeed.initialize and checks that the engine reports the configured G, clipping, stage, offload and fp32;
  3. follows the scenario's engine calls literally (FINDING["calls"]): `backward` is engine(batch) and
     engine.backward(loss) of this rank's sequences of that micro-batch, `set_boundary` is
     engine.set_gradient_accumulation_boundary(value), `step` is engine.step(), `end_window` closes an
     accumulation window, `checkpoint` is engine.save_checkpoint into a temporary folder, a fresh model,
     optimizer and engine, and engine.load_checkpoint;
  4. reads what the optimizer consumed: a torch.optim step pre-hook copies the .grad of every tensor the optimizer
     is about to step when DeepSpeed calls optimizer.step(), after DeepSpeed's reduction, accumulation, offload
     copies and clipping. ZeRO-0: the model's parameters. ZeRO-1/2: the fp32 flat partition of each rank, cut into
     parameters by their offsets in DeepSpeed's flat buffer (the parameters are views into it), the ranks'
     partitions gathered in rank order;
  5. compares every element with the expected gradient and prints both.

The loss. DeepSpeed multiplies each micro-batch's loss by 1/G itself (G = gradient_accumulation_steps) and
averages gradients over the W ranks, so a correct user backpropagates, on rank r for micro-batch k of window s,
    loss = G W sum_i c_i sum_t M_it l_t
over the rank's sequences i, with the window-global coefficients c_i of the loss aggregation "@AGGREGATION@"
(token and sequence counts over every micro-batch of every rank of the window; each c_i G W is rounded once to
float32). A correct engine then hands the optimizer the gradient of the window objective
J_s = sum_i c_i sum_t M_it l_t over the whole window: the full-batch gradient, clipped by its global norm when
the config sets gradient_clipping.

Expected values. Where the finding recorded accumcheck's exact expected value (property 1), that value; else
J_s's gradient computed here with torch autograd in float64, at the parameters the engine held when window s
began (so that a later window is checked on its own, whatever rounding the optimizer steps before it did).
Tolerance. The rounding bound the finding recorded for the value, where it has one; else
RELATIVE_TOLERANCE * m + ABSOLUTE_TOLERANCE, with m the larger of |expected| and the sum over micro-batches and
ranks of the absolute values of their float64 gradients (float32 accumulation errs relative to the terms it
adds, not to their sum). float32 rounding stays far below it (at most 2% of it on the scenarios accumcheck's
tests ran); a dropped, doubled or rescaled micro-batch does not.

Exit status: 0 every value matches (the defect is not there); 1 some value differs (the defect is there);
2 the run did not complete (deepspeed did not import, DeepSpeed raised, or a rank did not finish).

Run:  python3 @FILE@
With accumcheck's side-by-side releases (scripts/deepspeed-env.sh), from accumcheck's source folder:
      PYTHONPATH=.venv/deepspeed/@RELEASE@:.venv/deepspeed/_deps .venv/torch/bin/python @FILE@
      (any other release: replace @RELEASE@; .venv/deepspeed lists the installed ones)
Replay in accumcheck: @REPLAY@
"""

import argparse
import contextlib
import datetime
import json
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from fractions import Fraction

# Settings for DeepSpeed on a CPU, made before torch or deepspeed is imported. Each is a path DeepSpeed itself
# takes on some machine; none changes DeepSpeed's code.
# - DeepSpeed's documented override of its accelerator detection: the CPU accelerator (with gloo below).
os.environ["DS_ACCELERATOR"] = "cpu"
# - torch 2.6 made torch.load(weights_only=True) the default; DeepSpeed 0.15's load_checkpoint calls torch.load on
#   its own checkpoint files (which hold its config objects) without weights_only, and from 0.16 on passes
#   weights_only=False itself. This is torch's documented switch back to the old default; only the checkpoint
#   this script has just written is loaded.
os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
# - triton made unimportable: the CUDA build of torch ships triton, and DeepSpeed 0.15 - 0.16 import their Triton
#   inference kernels whenever triton imports, which fails on a machine without a GPU driver ("0 active
#   drivers"). A CPU build of torch has no triton and DeepSpeed takes its HAS_TRITON = False path: this is that
#   path. (The fourth setting, after the import, is in import_deepspeed.)
sys.modules["triton"] = None

import torch  # noqa: E402

RELATIVE_TOLERANCE = 1e-5
ABSOLUTE_TOLERANCE = 1e-6
CLIP_EPSILON = 1e-6  # DeepSpeed's and torch.nn.utils.clip_grad_norm_'s: coefficient max_norm / (norm + 1e-6)
COLLECTIVE_TIMEOUT_S = 60  # gloo's timeout: a rank whose partner failed does not wait for ever
RANK_TIMEOUT_S = 900  # the most a world-size-W run may take before its ranks are killed
SHM_COMM_OP = "deepspeed_shm_comm"
LINES_MAX = 400


)py";

constexpr const char* kDeepSpeedTail = R"py(def window_coefficients(window):
    """c_i of every sequence of `window` as [micro-batch][rank][sequence], with window-global counts."""
    flat = iter(window_global_coefficients([seq for micro_batch in window for rank in micro_batch for seq in rank]))
    return [[[next(flat) for _ in rank] for rank in micro_batch] for micro_batch in window]


def import_deepspeed():
    """deepspeed on the CPU accelerator. DeepSpeed logs on stdout; here its log goes to stderr, so that stdout
    holds this script's report."""
    with contextlib.redirect_stdout(sys.stderr):
        import deepspeed
        import deepspeed.ops
        from deepspeed.accelerator import get_accelerator

        # The fourth setting: the shared-memory comm op (deepspeed_shm_comm, used by inference all-reduce only)
        # marked incompatible, which is what DeepSpeed finds on a machine that cannot build it: the comm backend
        # then starts without it instead of JIT-compiling it with g++ (about 75 s) at the first initialize.
        deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False
        device = get_accelerator().device_name()
    if device != "cpu":
        raise RuntimeError(f"DeepSpeed picked accelerator {device!r}, not cpu")
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    return deepspeed


def deepspeed_config(ds):
    """The config passed to deepspeed.initialize: FINDING["deepspeed_config"], plus the zero_optimization fields
    of newer releases pinned to the behaviour of the older ones where this release knows them (DeepSpeed's
    config models refuse unknown keys)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    config = json.loads(json.dumps(FINDING["deepspeed_config"]))
    fields = DeepSpeedZeroConfig.model_fields
    if "compute_grad_norm" in fields:
        config["zero_optimization"]["compute_grad_norm"] = True  # the norm clipping divides by
    if "parameter_alignment" in fields:
        config["zero_optimization"]["parameter_alignment"] = False  # no padding between parameters
    return config


def expected_engine_state():
    """What the engine's accessors must return once built from the config."""
    mgn = TRAINING["max_grad_norm"]
    return {
        "gradient_accumulation_steps": ENGINE["accumulation_steps"],
        "gradient_clipping": 0.0 if mgn is None else to_float(mgn),
        "zero_optimization_stage": ENGINE["zero_stage"],
        "fp16_enabled": False,
        "bfloat16_enabled": False,
        "zero_cpu_offload": ENGINE["offload"],
    }


def build_optimizer(parameters):
    """The scenario's torch.optim optimizer, single-tensor implementation, every option pinned."""
    o = TRAINING["optimizer"]
    common = {"lr": to_float(o["lr"]), "weight_decay": to_float(o["weight_decay"]), "maximize": False,
              "foreach": False, "differentiable": False, "fused": False}
    if o["kind"] == "sgd":
        return torch.optim.SGD(parameters, momentum=to_float(o["momentum"]), dampening=to_float(o["dampening"]),
                               nesterov=o["nesterov"], **common)
    kind = torch.optim.Adam if o["kind"] == "adam" else torch.optim.AdamW
    return kind(parameters, betas=(to_float(o["beta1"]), to_float(o["beta2"])), eps=to_float(o["eps"]),
                amsgrad=False, capturable=False, **common)


def canonical_layout(grad):
    """The gradient with the strides of a freshly allocated tensor of its shape (the values untouched). Biases are
    [O, 1] columns here; a gradient of such a column can reach DeepSpeed with strides (1, O), which torch counts as
    contiguous, and ZeRO-0's flatten of a one-tensor bucket then aliases it. A real model's 1-D bias never has that
    layout."""
    if grad.stride() == torch.empty(grad.shape, device="meta").stride():
        return grad
    return grad.clone(memory_format=torch.contiguous_format)


class SyntheticModel(torch.nn.Module):
    """The scenario's model as a torch.nn.Module: the parameters NAMES in that order ("expert0.weight" is the
    parameter `weight` of the submodule `expert0`), and forward(batch) = the batch's weighted loss."""

    def __init__(self, tensors):
        super().__init__()
        for name, tensor in zip(NAMES, tensors, strict=True):
            owner = self
            *path, leaf = name.split(".")
            for part in path:
                if part not in dict(owner.named_children()):
                    owner.add_module(part, torch.nn.Module())
                owner = owner.get_submodule(part)
            owner.register_parameter(leaf, torch.nn.Parameter(tensor.detach().clone(), requires_grad=name not in FROZEN))
        assert [name for name, _ in self.named_parameters()] == NAMES

    def forward(self, batch):
        return weighted_loss([self.get_parameter(name) for name in NAMES], batch)


class Run:
    """The scenario's engine calls on one rank, and what the optimizer consumed at each of its steps."""

    def __init__(self, ds, rank, world_size, checkpoint_dir):
        self.ds, self.rank, self.world_size, self.checkpoint_dir = ds, rank, world_size, checkpoint_dir
        self.stage = ENGINE["zero_stage"]
        self.loss_scale = Fraction(ENGINE["accumulation_steps"] * world_size)  # G W
        self.coefficients = [window_coefficients(window) for window in SCENARIO["steps"]]
        self.config = deepspeed_config(ds)
        self.applied = []  # per window: the gradient of each optimizer step in it, by parameter name
        self.pending = []  # optimizer steps since the last end_window
        self.start_parameters = []  # per window: float64 copies of the parameters when it began
        self.engine = None
        self.build_engine()

    def build_engine(self):
        model = SyntheticModel(initial_parameters(torch.float32))
        for p in model.parameters():
            if p.requires_grad:
                p.register_hook(canonical_layout)
        optimizer = build_optimizer(list(model.parameters()))
        optimizer.register_step_pre_hook(self.capture)
        engine, _, _, _ = self.ds.initialize(model=model, optimizer=optimizer, config=self.config,
                                             dist_init_required=False)
        for accessor, want in expected_engine_state().items():
            got = getattr(engine, accessor)()
            if got != want:
                raise RuntimeError(f"engine.{accessor}() is {got!r}, the config asked for {want!r}")
        self.engine, self.model, self.captured = engine, model, None
        names = {id(p): n for n, p in model.named_parameters()}
        self.layout = []  # ZeRO-1/2: (fp32 partition of this rank, [(name, offset, numel, shape)]) per group
        if self.stage in (1, 2):
            zero = engine.optimizer
            for i, flat in enumerate(zero.bit16_groups_flat):
                entries = []
                for p in zero.bit16_groups[i]:
                    offset, rem = divmod(p.data_ptr() - flat.data_ptr(), p.element_size())
                    if rem or not 0 <= offset <= flat.numel() - p.numel():
                        raise RuntimeError(f"parameter {names[id(p)]} is not a view of its flat buffer")
                    entries.append((names[id(p)], offset, p.numel(), tuple(p.shape)))
                part = zero.single_partition_of_fp32_groups[i]
                if part.numel() != flat.numel() // self.world_size:
                    raise RuntimeError(f"fp32 partition of group {i} has {part.numel()} elements, expected "
                                       f"{flat.numel() // self.world_size}")
                self.layout.append((part, entries))
        elif self.stage != 0:
            raise RuntimeError(f"ZeRO stage {self.stage}: this script reads the gradient of stages 0, 1 and 2")

    def capture(self, optimizer, args, kwargs):
        """Optimizer step pre-hook: the gradient of every tensor the optimizer is about to step."""
        got = {} if self.captured is None else self.captured
        for group in optimizer.param_groups:
            for p in group["params"]:
                got[id(p)] = None if p.grad is None else p.grad.detach().clone()
        self.captured = got

    def gather(self, t):
        """The partitions of a flat tensor on every rank, concatenated in rank order."""
        if self.world_size == 1:
            return t
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, t.contiguous())
        return torch.cat(parts)

    def all_ranks(self, flag):
        t = torch.tensor([1 if flag else 0])
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
        return bool(t.item())

    def by_name(self, read):
        """{name: read(tensor) as nested lists, or None} for what the optimizer steps; frozen parameters None."""
        out = dict.fromkeys(NAMES)
        if self.stage == 0:
            for name, p in self.model.named_parameters():
                value = read(p)
                out[name] = None if value is None else value.detach().reshape(p.shape).tolist()
            return out
        for part, entries in self.layout:
            value = read(part)
            present = self.world_size == 1 or self.all_ranks(value is not None)
            if value is None or not present:
                continue
            full = self.gather(value.detach().float())
            for name, offset, numel, shape in entries:
                out[name] = full[offset:offset + numel].reshape(shape).tolist()
        return out

    def snapshot(self):
        """The parameters as the engine holds them now, as float64 copies by name."""
        return {n: p.detach().to(DTYPE).clone() for n, p in self.model.named_parameters()}

    def backward(self, s, k):
        sequences = SCENARIO["steps"][s][k][self.rank]
        weights = [c * self.loss_scale for c in self.coefficients[s][k][self.rank]]
        loss = self.engine(token_batch(sequences, weights, torch.float32))
        self.engine.backward(loss)

    def step(self):
        self.captured = None
        self.engine.step()
        if self.captured is not None:
            captured, self.captured = self.captured, None
            self.pending.append(self.by_name(lambda t: captured.get(id(t))))

    def checkpoint(self, s):
        folder = os.path.join(self.checkpoint_dir, "checkpoint")
        tag = f"after-step-{s}"
        self.engine.save_checkpoint(folder, tag=tag)
        old = self.engine
        self.build_engine()
        if hasattr(old, "destroy"):
            old.destroy()
        path, _ = self.engine.load_checkpoint(folder, tag=tag, load_optimizer_states=True,
                                              load_lr_scheduler_states=False)
        if path is None:
            raise RuntimeError(f"load_checkpoint found no checkpoint {tag} in {folder}")

    def run(self):
        for call in FINDING["calls"]:
            name = call["call"]
            if name != "checkpoint" and len(self.start_parameters) == len(self.applied):
                self.start_parameters.append(self.snapshot())  # the first call of a window
            if name == "set_boundary":
                self.engine.set_gradient_accumulation_boundary(call["value"])
            elif name == "backward":
                self.backward(call["step"], call["micro_batch"])
            elif name == "step":
                self.step()
            elif name == "end_window":
                self.applied.append(self.pending)
                self.pending = []
            elif name == "checkpoint":
                self.checkpoint(call["step"])
            else:
                raise RuntimeError(f"unknown engine call {name!r}")
        if hasattr(self.engine, "destroy"):
            self.engine.destroy()


def expected_gradient(start, window):
    """The window objective's float64 gradient at the parameters `start`, clipped as the config says, and the
    magnitude of each element's terms (the sum over micro-batches and ranks of their gradients' absolute values),
    by parameter as [rows, cols] tensors; None for a parameter without gradient."""

    def fresh():
        return [start[name].clone().requires_grad_(name not in FROZEN) for name in NAMES]

    params = fresh()
    window_gradient(params, window)
    gradient = [None if p.grad is None else p.grad.detach().clone() for p in params]
    magnitude = [torch.zeros(rows, cols, dtype=DTYPE) for rows, cols in SHAPES]
    coefficients = window_coefficients(window)
    for k, micro_batch in enumerate(window):
        for r, sequences in enumerate(micro_batch):
            part = fresh()
            backward(weighted_loss(part, token_batch(sequences, coefficients[k][r])))
            for m, p in zip(magnitude, part, strict=True):
                if p.grad is not None:
                    m += p.grad.abs()
    if TRAINING["max_grad_norm"] is not None:
        norm = math.sqrt(sum(float((g * g).sum()) for g in gradient if g is not None))
        coefficient = min(1.0, to_float(TRAINING["max_grad_norm"]) / (norm + CLIP_EPSILON))
        gradient = [None if g is None else g * coefficient for g in gradient]
        magnitude = [m * coefficient for m in magnitude]
    if FINDING["missing_gradient_is_zero"]:
        # ZeRO-1/2 step a flat partition: a trainable parameter that got no gradient is stepped with zeros.
        gradient = [torch.zeros(rows, cols, dtype=DTYPE) if g is None and name not in FROZEN else g
                    for g, name, (rows, cols) in zip(gradient, NAMES, SHAPES, strict=True)]
    return gradient, magnitude


def show(value):
    return "None" if value is None else repr(value)


def compare(run):
    """Prints expected against actual for every step and element; returns the number of values that differ."""
    recorded = {m["where"]: m for m in FINDING["recorded_expected"]}
    failed = lines = 0

    def say(text, differs=False):
        nonlocal lines
        lines += 1
        if lines <= LINES_MAX or differs:
            print(text)

    for s, window in enumerate(SCENARIO["steps"]):
        steps = run.applied[s]
        if len(steps) != 1:
            failed += 1
            say(f"  step {s} / applied: expected one optimizer step in this window, DeepSpeed made {len(steps)}"
                "   <- DIFFERS", True)
            if not steps:
                continue
        actual = steps[-1]
        gradient, magnitude = expected_gradient(run.start_parameters[s], window)
        for p, name in enumerate(NAMES):
            if name in FROZEN:
                say(f"  step {s} / gradient / {name}: frozen (requires_grad=False), not stepped")
                continue
            rows, cols = SHAPES[p]
            for c in range(cols):
                for r in range(rows):
                    where = f"step {s} / gradient / {name}[{r},{c}]"
                    here = None if gradient[p] is None else gradient[p][r, c].item()
                    a = None if actual[name] is None else actual[name][r][c]
                    source = "float64 here"
                    expected = here
                    if where in recorded:
                        expected, source = Fraction(recorded[where]["expected"]), "exact, from the finding"
                    if expected is None or a is None:
                        ok = expected is None and a is None
                        tolerance = None
                    else:
                        if where in recorded and recorded[where].get("tolerance") is not None:
                            tolerance = Fraction(recorded[where]["tolerance"])
                        else:
                            m = max(abs(float(expected)), magnitude[p][r, c].item())
                            tolerance = Fraction(RELATIVE_TOLERANCE * m + ABSOLUTE_TOLERANCE)
                        ok = math.isfinite(a) and abs(Fraction(a) - Fraction(expected)) <= tolerance
                    failed += not ok
                    shown = show(None if expected is None else float(expected))
                    text = f"  {where}: expected {shown} ({source}), actual {show(a)}"
                    if tolerance is not None:
                        gap = abs(a - float(expected)) if math.isfinite(a) else a
                        text += f", |actual - expected| {gap:.3g} {'<=' if ok else '>'} tolerance {float(tolerance):.3g}"
                    say(text + ("" if ok else "   <- DIFFERS"), not ok)
                    if where in recorded and here is not None and expected is not None:
                        m = max(abs(here), magnitude[p][r, c].item())
                        if abs(here - float(expected)) > RELATIVE_TOLERANCE * m + ABSOLUTE_TOLERANCE:
                            say(f"    (note: this script's float64 value here is {here!r}, which disagrees with the "
                                "finding's exact one)", True)
    if lines > LINES_MAX:
        print(f"  ... {lines - LINES_MAX} more matching values not shown")
    return failed


def run_rank(rank, world_size, port, checkpoint_dir):
    """One rank: import DeepSpeed, run the engine calls; rank 0 prints the report. Returns the exit status."""
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "LOCAL_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    try:
        ds = import_deepspeed()
    except Exception:
        traceback.print_exc()
        print("deepspeed does not import: install it (pip install deepspeed) or put a release on PYTHONPATH")
        return 2
    if rank == 0:
        print(f"deepspeed {ds.__version__} ({os.path.dirname(ds.__file__)})")
        print(f"torch {torch.__version__}, python {sys.version.split()[0]}, world size {world_size}, CPU accelerator, gloo")
        print()
        print(f"accumcheck finding: {FINDING['target']} fails {FINDING['property']}")
        print(f"  {FINDING['verdict']['message']}")
        print(f"  {FINDING['configuration']}")
        print()
        print("DeepSpeed config passed to deepspeed.initialize:")
        print(json.dumps(deepspeed_config(ds), indent=2, sort_keys=True))
        print()
        sys.stdout.flush()
    # One intra-op thread and deterministic kernels, as accumcheck's adapter runs: a reduction split over threads
    # adds in an order that depends on the thread count, and deterministic mode fills new tensors with NaN, so
    # that a read of uninitialised memory shows.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            ds.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False, rank=rank,
                                world_size=world_size, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
            run = Run(ds, rank, world_size, checkpoint_dir)
            run.run()
    except Exception as e:
        traceback.print_exc()
        print(f"the run did not complete on rank {rank}: DeepSpeed raised {type(e).__name__}: {e}")
        return 2
    if rank != 0:
        return 0
    print("what the optimizer consumed at each step, against the full-batch expected gradient:")
    failed = compare(run)
    print()
    print("recorded in the finding (what accumcheck saw on " + FINDING["target"] + "; exact rationals, nearest doubles):")
    for m in FINDING["verdict"]["mismatches"]:
        print(f"  {m['where']}: expected {m['expected']} ({show(to_float(m['expected']))}), "
              f"actual {m['actual']} ({show(to_float(m['actual']))})")
    if not FINDING["verdict"]["mismatches"]:
        print("  (no value mismatches recorded)")
    print()
    if failed:
        print(f"STILL FAILS on deepspeed {ds.__version__}: {failed} value(s) differ from the full-batch gradient")
    else:
        print(f"PASSES on deepspeed {ds.__version__}: every value matches the full-batch gradient")
    return 1 if failed else 0


def free_port():
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(world_size, checkpoint_dir):
    """World size above 1: this script once per rank (--rank), joined by gloo on 127.0.0.1 at a free port. The
    exit status is rank 0's when every rank finished, else 2."""
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r), "--port", str(port),
                               "--checkpoint-dir", checkpoint_dir],
                              stdout=None if r == 0 else subprocess.DEVNULL) for r in range(world_size)]
    deadline = time.monotonic() + RANK_TIMEOUT_S
    codes = [None] * world_size
    while None in codes and time.monotonic() < deadline:
        codes = [p.poll() for p in ranks]
        if any(c not in (None, 0, 1) for c in codes):
            break  # a rank failed: the others would wait in a collective until gloo's timeout
        time.sleep(0.1)
    for r, p in enumerate(ranks):
        if p.poll() is None:
            p.kill()
            print(f"rank {r} did not finish (killed)", file=sys.stderr)
        p.wait()
    codes = [p.returncode for p in ranks]
    if codes[0] in (0, 1) and all(c == 0 for c in codes[1:]):
        return codes[0]
    print(f"the run did not complete: exit status of ranks 0..{world_size - 1}: {codes}")
    return 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, help="(internal) run this rank of a multi-process run")
    parser.add_argument("--port", type=int, help="(internal) the gloo rendezvous port")
    parser.add_argument("--checkpoint-dir", help="(internal) the ranks' shared checkpoint folder")
    args = parser.parse_args()
    world_size = ENGINE["rank_count"]
    if args.rank is not None:
        return run_rank(args.rank, world_size, args.port, args.checkpoint_dir)
    with tempfile.TemporaryDirectory(prefix="deepspeed-reproducer-") as folder:
        if world_size > 1:
            return launch(world_size, folder)
        return run_rank(0, 1, free_port(), folder)


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
    case ExportFormat::deepspeed: return "deepspeed";
    case ExportFormat::markdown: return "markdown";
  }
  return "?";
}

ExportFormat parse_export_format(std::string_view text) {
  for (auto f : {ExportFormat::json, ExportFormat::gtest, ExportFormat::pytorch, ExportFormat::deepspeed, ExportFormat::markdown})
    if (to_string(f) == text) return f;
  throw std::invalid_argument("unknown export format '" + std::string(text) +
                              "' (expected json, gtest, pytorch or markdown; deepspeed for a finding on DeepSpeed)");
}

std::string_view file_suffix(ExportFormat format) {
  switch (format) {
    case ExportFormat::json: return ".json";
    case ExportFormat::gtest: return "_test.cpp";
    case ExportFormat::pytorch: return ".py";
    case ExportFormat::deepspeed: return "_deepspeed.py";
    case ExportFormat::markdown: return ".md";
  }
  return "";
}

std::string export_finding(const Finding& finding, ExportFormat format) {
  switch (format) {
    case ExportFormat::json: return export_json(finding);
    case ExportFormat::gtest: return export_gtest(finding);
    case ExportFormat::pytorch: return export_pytorch(finding);
    case ExportFormat::deepspeed: return export_deepspeed(finding);
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
                     {"@REPLAY@", replay_command(f)},
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
                                "this finding is of " + f.property + ": replay it with " + replay_program() + " replay");
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
                  {"replay", replay_command(f)}};
  // ASCII only, and no single quote anywhere (JSON allows \u0027 for it inside strings; outside strings JSON has
  // none), so the text is safe inside a Python r'''...''' literal.
  std::string text = readable_json(data, true);
  replace_all(text, "'", "\\u0027");

  return substitute(std::string(kPytorchHead) + kModelPython + kPytorchTail,
                    {{"@TARGET@", docstring_text(f.target)},
                     {"@PROPERTY_DESCRIPTION@", docstring_text(property_description(f))},
                     {"@PROPERTY@", docstring_text(f.property)},
                     {"@MESSAGE@", docstring_text(f.verdict.message)},
                     {"@G@", std::to_string(run.engine.accumulation_steps)},
                     {"@R@", std::to_string(run.engine.rank_count)},
                     {"@LAYER@", docstring_text(layer)},
                     {"@FILE@", file_stem(f) + std::string(file_suffix(ExportFormat::pytorch))},
                     {"@REPLAY@", docstring_text(replay_command(f))},
                     {"@JSON@", text}});
}

namespace {

// The configuration table, the data table and the whole scenario as JSON (folded): the "Minimal reproducer"
// section of both markdown exports, appended to `out`. `run` is the scenario as the target runs it.
void markdown_scenario(std::string& out, const Finding& f, const sim::Scenario& run) {
  auto line = [&](const std::string& text = {}) { out += text + "\n"; };
  const sim::Scenario& s = f.scenario;
  const sim::EngineConfig& e = s.engine;
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
}


// ---------------------------------------------------------------------------------------------------------
// DeepSpeed exports

// The DeepSpeed releases accumcheck installs side by side (scripts/deepspeed-env.sh, RELEASES; one
// adapters/deepspeed-X.Y.Z/ folder each): the markdown of a real-DeepSpeed finding says what accumcheck's model of
// each predicts. Keep in step with the script.
constexpr std::array<std::string_view, 6> kDeepSpeedReleases{"0.15.1", "0.16.4", "0.17.6", "0.18.9", "0.19.0", "0.19.8"};
// torch as accumcheck's adapter environment pins it (adapters/requirements-torch.txt); the script prints the
// version it actually runs with.
constexpr std::string_view kAdapterTorchVersion = "2.6.0";
// ds_config.py's constants: the smallest one-bucket reduce_bucket_size, and steps_per_print "never".
constexpr int kOneBucketElementsMin = 1024;
constexpr long long kStepsPerPrintNever = 2147483647;
// World sizes the script runs: 1 in its own process, more as one process per rank. The adapter, and so every
// real finding, has 1 or 2; a simulated finding may have more, and each rank is a DeepSpeed process.
constexpr int kDeepSpeedWorldSizeMax = 8;

struct DeepSpeedTarget {
  std::string version;  // "0.16.4"
  bool real = false;    // adapter:deepspeed-X.Y.Z, the release itself; else deepspeed@X.Y.Z, accumcheck's model
};

// adapter:deepspeed-X.Y.Z[@dtype] or deepspeed@X.Y.Z, else nothing (composed stacks are not DeepSpeed alone).
std::optional<DeepSpeedTarget> deepspeed_target(std::string_view name) {
  DeepSpeedTarget t;
  if (name.starts_with("adapter:deepspeed-")) {
    t.real = true;
    name.remove_prefix(std::string_view("adapter:deepspeed-").size());
    if (const auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
  } else if (name.starts_with("deepspeed@")) {
    name.remove_prefix(std::string_view("deepspeed@").size());
  } else {
    return std::nullopt;
  }
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }))
    return std::nullopt;
  t.version = std::string(name);
  return t;
}

std::string expert_name(int e, const char* leaf) { return "expert" + std::to_string(e) + "." + leaf; }

// Why DeepSpeed (as the script drives it: fp32, ZeRO 0-2 on CPU) cannot run the scenario; empty when it can. The
// same refusals as adapters/deepspeed/worker.py (Trial.check_supported), plus what the adapter never receives.
std::string deepspeed_unsupported(const sim::Scenario& s) {
  const sim::EngineConfig& e = s.engine;
  const models::ModelSpec& m = s.training.model;
  if (e.precision != sim::Precision::full)
    return fmt::format("precision {}: the script builds an fp32 DeepSpeed config (no fp16 or bf16 section) and "
                       "compares fp32 gradients", sim::to_string(e.precision));
  if (e.loss_scaler) return "loss scaling: it belongs to DeepSpeed's fp16 mode, and the script's config is fp32";
  if (e.zero_stage == 3)
    return "ZeRO stage 3: it partitions the parameters, and the script reads the applied gradient from the flat "
           "partitions of ZeRO stages 1 and 2 (or the parameters of stage 0)";
  if (e.zero_stage < 0 || e.zero_stage > 3) return fmt::format("ZeRO stage {} does not exist", e.zero_stage);
  if (e.zero_stage == 0 && e.offload)
    return "optimizer offload with ZeRO stage 0: DeepSpeed offloads the optimizer of ZeRO stages 1 and 2 only";
  if (e.rank_count < 1 || e.rank_count > kDeepSpeedWorldSizeMax)
    return fmt::format("{} ranks: the script runs world sizes 1 to {} (one DeepSpeed process per rank)", e.rank_count,
                       kDeepSpeedWorldSizeMax);
  const auto names = models::parameter_names(m);
  const auto frozen = models::frozen_mask(m);
  std::set<std::string> trainable;
  for (std::size_t p = 0; p < names.size(); ++p)
    if (!frozen[p]) trainable.insert(names[p]);
  if (trainable.empty()) return "every parameter is frozen: DeepSpeed cannot build an optimizer over nothing";
  const bool experts = m.kind == models::ModelKind::linear && m.expert_count > 1;
  if (e.zero_stage == 0 && experts)
    return "routed experts with ZeRO stage 0: DeepSpeed then steps torch.optim directly, which skips an expert "
           "without gradient, while the expected values step it with zeros as ZeRO's flat partitions do";
  for (std::size_t st = 0; st < s.steps.size(); ++st)
    for (std::size_t k = 0; k < s.steps[st].micro_batches.size(); ++k) {
      const auto& ranks = s.steps[st].micro_batches[k].rank_sequences;
      std::set<std::set<int>> reached_per_rank;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        std::set<int> reached;
        for (const auto& seq : ranks[r])
          if (experts) reached.insert(seq.expert_index.begin(), seq.expert_index.end());
        reached_per_rank.insert(reached);
        const bool reaches_trainable =
            !experts || std::any_of(reached.begin(), reached.end(), [&](int x) {
              return trainable.contains(expert_name(x, "weight")) || trainable.contains(expert_name(x, "bias"));
            });
        if (!reaches_trainable)
          return fmt::format("micro-batch {} of step {} on rank {} reaches no trainable parameter: engine.backward "
                             "would raise in autograd", k, st, r);
      }
      if (experts && e.zero_stage > 0 && reached_per_rank.size() > 1)
        return fmt::format("micro-batch {} of step {} routes tokens to different experts on different ranks: ZeRO-1/2 "
                           "reduce from gradient hooks, so the ranks would wait in different collectives", k, st);
    }
  return {};
}

// The DeepSpeed config of the scenario, every knob pinned: adapters/deepspeed/ds_config.py's deepspeed_config,
// without the zero_optimization fields only some releases know (compute_grad_norm, parameter_alignment), which
// the script adds where the release has them. The two must agree (properties/surface/deepspeed_export_test.sh).
json deepspeed_config(const sim::Scenario& s) {
  const sim::EngineConfig& e = s.engine;
  long long element_count = 0;
  for (const auto& [rows, cols] : models::parameter_shapes(s.training.model)) element_count += static_cast<long long>(rows) * cols;
  const long long one_bucket = std::max<long long>(kOneBucketElementsMin, element_count);
  const long long bucket = e.bucket_element_count > 0 ? e.bucket_element_count : one_bucket;
  const long long allgather = std::max(one_bucket, bucket) + std::max(one_bucket, bucket) % 2;
  json zero{{"stage", e.zero_stage},
            {"contiguous_gradients", true},
            {"overlap_comm", false},
            {"reduce_scatter", true},
            {"reduce_bucket_size", bucket},
            {"allgather_partitions", true},
            {"allgather_bucket_size", allgather},
            {"use_multi_rank_bucket_allreduce", true},
            {"round_robin_gradients", false},
            {"ignore_unused_parameters", true},
            {"elastic_checkpoint", false},
            {"load_from_fp32_weights", true},
            {"zero_quantized_weights", false},
            {"zero_quantized_gradients", false}};
  if (e.offload)
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", false}, {"buffer_count", 4}, {"fast_init", false}, {"ratio", 1.0}};
  const auto& mgn = s.training.max_grad_norm;
  return json{{"train_micro_batch_size_per_gpu", 1},
              {"gradient_accumulation_steps", e.accumulation_steps},
              {"train_batch_size", e.accumulation_steps * e.rank_count},
              {"gradient_clipping", mgn ? mgn->to_double() : 0.0},
              {"prescale_gradients", false},
              {"gradient_predivide_factor", 1.0},
              {"zero_optimization", std::move(zero)},
              {"zero_allow_untested_optimizer", true},
              {"zero_force_ds_cpu_optimizer", false},
              {"wall_clock_breakdown", false},
              {"memory_breakdown", false},
              {"dump_state", false},
              {"steps_per_print", kStepsPerPrintNever}};
}

// "ZeRO-2 with CPU offload, gradient_accumulation_steps = 3, engine.step() after every backward"; the window
// sizes when they are not G ("one engine.step() per window of 2 backwards").
std::string deepspeed_setup(const sim::Scenario& run) {
  const sim::EngineConfig& e = run.engine;
  std::string out = e.zero_stage == 0 ? "ZeRO-0" : "ZeRO-" + std::to_string(e.zero_stage);
  out += e.offload ? " with CPU offload" : " without offload";
  out += fmt::format(", gradient_accumulation_steps = {}", e.accumulation_steps);
  if (e.rank_count > 1) out += fmt::format(", {} ranks", e.rank_count);
  if (e.boundary == sim::BoundaryMode::manual) out += ", set_gradient_accumulation_boundary(k == last) before each backward";
  std::vector<std::size_t> sizes;  // distinct window sizes, in order of appearance
  for (const auto& step : run.steps)
    if (std::find(sizes.begin(), sizes.end(), step.micro_batches.size()) == sizes.end()) sizes.push_back(step.micro_batches.size());
  std::string listed;
  for (std::size_t i = 0; i < sizes.size(); ++i) listed += (i > 0 ? (i + 1 == sizes.size() ? " or " : ", ") : "") + std::to_string(sizes[i]);
  const bool windows_are_g = sizes.size() == 1 && sizes[0] == static_cast<std::size_t>(e.accumulation_steps);
  if (!e.step_after_every_backward) return out + ", one engine.step() per window of " + listed + " backwards";
  out += ", engine.step() after every backward";
  return windows_are_g || sizes.empty() ? out : out + ", windows of " + listed + " micro-batches";
}

std::string deepspeed_title(const Finding& f, const DeepSpeedTarget& t, const sim::Scenario& run) {
  const std::string what = f.property == "accumulated_update_equals_full_batch_update"
                               ? "the optimizer steps a gradient that differs from the full-batch gradient"
                               : f.verdict.message;
  return fmt::format("DeepSpeed {}{}, {}: {}", t.version, t.real ? "" : " (accumcheck's model of it)", deepspeed_setup(run), what);
}

// Throws std::invalid_argument naming why the finding has no DeepSpeed script.
DeepSpeedTarget require_deepspeed(const Finding& f, const sim::Scenario& run) {
  const auto t = deepspeed_target(f.target);
  if (!t)
    throw std::invalid_argument("cannot export a DeepSpeed script for target '" + f.target +
                                "': the deepspeed format is for findings on adapter:deepspeed-X.Y.Z (the real release) "
                                "or deepspeed@X.Y.Z (accumcheck's model of it); use --format pytorch");
  if (std::string why = deepspeed_unsupported(run); !why.empty()) {
    // The membership property checks a probe with its own scalar model and data, so its scenario's model may be
    // all frozen; the same configuration's property-1 finding has the data that shows the defect.
    if (f.property == "applied_gradient_holds_each_micro_batch_once")
      why += " (applied_gradient_holds_each_micro_batch_once runs a probe with its own model and data: export the "
             "target's finding of accumulated_update_equals_full_batch_update instead)";
    throw std::invalid_argument("cannot export a DeepSpeed script for this finding: " + why);
  }
  return *t;
}

// The scenario as the target runs it; a real release runs it as it is (no preset), and asking make_target
// would start the adapter.
sim::Scenario deepspeed_run(const Finding& f) {
  const auto t = deepspeed_target(f.target);
  return t && t->real ? f.scenario : scenario_as_run(f.target, f.scenario);
}

std::string deepspeed_file_name(const Finding& f) { return file_stem(f) + std::string(file_suffix(ExportFormat::deepspeed)); }

// Up to `width` characters per line, broken at spaces, every line after the first indented by `indent`.
std::string wrapped(const std::string& text, std::size_t width, const std::string& indent) {
  std::string out, line;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    } else if (!line.empty() && line != indent) {
      line += ' ';
    }
    line += word;
    start = end + 1;
  }
  return out + line;
}

}  // namespace

std::string export_deepspeed(const Finding& f) {
  const sim::Scenario run = deepspeed_run(f);
  const DeepSpeedTarget t = require_deepspeed(f, run);
  const models::ModelSpec& spec = run.training.model;
  json shapes = json::array();
  for (const auto& [rows, cols] : models::parameter_shapes(spec)) shapes.push_back({rows, cols});
  // Property 1 compares with the exact oracle, so its recorded expected values are the full-batch gradient the
  // script checks; other properties compare with another run of the target.
  json recorded_expected = json::array();
  if (f.property == "accumulated_update_equals_full_batch_update")
    for (const auto& m : f.verdict.mismatches) {
      if (!m.where.starts_with("step ") || m.where.find(" / gradient / ") == std::string::npos) continue;
      json entry{{"where", m.where}, {"expected", m.expected.to_string()}};
      if (!m.tolerance.is_zero()) entry["tolerance"] = m.tolerance.to_string();
      recorded_expected.push_back(std::move(entry));
    }
  const std::string target_kind = t.real ? "the real DeepSpeed " + t.version + " release, driven by accumcheck's adapter"
                                         : "accumcheck's behavioural model of DeepSpeed " + t.version + ", a simulation";
  const json data{{"target", f.target},
                  {"target_kind", target_kind},
                  {"release", t.version},
                  {"release_is_real", t.real},
                  {"property", f.property},
                  {"property_description", property_description(f)},
                  {"configuration", describe_configuration(run, f.scalar)},
                  {"parameter_names", models::parameter_names(spec)},
                  {"parameter_shapes", std::move(shapes)},
                  // ZeRO-1/2 step a flat partition: a trainable parameter without gradient is stepped with zeros.
                  {"missing_gradient_is_zero", run.engine.zero_stage > 0},
                  {"deepspeed_config", deepspeed_config(run)},
                  {"calls", sim::external::engine_calls(run)},
                  {"scenario", to_json(run)},
                  {"verdict", to_json(f.verdict)},
                  {"recorded_expected", std::move(recorded_expected)},
                  {"replay", replay_command(f)}};
  // As in export_pytorch: ASCII, and no single quote, so that the text is safe inside r'''...'''.
  std::string text = readable_json(data, true);
  replace_all(text, "'", "\\u0027");
  const std::string world = run.engine.rank_count == 1
                                ? "one process (world size 1)"
                                : fmt::format("{} processes (world size {}: this script once per rank, started by itself)",
                                              run.engine.rank_count, run.engine.rank_count);
  return substitute(std::string(kDeepSpeedHead) + kModelPython + kDeepSpeedTail,
                    {{"@TITLE@", docstring_text(wrapped(deepspeed_title(f, t, run), 116, ""))},
                     {"@TARGET_KIND@", docstring_text(target_kind)},
                     {"@TARGET@", docstring_text(f.target)},
                     {"@PROPERTY_DESCRIPTION@", docstring_text(property_description(f))},
                     {"@PROPERTY@", docstring_text(f.property)},
                     {"@MESSAGE@", docstring_text(wrapped(f.verdict.message, 116, "  "))},
                     {"@CONFIGURATION@", docstring_text(wrapped(describe_configuration(run, f.scalar), 116, "  "))},
                     {"@WORLD_DESCRIPTION@", world},
                     {"@AGGREGATION@", std::string(models::to_string(run.training.aggregation.mode))},
                     {"@RELEASE@", t.version},
                     {"@FILE@", deepspeed_file_name(f)},
                     {"@REPLAY@", docstring_text(replay_command(f))},
                     {"@JSON@", text}});
}

namespace {

// What accumcheck's model of DeepSpeed `version` (deepspeed@version) gives on the scenario for property 1.
std::string predicted_outcome(const std::string& version, const sim::Scenario& s) {
  try {
    const auto target = sim::make_target("deepspeed@" + version);
    const properties::Property* property = properties::find_property("accumulated_update_equals_full_batch_update");
    if (!property) return "cannot predict (this build has no property 1)";
    if (const std::string why = target->unsupported(s); !why.empty()) return "cannot predict (" + why + ")";
    const properties::Verdict v = check_pair(*target, *property, s, sim::ScalarKind::fast_rational);
    if (v.outcome == properties::Outcome::pass) return "passes";
    if (v.outcome == properties::Outcome::fail) return "fails";
    return "cannot predict (" + v.message + ")";
  } catch (const std::exception& e) {
    return std::string("cannot predict (") + e.what() + ")";
  }
}

std::string optimizer_words(const models::OptimizerSpec& o) {
  std::string out = o.kind == models::OptimizerKind::sgd ? "torch.optim.SGD" : o.kind == models::OptimizerKind::adam ? "torch.optim.Adam" : "torch.optim.AdamW";
  out += "(lr=" + o.lr.to_string();
  if (o.kind == models::OptimizerKind::sgd) {
    if (!o.momentum.is_zero()) out += ", momentum=" + o.momentum.to_string();
    if (!o.dampening.is_zero()) out += ", dampening=" + o.dampening.to_string();
    if (o.nesterov) out += ", nesterov=True";
  } else {
    out += ", betas=(" + o.beta1.to_string() + ", " + o.beta2.to_string() + "), eps=" + o.eps.to_string();
  }
  if (!o.weight_decay.is_zero()) out += ", weight_decay=" + o.weight_decay.to_string();
  return out + ")";
}

// The markdown of a finding on a real DeepSpeed release: what an upstream issue needs, the script inline.
std::string export_deepspeed_markdown(const Finding& f, const DeepSpeedTarget& t) {
  std::string out;
  auto line = [&](const std::string& text = {}) { out += text + "\n"; };
  const sim::Scenario& run = f.scenario;  // a real release runs the scenario as it is
  const sim::EngineConfig& e = run.engine;
  std::string script, refusal;
  try {
    script = export_deepspeed(f);
  } catch (const std::invalid_argument& error) {
    refusal = error.what();
  }
  const std::string file = deepspeed_file_name(f);
  const bool property1 = f.property == "accumulated_update_equals_full_batch_update";

  line("# " + deepspeed_title(f, t, run));
  line();
  line("## Summary");
  line();
  std::string summary = fmt::format("With DeepSpeed {} ({}), ", t.version, deepspeed_setup(run));
  if (property1 && !f.verdict.mismatches.empty()) {
    const auto& m = f.verdict.mismatches.front();
    summary += fmt::format("the gradient the engine hands to the optimizer is not the gradient of the accumulation "
                           "window's loss: `{}` should be {} and is {}", m.where, decimal(m.expected), decimal(m.actual));
    if (f.verdict.mismatches.size() > 1) summary += fmt::format(" ({} values differ, listed below)", f.verdict.mismatches.size());
    summary += ".";
  } else {
    summary += fmt::format("accumcheck's property `{}` ({}) fails: {}.", f.property, property_description(f), f.verdict.message);
  }
  line(summary);
  Finding as_model = f;  // the catalogue's facts, read through accumcheck's model of the same release
  as_model.target = "deepspeed@" + t.version;
  as_model.adapter.reset();
  if (const std::string hint = catalogue_hint(as_model); !hint.empty()) {
    line();
    line("accumcheck's note: this " + hint + ".");
  }
  line();
  line("Found by accumcheck, a property-based fuzzer for gradient accumulation, which drove the unmodified release "
       "through its public engine API on CPU (`deepspeed.initialize`, `engine(batch)`, `engine.backward`, `engine.step`) "
       "and compared what the optimizer received with the exact full-batch gradient. The script below reproduces it "
       "with torch and deepspeed alone.");
  line();
  line("## Environment");
  line();
  line(fmt::format("- DeepSpeed {}, the PyPI release, unmodified (`pip install deepspeed=={}`; DeepSpeed ships a source "
                   "distribution, built with `DS_BUILD_OPS=0`: no native op is built or used)", t.version, t.version));
  line(fmt::format("- torch {} (the PyPI wheel), Python 3; the script prints the versions it runs with", kAdapterTorchVersion));
  line(fmt::format("- CPU only: DeepSpeed's CPU accelerator (`DS_ACCELERATOR=cpu`), gloo on 127.0.0.1, world size {} ({})",
                   e.rank_count, e.rank_count == 1 ? "one process" : "one process per rank"));
  line("- Optimizer: `" + optimizer_words(run.training.optimizer) +
       "` (single-tensor implementation) passed to `deepspeed.initialize`; fp32 throughout (no `fp16` or `bf16` section)");
  line("- Settings the script makes for CPU (none changes DeepSpeed's code): `triton` unimportable (the CUDA torch wheel "
       "ships it, and 0.15 - 0.16 import their Triton kernels whenever it imports, which fails without a GPU driver), the "
       "shared-memory comm op `deepspeed_shm_comm` marked incompatible (inference all-reduce only; saves a 75 s g++ "
       "build), `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` (0.15's `load_checkpoint` calls `torch.load` without "
       "`weights_only`)");
  line();
  line("## DeepSpeed config");
  line();
  line("```json");
  line(readable_json(deepspeed_config(run), false));
  line("```");
  line();
  line("Every knob that affects accumulation, reduction, clipping or the optimizer is set explicitly (defaults change "
       "between releases). On releases whose `zero_optimization` has them, the script also sets `compute_grad_norm: "
       "true` and `parameter_alignment: false`, their defaults; it prints the config it passes.");
  line();
  line("## Expected vs actual");
  line();
  line("Expected: the exact gradient of the window's whole loss, every micro-batch of every rank at once (the full-batch "
       "gradient). Actual: what DeepSpeed " + t.version + " handed the optimizer, copied by a `torch.optim` step "
       "pre-hook when DeepSpeed called `optimizer.step()`" + (e.zero_stage > 0 ? " (from its fp32 flat partition)" : "") +
       ", fp32 values read exactly. `step s / gradient / name[r,c]`: optimizer step s, parameter `name`, element [r, c].");
  line();
  if (!f.verdict.mismatches.empty()) {
    line("| where | expected | actual | actual - expected | rounding bound |");
    line("|---|---|---|---|---|");
    for (const auto& m : f.verdict.mismatches)
      line(fmt::format("| {} | {} ({}) | {} ({}) | {} | {} |", markdown_cell(m.where), m.expected.to_string(), decimal(m.expected),
                       m.actual.to_string(), decimal(m.actual), (m.actual - m.expected).to_string(),
                       m.tolerance.is_zero() ? std::string("0 (exact here)") : decimal(m.tolerance)));
  } else {
    line("No values were recorded; the verdict says what failed: " + f.verdict.message);
  }
  if (f.verdict.membership) {
    line();
    line("Membership (accumcheck gave micro-batch number id the gradient 10^id, same configuration and window shapes): " +
         f.verdict.membership->summary);
  }
  line();
  line("## The training loop");
  line();
  line(fmt::format("Each rank r backpropagates, for micro-batch k of window s, `loss = G W sum_i c_i sum_t M_it l_t` over "
                   "its sequences i (G = {}, W = {}; `l_t = 1/2 |y_hat_t - y_t|^2`, `M_it` the loss mask, `c_i` the "
                   "window-global coefficients of the `{}` aggregation): DeepSpeed scales each micro-batch's loss by 1/G "
                   "and averages over the W ranks, so a correct engine applies exactly the full-batch gradient.",
                   e.accumulation_steps, e.rank_count, models::to_string(run.training.aggregation.mode)));
  line();
  line("```python");
  line("for s, window in enumerate(windows):");
  line("    for k, batch in enumerate(window):  # this rank's sequences of micro-batch k");
  if (e.boundary == sim::BoundaryMode::manual) line("        engine.set_gradient_accumulation_boundary(k == len(window) - 1)");
  line("        loss = engine(batch)  # G W sum_i c_i sum_t M_it l_t");
  line("        engine.backward(loss)");
  if (e.step_after_every_backward) line("        engine.step()");
  if (!e.step_after_every_backward) line("    engine.step()");
  if (run.checkpoint_after_step)
    line(fmt::format("    if s == {}:  # save, then a fresh model, optimizer and engine load it", *run.checkpoint_after_step));
  line("```");
  line();
  line("## Minimal reproducer");
  line();
  markdown_scenario(out, f, run);
  line("## Reproduce");
  line();
  if (!script.empty()) {
    line("The script below is standalone (torch and deepspeed only): it rebuilds this model and data, runs the loop above "
         "through `deepspeed.initialize` on CPU, reads what the optimizer consumed and compares every element with the "
         "full-batch gradient. Exit status 1 while the bug is there, 0 once it is fixed, 2 when the run did not complete.");
    line();
    line("```sh");
    line(fmt::format("pip install torch=={} deepspeed=={}", kAdapterTorchVersion, t.version));
    line("python3 " + file);
    line("```");
    line();
    line("With accumcheck's releases side by side (`scripts/deepspeed-env.sh`), from accumcheck's source folder:");
    line();
    line("```sh");
    line(fmt::format("PYTHONPATH=.venv/deepspeed/{}:.venv/deepspeed/_deps .venv/torch/bin/python {}", t.version, file));
    line("```");
    line();
    line("<details><summary><code>" + file + "</code></summary>");
    line();
    line("```python");
    out += script;
    if (!script.ends_with("\n")) line();
    line("```");
    line();
    line("</details>");
  } else {
    line("No standalone script: " + refusal + ".");
  }
  line();
  line("## Releases");
  line();
  line("| release | this scenario |");
  line("|---|---|");
  std::vector<std::string> releases(kDeepSpeedReleases.begin(), kDeepSpeedReleases.end());
  if (std::find(releases.begin(), releases.end(), t.version) == releases.end()) releases.push_back(t.version);
  std::vector<std::string> passing;
  for (const auto& r : releases) {
    const std::string predicted = predicted_outcome(r, run);
    if (predicted == "passes") passing.push_back(r);
    std::string cell = "predicted: " + predicted;
    if (r == t.version) cell = "**fails** (measured: this finding); " + cell;
    line("| " + r + " | " + markdown_cell(cell) + " |");
  }
  line();
  std::string passes;
  for (std::size_t i = 0; i < passing.size(); ++i) passes += (i > 0 ? ", " : "") + passing[i];
  line(fmt::format("Predicted to pass: {}. Predictions are accumcheck's behavioural models of each release "
                   "(`deepspeed@X.Y.Z`, written from reading its source) run on this scenario in exact arithmetic, not "
                   "measurements; confirm one by running the script against that release (the `PYTHONPATH` line above "
                   "with its version).",
                   passes.empty() ? "none of these releases" : passes));
  line();
  line("## Found by");
  line();
  if (f.trial >= 0)
    line(fmt::format("- accumcheck campaign seed {}, trial {} (trial seed {}); shrunk from size {} to {}.", f.campaign_seed,
                     f.trial, f.trial_seed, f.original_size, f.shrunk_size));
  else
    line("- accumcheck's regression corpus, replayed on this release.");
  line(fmt::format("- Property `{}`: {}", f.property, property_description(f)));
  line(fmt::format("- Replay with accumcheck: save the finding as `{}` and run `{}`.", finding_file_name(f), replay_command(f)));
  return out;
}

}  // namespace

std::string export_markdown(const Finding& f) {
  if (const auto t = deepspeed_target(f.target); t && t->real) return export_deepspeed_markdown(f, *t);
  std::string out;
  auto line = [&](const std::string& text = {}) { out += text + "\n"; };
  const sim::Scenario& s = f.scenario;
  const sim::Scenario run = scenario_as_run(f.target, s);

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
  markdown_scenario(out, f, run);
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
  line(fmt::format("1. With accumcheck: save the finding file as `{}` and run `{}`; it re-runs the "
                   "scenario and reports whether it reproduces bit for bit.",
                   finding_file_name(f), replay_command(f)));
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

}  // namespace accumcheck::surface
