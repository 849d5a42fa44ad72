// The demo: catalogue examples through the exact oracle. Each example states the catalogue's value and checks
// that the oracle reproduces it, so the demo doubles as a smoke test of the exact core.
#include "surface/demo.h"

#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>

#include "fuzz/campaign.h"
#include "models/oracle.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives

namespace {

using models::Matrix;
using models::Rational;
using models::Sequence;

// A one-token-per-row sequence for the scalar model w: features x_t = 1, targets y_t, every token supervised.
// At w = 0 the token loss is y_t^2 / 2 and its gradient in w is -y_t.
Sequence<Rational> scalar_sequence(const std::vector<Rational>& targets) {
  Sequence<Rational> seq;
  const auto T = static_cast<Eigen::Index>(targets.size());
  seq.features = Matrix<Rational>::Constant(T, 1, Rational(1));
  seq.targets = Matrix<Rational>(T, 1);
  for (Eigen::Index t = 0; t < T; ++t) seq.targets(t, 0) = targets[static_cast<std::size_t>(t)];
  seq.loss_mask.assign(targets.size(), 1);
  return seq;
}

models::TrainingSpec scalar_spec(models::LossAggregation mode) {
  models::TrainingSpec spec;
  spec.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  spec.model.frozen = {"bias"};
  spec.aggregation.mode = mode;
  spec.optimizer.kind = models::OptimizerKind::sgd;
  spec.optimizer.lr = Rational(1LL, 10LL);
  return spec;
}

std::string show(const Rational& q) {
  if (q.is_integer()) return q.to_string();
  return fmt::format("{} (~{:.6g})", q.to_string(), q.to_double());
}

struct Checker {
  std::ostream& out;
  int failures = 0;
  void expect(const std::string& what, const Rational& actual, const Rational& expected) {
    const bool ok = actual == expected;
    failures += !ok;
    fmt::print(out, "  {:<44} {}{}\n", what, show(actual),
               ok ? "" : fmt::format("   MISMATCH: catalogue says {}", show(expected)));
  }
};

// Catalogue section 1: loss_k = c_k w, c = (1, 10, 100), G = 3. The full-batch gradient of DeepSpeed's objective
// (each micro-batch loss times 1/G) is (1 + 10 + 100) / 3 = 37; band B keeps g0 + g2 = 101/3.
void deepspeed_offload_example(Checker& check) {
  fmt::print(check.out, "1. DeepSpeed ZeRO-2 + CPU offload, G = 3, c = (1, 10, 100)  [catalogue section 1]\n");
  const std::vector<Rational> c = {Rational(1), Rational(10), Rational(100)};
  // Gradient in w of micro-batch k is c_k when its single token has target -c_k at w = 0.
  models::StepBatch<Rational> batch;
  for (const Rational& ck : c) batch.push_back(scalar_sequence({-ck}));
  const auto spec = scalar_spec(models::LossAggregation::seq_mean_token_sum);
  const models::Parameters<Rational> w0 = models::zero_parameters<Rational>(spec.model);
  const std::vector<models::StepBatch<Rational>> steps = {batch, batch};
  const auto result = models::run_oracle(spec, w0, std::span<const models::StepBatch<Rational>>(steps));
  const Rational full = result.steps[0].gradient.tensors[0](0, 0);
  check.expect("full-batch gradient (oracle)", full, Rational(37));
  // What each micro-batch contributes after DeepSpeed's 1/G, from the same model one micro-batch at a time.
  std::vector<Rational> g;
  for (const auto& seq : batch) {
    const std::vector<Sequence<Rational>> one = {seq};
    const std::vector<Rational> coef = {Rational(1LL, 3LL)};
    auto grad = models::zero_gradient<Rational>(spec.model);
    models::accumulate_gradient(spec.model, w0, std::span<const Sequence<Rational>>(one),
                                std::span<const Rational>(coef), grad);
    g.push_back(grad.tensors[0](0, 0));
  }
  check.expect("g0 + g1 + g2 (bands A and C)", g[0] + g[1] + g[2], Rational(37));
  check.expect("g0 + g2, g1 dropped (bands B1 and B2)", g[0] + g[2], Rational(101LL, 3LL));
  check.expect("grad norm reported by the oracle", result.steps[0].grad_norm, Rational(37));
  // By hand: w1 = -37/10; step 2 gradient 37 - 37/10 = 333/10; w2 = -37/10 - 333/100 = -703/100.
  check.expect("w after 2 SGD steps, lr = 1/10", result.parameters.tensors[0](0, 0), Rational(-703LL, 100LL));
}

// Catalogue section 2: one micro-batch with 1 token (loss a), one with 3 tokens (loss b each), G = 2.
void openrlhf_example(Checker& check) {
  fmt::print(check.out, "\n2. Mean of per-micro-batch means, tokens 1 and 3  [catalogue sections 2 and 3]\n");
  // Targets chosen so that at w = 0 the token losses are a = 2 and b = 8 (y = -2 and y = -4).
  const auto s1 = scalar_sequence({Rational(-2)});
  const auto s2 = scalar_sequence({Rational(-4), Rational(-4), Rational(-4)});
  const Rational a(2), b(8);
  const auto spec = scalar_spec(models::LossAggregation::token_mean);
  const auto w0 = models::zero_parameters<Rational>(spec.model);
  const std::vector<Sequence<Rational>> window = {s1, s2};
  const std::span<const Sequence<Rational>> view(window);
  const auto global = models::sequence_coefficients(spec.aggregation, view, models::count_scope(view));
  check.expect("token-mean over the window (a + 3b)/4", models::weighted_loss(spec.model, w0, view,
                                                                                std::span<const Rational>(global)),
               (a + Rational(3) * b) / Rational(4));
  // The buggy objective: token-mean within each micro-batch, then DeepSpeed's 1/G.
  Rational buggy(0);
  for (const auto& seq : window) {
    const std::vector<Sequence<Rational>> one = {seq};
    const std::span<const Sequence<Rational>> micro(one);
    auto coef = models::sequence_coefficients(spec.aggregation, micro, models::count_scope(micro));
    for (auto& ci : coef) ci /= Rational(2);
    buggy += models::weighted_loss(spec.model, w0, micro, std::span<const Rational>(coef));
  }
  check.expect("per-micro-batch token means / G (a + b)/2", buggy, (a + b) / Rational(2));
  const auto grad = models::full_batch_gradient(spec, w0, view);
  check.expect("full-batch gradient in w", grad.tensors[0](0, 0), Rational(14LL, 4LL));
}

// Every aggregation mode on one batch with an empty sequence, a fully masked one, and uneven lengths.
void aggregation_table(Checker& check) {
  fmt::print(check.out, "\n3. The five loss aggregation modes on one window  [catalogue section 4]\n");
  fmt::print(check.out, "   sequences: 1 token (y=-2), 3 tokens (y=-4), no tokens, 2 tokens all masked\n");
  auto masked = scalar_sequence({Rational(-6), Rational(-6)});
  masked.loss_mask = {0, 0};
  const std::vector<Sequence<Rational>> window = {scalar_sequence({Rational(-2)}),
                                                  scalar_sequence({Rational(-4), Rational(-4), Rational(-4)}),
                                                  scalar_sequence({}), masked};
  const std::span<const Sequence<Rational>> view(window);
  // Hand values at w = 0: token losses 2 and 8 8 8; gradients in w: 2 and 4 4 4.
  const struct {
    models::LossAggregation mode;
    Rational loss, grad;
  } rows[] = {
      {models::LossAggregation::token_mean, Rational(26LL, 4LL), Rational(14LL, 4LL)},
      {models::LossAggregation::seq_mean_token_sum, Rational(26LL, 2LL), Rational(14LL, 2LL)},
      {models::LossAggregation::seq_mean_token_mean, Rational(10LL, 2LL), Rational(6LL, 2LL)},
      {models::LossAggregation::seq_mean_token_sum_norm, Rational(26LL, 4LL), Rational(14LL, 4LL)},
      {models::LossAggregation::sum, Rational(26), Rational(14)},
  };
  for (const auto& row : rows) {
    auto spec = scalar_spec(row.mode);
    spec.aggregation.norm_constant = Rational(4);  // C = padded response length
    const auto w0 = models::zero_parameters<Rational>(spec.model);
    const auto coef = models::sequence_coefficients(spec.aggregation, view, models::count_scope(view));
    const std::string name(models::to_string(row.mode));
    check.expect(name + " loss", models::weighted_loss(spec.model, w0, view, std::span<const Rational>(coef)),
                 row.loss);
    check.expect(name + " gradient", models::full_batch_gradient(spec, w0, view).tensors[0](0, 0), row.grad);
  }
}

// One demo row: a target, whether it should be found, and the campaign that checks it.
struct Row {
  const char* target;
  bool buggy;
  const char* what;
  int rank_count_max = 3;
  std::optional<bool> offload = std::nullopt;
};

const Row kRows[] = {
    {"deepspeed@0.16.0", true, "ZeRO-2 + CPU offload drops micro-batches 1..G-2 (band B1, catalogue 1)"},
    {"deepspeed@0.19.0", false, "the fix (PRs #7967, #7981), band C"},
    {"deepspeed@0.18.0", true, "ZeRO-2 without offload keeps only the last micro-batch (0.17.6-0.18.2)", 3, false},
    {"deepspeed@0.18.3", false, "its fix (PR #7665), offload off (0.18.3 is still band B2 with offload)", 3, false},
    {"openrlhf@0.10.2+deepspeed@0.18.9", true, "OpenRLHF 0.10.2 as shipped: mean of micro-batch means over band B2"},
    {"openrlhf@0.10.4+deepspeed@0.19.1", false, "OpenRLHF 0.10.4 as shipped: window-global tokens over band C"},
    {"llamafactory+transformers@4.46+deepspeed@0.16.0", true, "LLaMA-Factory's ZeRO-2 offload config on band B1"},
    {"llamafactory+transformers@4.49+deepspeed@0.19.0", false, "the same stack with Trainer 4.49+ on band C (one rank per step)", 1},
    {"transformers@4.45+reference", true, "Trainer <= 4.45: mean cross-entropy per micro-batch (catalogue 3)"},
    {"transformers@4.46+reference", false, "Trainer 4.46: num_items_in_batch over the window (one rank)", 1},
    {"transformers@4.49+reference", true, "Trainer 4.46-4.53 on several ranks: the count per rank (catalogue 3)"},
    {"transformers@4.54+reference", false, "Trainer 4.54+: the count gathered over ranks (PR #39395)"},
    {"canary-offload-nosync", true, "CANARY: optimizer reads before the offload copies land"},
    {"reference", false, "the reference engine"},
};

constexpr std::uint64_t kDemoSeed = 20261130;
constexpr std::uint64_t kBuggyTrialsMax = 2000;
constexpr std::uint64_t kFixedTrials = 200;

std::string describe_minimal(const Finding& f) {
  const auto& s = f.scenario;
  std::size_t micro_batches = 0;
  for (const auto& step : s.steps) micro_batches += step.micro_batches.size();
  const std::size_t trainable = models::trainable_value_count(s.training.model);
  std::string out = fmt::format("{} step(s), {} micro-batch(es), G={}, R={}, ZeRO-{}{}, {} {} model with {} trainable value(s)",
                                s.steps.size(), micro_batches, s.engine.accumulation_steps, s.engine.rank_count,
                                s.engine.zero_stage, s.engine.offload ? " + offload" : "", sim::to_string(s.engine.boundary),
                                models::to_string(s.training.model.kind), trainable);
  return out;
}

// Part 1: campaigns. Returns the number of rows that did not behave as expected.
int demo_campaigns(std::ostream& out) {
  fmt::print(out, "Part 1. Campaigns (seed {}, all nine properties, ordinary training loops; offload off for 0.18.x)\n\n", kDemoSeed);
  fmt::print(out, "{:<50} {:<6} {:>7} {:>9}  {}\n", "target", "result", "trials", "to fail", "what");
  int surprises = 0;
  for (const Row& row : kRows) {
    CampaignConfig config;
    config.targets = {row.target};
    config.seed = kDemoSeed;
    config.trials = row.buggy ? kBuggyTrialsMax : kFixedTrials;
    config.jobs = 2;
    config.generator.ordinary_only = true;
    config.generator.rank_count_max = row.rank_count_max;
    config.generator.offload = row.offload;
    if (row.offload == false)  // property 3 would turn offload back on, where 0.18.x is still band B2
      for (const auto& p : properties::all_properties())
        if (p->name() != "offload_and_partitioning_do_not_change_the_update") config.properties.emplace_back(p->name());
    const CampaignReport report = run_campaign(config);
    const PairResult* first = nullptr;
    for (const auto& p : report.pairs)
      if (p.finding && (!first || p.trials < first->trials)) first = &p;
    const bool found = first != nullptr;
    surprises += found != row.buggy;
    const std::string result = found ? "FOUND" : "clean";
    const std::string to_fail = found ? fmt::format("{:.2f}s", first->seconds_to_first_failure) : "-";
    fmt::print(out, "{:<50} {:<6} {:>7} {:>9}  {}{}\n", row.target, result, found ? first->trials : report.trials, to_fail, row.what,
               found != row.buggy ? "   <-- UNEXPECTED" : "");
    if (found) {
      fmt::print(out, "{:<50}   property: {}\n", "", first->property);
      fmt::print(out, "{:<50}   minimal:  {}\n", "", describe_minimal(*first->finding));
      fmt::print(out, "{:<50}   {}\n", "", first->finding->verdict.message);
      if (!first->finding->verdict.mismatches.empty()) {
        const auto& m = first->finding->verdict.mismatches.front();
        fmt::print(out, "{:<50}   {}: expected {} actual {}\n", "", m.where, m.expected.to_string(), m.actual.to_string());
      }
    }
  }
  fmt::print(out, "\n");
  return surprises;
}

}  // namespace

int run_demo(std::ostream& out) {
  fmt::print(out, "accumcheck demo\n\n");
  const auto start = std::chrono::steady_clock::now();
  const int surprises = demo_campaigns(out);
  fmt::print(out, "Part 2. The exact full-batch oracle on the catalogue's examples\n");
  fmt::print(out, "(values are exact rationals; ~ gives the nearest decimal)\n\n");
  Checker check{out};
  deepspeed_offload_example(check);
  openrlhf_example(check);
  aggregation_table(check);
  fmt::print(out, "\n{}\n", check.failures == 0 ? "all examples agree with the catalogue"
                                                 : fmt::format("{} example(s) disagree", check.failures));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(out, "{} in {:.1f}s\n", surprises == 0 ? "every buggy target found, every fixed target clean"
                                                     : fmt::format("{} target(s) did not behave as expected", surprises),
             seconds);
  return check.failures == 0 && surprises == 0 ? 0 : 1;
}

}  // namespace accumcheck::surface
