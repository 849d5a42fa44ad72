// `accumcheck gallery`: long runs of each catalogue defect under its buggy and fixed release (surface/gallery.h).
#include "surface/gallery.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <tuple>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "fuzz/finding.h"
#include "models/model.h"
#include "properties/property.h"
#include "sim/convert.h"
#include "sim/schedule.h"
#include "surface/html_page.h"

namespace accumcheck::surface {

namespace fs = std::filesystem;
using models::Rational;
using nlohmann::json;

namespace {

constexpr int kInputSize = 8;
constexpr int kSequencesPerRank = 2;     // per micro-batch
constexpr int kHeldOutSequences = 96;
constexpr const char* kProperty = "accumulated_update_equals_full_batch_update";

// The first window of `scenario` on the scalar model: token counts and masks kept, features 1, targets 0 (every
// gradient zero), SGD with lr 0, the scenario's aggregation and engine. `where` receives each sequence's place.
sim::Scenario sequence_probe(const sim::Scenario& scenario, std::vector<std::tuple<int, int, int>>& where) {
  sim::Scenario probe;
  probe.engine = scenario.engine;
  probe.schedule_seed = scenario.schedule_seed;
  probe.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  probe.training.model.frozen = {"bias"};
  probe.training.aggregation = scenario.training.aggregation;
  probe.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = Rational(0)};
  probe.initial_parameters = models::zero_parameters<Rational>(probe.training.model);
  probe.steps.push_back(scenario.steps.front());
  for (std::size_t k = 0; k < probe.steps[0].micro_batches.size(); ++k) {
    auto& mb = probe.steps[0].micro_batches[k];
    for (std::size_t r = 0; r < mb.rank_sequences.size(); ++r)
      for (std::size_t i = 0; i < mb.rank_sequences[r].size(); ++i) {
        auto& seq = mb.rank_sequences[r][i];
        const auto T = static_cast<Eigen::Index>(seq.token_count());
        seq.features = models::Matrix<Rational>::Constant(T, 1, Rational(1));
        seq.targets = models::Matrix<Rational>::Zero(T, 1);
        seq.token_ids.clear();
        seq.expert_index.clear();
        where.emplace_back(static_cast<int>(k), static_cast<int>(r), static_cast<int>(i));
      }
  }
  return probe;
}

models::Sequence<Rational>& sequence_at(sim::Scenario& s, const std::tuple<int, int, int>& place) {
  const auto [k, r, i] = place;
  return s.steps[0].micro_batches[static_cast<std::size_t>(k)].rank_sequences[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
}


// Six significant digits: the curves are for eyes, and fewer digits keep gallery.json small and stable.
double rounded(double x) {
  if (!std::isfinite(x)) return x;
  return std::stod(fmt::format("{:.6g}", x));
}

Rational dyadic(sim::Stream& rng, int half_range, int denominator) {
  const int k = static_cast<int>(rng.below(static_cast<std::uint32_t>(2 * half_range + 1))) - half_range;
  return Rational(static_cast<long long>(k), static_cast<long long>(denominator));
}

// The task: y = w . x + b + noise, with one teacher (w, b) for short sequences and another for long ones.
struct Teacher {
  std::vector<Rational> w;
  Rational b;
};

struct Task {
  Teacher short_teacher, long_teacher;
};

Task make_task(sim::Stream& rng) {
  Task task;
  for (Teacher* t : {&task.short_teacher, &task.long_teacher}) {
    for (int i = 0; i < kInputSize; ++i) t->w.push_back(dyadic(rng, 8, 8));
    t->b = dyadic(rng, 4, 4);
  }
  return task;
}

models::Sequence<Rational> make_sequence(sim::Stream& rng, const Task& task) {
  const bool is_short = rng.below(5) < 2;  // 2 in 5 sequences are short
  const int T = is_short ? 1 + static_cast<int>(rng.below(3)) : 8 + static_cast<int>(rng.below(9));
  const Teacher& teacher = is_short ? task.short_teacher : task.long_teacher;
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(T, kInputSize);
  seq.targets = models::Matrix<Rational>(T, 1);
  for (int t = 0; t < T; ++t) {
    Rational y = teacher.b + dyadic(rng, 8, 64);  // noise in [-1/8, 1/8]
    for (int i = 0; i < kInputSize; ++i) {
      seq.features(t, i) = dyadic(rng, 16, 16);
      y += teacher.w[static_cast<std::size_t>(i)] * seq.features(t, i);
    }
    seq.targets(t, 0) = y;
  }
  seq.loss_mask.assign(static_cast<std::size_t>(T), 1);
  return seq;
}

models::TrainingSpec task_training() {
  models::TrainingSpec spec;
  spec.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = kInputSize, .output_size = 1};
  spec.aggregation.mode = models::LossAggregation::token_mean;
  spec.optimizer.kind = models::OptimizerKind::adam;
  spec.optimizer.lr = Rational(1LL, 64LL);
  return spec;
}

sim::Scenario make_scenario(const GalleryEntry& entry, sim::Stream& rng, const Task& task) {
  sim::Scenario s;
  s.training = task_training();
  s.engine = entry.engine;
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  for (int step = 0; step < entry.step_count; ++step) {
    sim::StepPlan plan;
    for (int k = 0; k < entry.engine.accumulation_steps; ++k) {
      sim::MicroBatch mb;
      for (int r = 0; r < entry.engine.rank_count; ++r) {
        std::vector<models::Sequence<Rational>> seqs;
        for (int i = 0; i < kSequencesPerRank; ++i) seqs.push_back(make_sequence(rng, task));
        mb.rank_sequences.push_back(std::move(seqs));
      }
      plan.micro_batches.push_back(std::move(mb));
    }
    s.steps.push_back(std::move(plan));
  }
  return s;
}

// Token mean of 1/2 (y_hat - y)^2 over the sequences, in fp64.
double token_mean_loss(const models::ModelSpec& spec, const models::Parameters<double>& params,
                       const std::vector<models::Sequence<double>>& sequences) {
  int tokens = 0;
  for (const auto& seq : sequences) tokens += seq.valid_token_count();
  if (tokens == 0) return 0;
  const std::vector<double> coefficients(sequences.size(), 1.0 / tokens);
  return models::weighted_loss<double>(spec, params, std::span<const models::Sequence<double>>(sequences),
                                       std::span<const double>(coefficients));
}

std::vector<models::Sequence<double>> window_sequences(const sim::StepPlan& plan) {
  std::vector<models::Sequence<double>> out;
  for (const auto& mb : plan.micro_batches)
    for (const auto& rank : mb.rank_sequences)
      for (const auto& seq : rank) out.push_back(sim::to_scalar<double>(seq));
  return out;
}

struct Curves {
  std::vector<double> train_loss, held_out_loss, grad_norm;
};

// `windows` is each step's window in fp64 (window_sequences), converted once for both releases.
Curves train(const sim::Target& target, const GalleryEntry& entry, const sim::Scenario& scenario,
             const std::vector<std::vector<models::Sequence<double>>>& windows, const std::vector<models::Sequence<double>>& held_out) {
  const sim::RunResult run = target.run(scenario, {.scalar = entry.scalar, .keep_step_parameters = true});
  Curves c;
  const auto& spec = scenario.training.model;
  models::Parameters<double> before = sim::to_scalar<double>(scenario.initial_parameters);
  c.held_out_loss.push_back(rounded(token_mean_loss(spec, before, held_out)));
  for (std::size_t s = 0; s < run.steps.size(); ++s) {
    c.train_loss.push_back(rounded(token_mean_loss(spec, before, windows[s])));
    c.grad_norm.push_back(rounded(run.steps[s].grad_norm.to_double()));
    before = sim::to_scalar<double>(run.parameters_after_step[s]);
    c.held_out_loss.push_back(rounded(token_mean_loss(spec, before, held_out)));
  }
  return c;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string show(const Rational& q) {
  if (q.is_integer()) return q.to_string();
  const std::string exact = q.to_string();
  if (exact.size() <= 12) return fmt::format("{} (~{:.4g})", exact, q.to_double());
  return fmt::format("~{:.6g}", q.to_double());
}

json line_dataset(const std::string& label, const std::vector<double>& values, const char* colour, bool thin) {
  json points = json::array();
  for (std::size_t i = 0; i < values.size(); ++i) points.push_back({{"x", i}, {"y", values[i]}});
  return {{"label", label}, {"data", points}, {"borderColor", colour}, {"backgroundColor", colour}, {"pointRadius", 0},
          {"borderWidth", thin ? 1 : 2.5}, {"fill", false}};
}

constexpr const char* kBuggyColour = "#d9534f";
constexpr const char* kBuggyLight = "rgba(217,83,79,0.35)";
constexpr const char* kFixedColour = "#337ab7";
constexpr const char* kFixedLight = "rgba(51,122,183,0.35)";

struct EntryResult {
  GalleryEntry entry;
  Curves buggy, fixed;
  properties::Verdict buggy_first, fixed_first;
  SequenceWeights buggy_weights, fixed_weights;
  int window_tokens_first = 0;
  bool first_step_on_probe = false;  // the first-step check ran on sequence_probe, not on the task's data
  std::optional<properties::Verdict> task_data_first;  // then: the buggy release's check on the task's data
  json summary;  // the figures of the text
  std::string noticed;
};

EntryResult run_entry(const GalleryEntry& entry, std::size_t index) {
  EntryResult r;
  r.entry = entry;
  sim::Stream root(kGallerySeed);
  for (std::size_t i = 0; i <= index; ++i) root.next();
  sim::Stream task_rng(root.next()), data_rng(root.next()), held_out_rng(root.next());
  const Task task = make_task(task_rng);
  const sim::Scenario scenario = make_scenario(entry, data_rng, task);
  std::vector<models::Sequence<double>> held_out;
  for (int i = 0; i < kHeldOutSequences; ++i) held_out.push_back(sim::to_scalar<double>(make_sequence(held_out_rng, task)));
  const auto buggy = sim::make_target(entry.buggy), fixed = sim::make_target(entry.fixed);
  for (const auto* t : {buggy.get(), fixed.get()})
    if (const std::string why = t->unsupported(scenario); !why.empty())
      throw std::logic_error("gallery entry " + entry.id + ": " + t->name() + " refuses its scenario: " + why);
  std::vector<std::vector<models::Sequence<double>>> windows;
  for (const auto& plan : scenario.steps) windows.push_back(window_sequences(plan));
  r.buggy = train(*buggy, entry, scenario, windows, held_out);
  r.fixed = train(*fixed, entry, scenario, windows, held_out);

  // The first window, checked exactly (or within fp32's derived bound where the defect needs bf16 storage).
  sim::Scenario window = scenario;
  window.steps.resize(1);
  sim::Scenario first = window;
  // With bf16 storage the check runs in fp32 within the derived rounding bound. On the task's data (token-mean
  // coefficients 1/N, sums of 8 products over up to 16 tokens) that bound is wider than the whole gradient, so even
  // an applied gradient of 0 passes: that check is recorded, and the verdict shown is the one on the window's
  // shapes on the scalar model (sequence_probe) with the `sum` aggregation and gradient 1 on every token of the
  // ranks after the first, 0 on the first's: integers, which bf16 holds exactly and the bound keeps tight. SGD
  // steps (the applied gradient checked does not depend on the optimizer).
  if (entry.engine.precision != sim::Precision::full) {
    first.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = Rational(1LL, 64LL)};
    r.task_data_first = properties::find_property(kProperty)->check(*buggy, first, {.scalar = sim::ScalarKind::fp32});
    std::vector<std::tuple<int, int, int>> where;
    first = sequence_probe(scenario, where);
    first.training.aggregation.mode = models::LossAggregation::sum;  // integer coefficients: no rounding to bound
    for (const auto& place : where)
      if (std::get<1>(place) > 0) sequence_at(first, place).targets.setConstant(Rational(-1));
    r.first_step_on_probe = true;
  }
  for (const auto& mb : window.steps[0].micro_batches)
    for (const auto& rank : mb.rank_sequences)
      for (const auto& seq : rank) r.window_tokens_first += seq.valid_token_count();
  const sim::ScalarKind exact = entry.engine.precision == sim::Precision::full ? sim::ScalarKind::fast_rational : sim::ScalarKind::fp32;
  const properties::Property* property = properties::find_property(kProperty);
  r.buggy_first = property->check(*buggy, first, {.scalar = exact});
  r.fixed_first = property->check(*fixed, first, {.scalar = exact});
  r.buggy_weights = sequence_weights(*buggy, window, exact);
  r.fixed_weights = sequence_weights(*fixed, window, exact);

  // What it took to notice, in figures.
  const double start = r.buggy.held_out_loss.front(), buggy_end = r.buggy.held_out_loss.back(),
               fixed_end = r.fixed.held_out_loss.back();
  bool finite = true;
  int falling = 0;
  for (std::size_t i = 0; i < r.buggy.held_out_loss.size(); ++i) {
    finite = finite && std::isfinite(r.buggy.held_out_loss[i]) && std::isfinite(r.buggy.train_loss[std::min(i, r.buggy.train_loss.size() - 1)]);
    if (i > 0 && r.buggy.held_out_loss[i] <= r.buggy.held_out_loss[i - 1]) ++falling;
  }
  double gap_max = 0;
  std::size_t gap_at = 0;
  for (std::size_t i = 0; i < r.buggy.held_out_loss.size(); ++i) {
    const double gap = std::abs(r.buggy.held_out_loss[i] - r.fixed.held_out_loss[i]) / std::max(r.fixed.held_out_loss[i], 1e-300);
    if (gap > gap_max) {
      gap_max = gap;
      gap_at = i;
    }
  }
  std::vector<double> ratios;
  for (std::size_t i = 0; i < r.buggy.grad_norm.size(); ++i)
    if (r.fixed.grad_norm[i] > 0) ratios.push_back(r.buggy.grad_norm[i] / r.fixed.grad_norm[i]);
  const double norm_ratio = median(ratios);
  const bool healthy = finite && buggy_end < start / 2;
  const double final_change = (buggy_end - fixed_end) / fixed_end;
  r.summary = {{"held_out_loss_start", start},
               {"held_out_loss_final_buggy", buggy_end},
               {"held_out_loss_final_fixed", fixed_end},
               {"final_loss_change", rounded(final_change)},
               {"largest_curve_gap", rounded(gap_max)},
               {"largest_curve_gap_at_step", gap_at},
               {"buggy_steps_with_falling_held_out_loss", falling},
               {"grad_norm_ratio_median", rounded(norm_ratio)},
               {"buggy_curve_looks_healthy", healthy},
               {"first_step_buggy", std::string(properties::to_string(r.buggy_first.outcome))},
               {"first_step_fixed", std::string(properties::to_string(r.fixed_first.outcome))}};
  const std::string fall = fmt::format("the buggy run's held-out loss fell from {:.4g} to {:.4g} ({} of {} steps down){}", start,
                                       buggy_end, falling, r.buggy.held_out_loss.size() - 1,
                                       finite ? ", with no inf or NaN" : "; some values were not finite");
  r.noticed = fmt::format(
      "{}: {}. The fixed run ended at {:.4g}: the defect {} (the widest gap between the curves was {:.2g}%, "
      "at step {}). The reported grad norm was {:.3g} times the fixed run's (median over steps){}. The exact check of the first "
      "step {}.",
      healthy ? "Nothing looked wrong" : "The buggy curve did not look healthy", fall, fixed_end,
      std::abs(final_change) < 5e-4 ? std::string("left the final loss where it was, within 0.05%")
                                     : fmt::format("{} the final loss by {:.2g}%", final_change > 0 ? "raised" : "lowered", std::abs(final_change) * 100),
      gap_max * 100, gap_at, norm_ratio,
      std::abs(norm_ratio - 1) < 0.05 ? ", so not even the norm tells them apart" : ", which only a run beside a correct one shows",
      r.buggy_first.outcome == properties::Outcome::fail
          ? "fails on " + entry.buggy + " (" + r.buggy_first.message + ") and " +
                (r.fixed_first.outcome == properties::Outcome::pass ? "passes on " + entry.fixed : std::string("does not pass on ") + entry.fixed)
          : std::string("does not fail on ") + entry.buggy + ": " + r.buggy_first.message);
  return r;
}

json weights_json(const SequenceWeights& w, int window_tokens) {
  json out = json::array();
  for (std::size_t i = 0; i < w.sequences.size(); ++i)
    out.push_back({{"sequence", w.sequences[i]},
                   {"tokens", w.token_counts[i]},
                   {"weight_per_token", w.weight[i].to_string()},
                   {"relative_to_token_mean", rounded((w.weight[i] * Rational(window_tokens)).to_double())}});
  return out;
}

json verdict_json(const properties::Verdict& v) {
  json mismatches = json::array();
  for (std::size_t i = 0; i < v.mismatches.size() && i < 3; ++i)
    mismatches.push_back({{"where", v.mismatches[i].where}, {"expected", v.mismatches[i].expected.to_string()},
                          {"actual", v.mismatches[i].actual.to_string()}});
  return {{"outcome", std::string(properties::to_string(v.outcome))}, {"message", v.message}, {"mismatches", mismatches}};
}

json entry_json(const EntryResult& r) {
  const GalleryEntry& e = r.entry;
  return {{"id", e.id},
          {"title", e.title},
          {"where", e.where},
          {"buggy", e.buggy},
          {"fixed", e.fixed},
          {"setting", e.setting},
          {"steps", e.step_count},
          {"scalar", std::string(sim::to_string(e.scalar))},
          {"summary", r.summary},
          {"what_it_took_to_notice", r.noticed},
          {"first_step", {{"buggy", verdict_json(r.buggy_first)}, {"fixed", verdict_json(r.fixed_first)},
                          {"data", r.first_step_on_probe ? "the first window's shapes, sum aggregation, gradient 1 on every token of rank 1, 0 on rank 0's" : "the task's first window"},
                          {"on_task_data_buggy", r.task_data_first ? json(verdict_json(*r.task_data_first)) : json(nullptr)}}},
          {"first_window_tokens", r.window_tokens_first},
          {"sequence_weights", {{"buggy", weights_json(r.buggy_weights, r.window_tokens_first)},
                                {"fixed", weights_json(r.fixed_weights, r.window_tokens_first)}}},
          {"curves", {{"buggy", {{"train_loss", r.buggy.train_loss}, {"held_out_loss", r.buggy.held_out_loss}, {"grad_norm", r.buggy.grad_norm}}},
                      {"fixed", {{"train_loss", r.fixed.train_loss}, {"held_out_loss", r.fixed.held_out_loss}, {"grad_norm", r.fixed.grad_norm}}}}}};
}

void entry_page(HtmlPage& page, const EntryResult& r) {
  const GalleryEntry& e = r.entry;
  page.begin_section(e.id);
  page.heading(2, e.title, e.id + "-title");
  page.paragraph(fmt::format("{} Buggy: {}; fixed: {}. See {}.", e.setting, e.buggy, e.fixed, e.where));
  page.verdict(std::string(properties::to_string(r.buggy_first.outcome)),
               fmt::format("First step, checked exactly on {}: {}", e.buggy,
                           r.buggy_first.outcome == properties::Outcome::fail ? "FAIL: " + r.buggy_first.message : r.buggy_first.message));
  page.verdict(std::string(properties::to_string(r.fixed_first.outcome)),
               fmt::format("First step on {}: {}", e.fixed,
                           r.fixed_first.outcome == properties::Outcome::pass ? std::string("pass") : r.fixed_first.message));
  json loss = {{"type", "line"},
               {"data", {{"datasets", {line_dataset("held-out loss, buggy", r.buggy.held_out_loss, kBuggyColour, false),
                                       line_dataset("held-out loss, fixed", r.fixed.held_out_loss, kFixedColour, false),
                                       line_dataset("training loss of the step's window, buggy", r.buggy.train_loss, kBuggyLight, true),
                                       line_dataset("training loss of the step's window, fixed", r.fixed.train_loss, kFixedLight, true)}}}},
               {"options", {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "optimizer step"}}}}},
                                        {"y", {{"type", "logarithmic"}, {"title", {{"display", true}, {"text", "token-mean loss"}}}}}}}}}};
  page.chart(e.id + "-loss", "Loss per optimizer step under the buggy and the fixed release, on the same data.", loss, 900, 320);
  json norm = {{"type", "line"},
               {"data", {{"datasets", {line_dataset("grad norm reported, buggy", r.buggy.grad_norm, kBuggyColour, false),
                                       line_dataset("grad norm reported, fixed", r.fixed.grad_norm, kFixedColour, false)}}}},
               {"options", {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "optimizer step"}}}}},
                                        {"y", {{"type", "logarithmic"}, {"title", {{"display", true}, {"text", "grad norm"}}}}}}}}}};
  page.chart(e.id + "-norm", "The grad norm each engine reported, per step.", norm, 900, 260);
  if (r.buggy_weights.why_not.empty() && r.fixed_weights.why_not.empty()) {
    json labels = json::array(), bw = json::array(), fw = json::array();
    for (std::size_t i = 0; i < r.buggy_weights.sequences.size(); ++i) {
      labels.push_back(r.buggy_weights.sequences[i]);
      bw.push_back((r.buggy_weights.weight[i] * Rational(r.window_tokens_first)).to_double());
      fw.push_back((r.fixed_weights.weight[i] * Rational(r.window_tokens_first)).to_double());
    }
    json weights = {{"type", "bar"},
                    {"data", {{"labels", labels},
                              {"datasets", {{{"label", "buggy"}, {"data", bw}, {"backgroundColor", kBuggyColour}},
                                            {{"label", "fixed"}, {"data", fw}, {"backgroundColor", kFixedColour}}}}}},
                    {"options", {{"scales", {{"y", {{"title", {{"display", true}, {"text", "weight of a token, 1 = token mean"}}}}}}}}}};
    page.chart(e.id + "-weights",
               "Each sequence of the first window (k micro-batch, r rank, # sequence, token count): the weight one of its tokens "
               "reached the optimizer with, measured on each target; the token mean gives every token 1.",
               weights, 900, 280);
  }
  page.paragraph(r.noticed);
  page.end_section();
}

std::string readme(const std::vector<EntryResult>& results) {
  std::string out = fmt::format(
      "# A gallery of silent failures\n\n"
      "Generated by `accumcheck gallery docs/gallery` (seed {}) from our models' runs; CTest checks that this file and\n"
      "`gallery.json` are what the command writes today, so they stay true when the models change. The command also\n"
      "writes `index.html` here, the curves as one self-contained page (Chart.js inlined; not committed).\n\n"
      "Each entry trains a small regression task (a linear model over 8 features; short sequences of 1-3 tokens and long\n"
      "ones of 8-16 follow two teachers, as short and long answers differ in fine-tuning) with Adam at lr 1/64 for {}\n"
      "optimizer steps, under the buggy release's model and the fixed one's, on the same data, in fp64 (fp32 with bf16\n"
      "storage where the defect needs it). The first step is also checked exactly: property 1, the applied gradient\n"
      "against the full-batch oracle.\n\n"
      "| defect | buggy / fixed | first step, exact | held-out loss at the end, buggy / fixed | grad norm ratio (median) | buggy curve looks healthy |\n"
      "|---|---|---|---|---|---|\n",
      kGallerySeed, results.empty() ? 0 : results.front().entry.step_count);
  for (const auto& r : results)
    out += fmt::format("| [{}](#{}) | `{}` / `{}` | {} / {} | {:.4g} / {:.4g} ({:+.2g}%) | {:.3g} | {} |\n", r.entry.id, r.entry.id,
                       r.entry.buggy, r.entry.fixed, r.summary["first_step_buggy"].get<std::string>(),
                       r.summary["first_step_fixed"].get<std::string>(), r.summary["held_out_loss_final_buggy"].get<double>(),
                       r.summary["held_out_loss_final_fixed"].get<double>(), r.summary["final_loss_change"].get<double>() * 100,
                       r.summary["grad_norm_ratio_median"].get<double>(), r.summary["buggy_curve_looks_healthy"].get<bool>() ? "yes" : "no");
  out += "\n\"Looks healthy\": every value finite and the held-out loss at the end below half its start.\n";
  for (const auto& r : results) {
    out += fmt::format("\n## {}\n\n{}\n\n{} Buggy: `{}`; fixed: `{}`. See {}.\n\n", r.entry.id, r.entry.title, r.entry.setting,
                       r.entry.buggy, r.entry.fixed, r.entry.where);
    out += std::string("**First step, ") +
           (r.first_step_on_probe ? "on the first window's shapes with the `sum` aggregation, every token of rank 1 with gradient 1 "
                                    "and of rank 0 with 0 (integers, which bf16 holds exactly), within the fp32 rounding bound.** "
                                  : "exact.** ") + r.entry.buggy + ": " + std::string(properties::to_string(r.buggy_first.outcome)) +
           (r.buggy_first.message.empty() ? "" : " (" + r.buggy_first.message + ")") + ". " + r.entry.fixed + ": " +
           std::string(properties::to_string(r.fixed_first.outcome)) +
           (r.fixed_first.message.empty() ? "" : " (" + r.fixed_first.message + ")") + ".\n";
    if (r.task_data_first)
      out += "On the task's own first window the same check " +
             (r.task_data_first->outcome == properties::Outcome::pass
                  ? std::string("passes on ") + r.entry.buggy + ": with token-mean coefficients, bf16's derived rounding bound there is "
                                                                "wider than the whole gradient, so even a gradient of 0 would pass."
                  : std::string(properties::to_string(r.task_data_first->outcome)) + " on " + r.entry.buggy + " (" + r.task_data_first->message + ").") +
             "\n";
    for (std::size_t i = 0; i < r.buggy_first.mismatches.size() && i < 2; ++i)
      out += fmt::format("- `{}`: expected {}, applied {}\n", r.buggy_first.mismatches[i].where, show(r.buggy_first.mismatches[i].expected),
                         show(r.buggy_first.mismatches[i].actual));
    if (r.buggy_weights.why_not.empty()) {
      out += fmt::format("\n**Who reached the optimizer in the first window** (the weight of one token, 1 = the token mean over its {} "
                         "tokens):\n\n| sequence | tokens | buggy | fixed |\n|---|---|---|---|\n",
                         r.window_tokens_first);
      for (std::size_t i = 0; i < r.buggy_weights.sequences.size(); ++i)
        out += fmt::format("| {} | {} | {:.4g} | {:.4g} |\n", r.buggy_weights.sequences[i], r.buggy_weights.token_counts[i],
                           (r.buggy_weights.weight[i] * Rational(r.window_tokens_first)).to_double(),
                           (r.fixed_weights.weight[i] * Rational(r.window_tokens_first)).to_double());
    } else {
      out += "\nSequence weights not measured: " + r.buggy_weights.why_not + "\n";
    }
    out += "\n**What it took to notice.** " + r.noticed + "\n";
  }
  return out;
}

sim::EngineConfig engine(int ranks, int g, int zero, bool offload, sim::Precision precision = sim::Precision::full) {
  sim::EngineConfig c;
  c.rank_count = ranks;
  c.accumulation_steps = g;
  c.zero_stage = zero;
  c.offload = offload;
  c.precision = precision;
  return c;
}

}  // namespace

std::vector<GalleryEntry> gallery_entries() {
  return {
      {.id = "deepspeed-zero2-offload-drop",
       .title = "DeepSpeed ZeRO-2 with the optimizer offloaded to the CPU drops intermediate micro-batches (v0.15.2 - v0.18.9)",
       .where = "docs/targets.md 7.3, 7.4; PR #6550, fixed by PR #7967",
       .buggy = "deepspeed@0.16.0",
       .fixed = "deepspeed@0.19.0",
       .setting = "One rank, G = 8, ZeRO-2, optimizer offloaded.",
       .engine = engine(1, 8, 2, true)},
      {.id = "deepspeed-zero2-overwrite-without-offload",
       .title = "DeepSpeed ZeRO-2 without offload keeps only the last micro-batch of a window (v0.17.6 - v0.18.2, by reading)",
       .where = "docs/targets.md 7.5; issue #7718",
       .buggy = "deepspeed@0.18.0",
       .fixed = "deepspeed@0.19.0",
       .setting = "One rank, G = 4, ZeRO-2, no offload.",
       .engine = engine(1, 4, 2, false)},
      {.id = "deepspeed-zero1-offload-bf16-unreduced",
       .title = "DeepSpeed ZeRO-1 with offload in bf16 steps each partition on its owner's own, unreduced gradient (v0.10.1 - v0.19.7)",
       .where = "docs/targets.md 7.6a; docs/upstream/deepspeed-bf16-zero1-offload-unreduced.md",
       .buggy = "deepspeed@0.18.9",
       .fixed = "deepspeed@0.19.8",
       .setting = "Two ranks, G = 2, ZeRO-1, optimizer offloaded, bf16 storage with fp32 accumulation, computed in fp32.",
       .engine = engine(2, 2, 1, true, sim::Precision::bf16),
       .scalar = sim::ScalarKind::fp32},
      {.id = "openrlhf-mean-of-micro-batch-means",
       .title = "OpenRLHF averages per-micro-batch token means (v0.7.0 - v0.10.3)",
       .where = "docs/targets.md 8; catalogue entry 2; fixed by PR #1249 (v0.10.4)",
       .buggy = "openrlhf@0.10.2+reference",
       .fixed = "openrlhf@0.10.4+reference",
       .setting = "One rank, G = 4, over a correct engine, so that only OpenRLHF's loss normalisation differs.",
       .engine = engine(1, 4, 0, false)},
      {.id = "transformers-mean-of-micro-batch-means",
       .title = "The transformers Trainer averages per-micro-batch token means (4.45 and before)",
       .where = "docs/targets.md 8; catalogue entry 3; fixed by PRs #34191, #34198 (4.46)",
       .buggy = "transformers@4.45+reference",
       .fixed = "transformers@4.46+reference",
       .setting = "One rank, G = 4, over a correct engine.",
       .engine = engine(1, 4, 0, false)},
      {.id = "transformers-per-rank-token-count",
       .title = "The transformers Trainer divides by each rank's own token count (4.46 - 4.53, average_tokens_across_devices off by default)",
       .where = "docs/targets.md 8; catalogue entry 3",
       .buggy = "transformers@4.46+reference",
       .fixed = "transformers@4.54+reference",
       .setting = "Two ranks, G = 2, over a correct engine.",
       .engine = engine(2, 2, 0, false)},
      {.id = "transformers-deepspeed-extra-division-by-g",
       .title = "The transformers Trainer over DeepSpeed divides by G once more (4.46 - 4.48)",
       .where = "docs/targets.md 8; PR #35808",
       .buggy = "transformers@4.46+deepspeed@0.19.0",
       .fixed = "transformers@4.54+deepspeed@0.19.0",
       .setting = "One rank, G = 4, ZeRO-2 without offload on a correct DeepSpeed (0.19.0).",
       .engine = engine(1, 4, 2, false)},
  };
}


SequenceWeights sequence_weights(const sim::Target& target, const sim::Scenario& scenario, sim::ScalarKind scalar) {
  SequenceWeights out;
  if (scenario.steps.empty()) {
    out.why_not = "the scenario has no step";
    return out;
  }
  std::vector<std::tuple<int, int, int>> where;
  sim::Scenario probe = sequence_probe(scenario, where);
  for (const auto& place : where) {
    const auto [k, r, i] = place;
    const int tokens = sequence_at(probe, place).valid_token_count();
    out.sequences.push_back(fmt::format("k{} r{} #{} ({} token{})", k, r, i, tokens, tokens == 1 ? "" : "s"));
    out.token_counts.push_back(tokens);
  }
  if (const std::string why = target.unsupported(probe); !why.empty()) {
    out.why_not = "the target refuses the probe: " + why;
    return out;
  }
  for (std::size_t j = 0; j < where.size(); ++j) {
    sim::Scenario one = probe;
    sequence_at(one, where[j]).targets.setConstant(Rational(-1));
    const sim::RunResult result = target.run(one, {.scalar = scalar});
    const Rational applied = result.steps[0].applied ? result.steps[0].gradient.tensors[0](0, 0) : Rational(0);
    out.weight.push_back(out.token_counts[j] > 0 ? applied / Rational(out.token_counts[j]) : Rational(0));
  }
  return out;
}

int run_gallery(const fs::path& dir, std::ostream& out) {
  try {
    chart_js_path();  // before the runs: a missing library is said at once
    fs::create_directories(dir);
    fmt::print(out, "accumcheck gallery: seed {}\n", kGallerySeed);
    std::vector<EntryResult> results;
    const auto entries = gallery_entries();
    HtmlPage page("A gallery of silent failures");
    page.paragraph(fmt::format("Generated by accumcheck gallery (seed {}) from our models' runs. Each defect: the buggy and the fixed "
                               "release trained on the same data for hundreds of steps, the exact verdict of the first step, and "
                               "who reached the optimizer.", kGallerySeed));
    json all = json::array();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      results.push_back(run_entry(entries[i], i));
      const auto& r = results.back();
      fmt::print(out, "  {:<44} first step {} / {}, final held-out loss {:.4g} / {:.4g}\n", r.entry.id,
                 r.summary["first_step_buggy"].get<std::string>(), r.summary["first_step_fixed"].get<std::string>(),
                 r.summary["held_out_loss_final_buggy"].get<double>(), r.summary["held_out_loss_final_fixed"].get<double>());
      entry_page(page, r);
      all.push_back(entry_json(r));
    }
    fuzz::write_text_atomically(dir / "index.html", page.render());
    fuzz::write_text_atomically(dir / "gallery.json", json{{"format", "accumcheck-gallery"}, {"version", 1},
                                                           {"seed", std::to_string(kGallerySeed)}, {"entries", all}}.dump(1) + "\n");
    fuzz::write_text_atomically(dir / "README.md", readme(results));
    fmt::print(out, "wrote {}, {} and {}\n", (dir / "index.html").string(), (dir / "gallery.json").string(), (dir / "README.md").string());
    return 0;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "accumcheck gallery: error: {}\n", e.what());
    return 2;
  } catch (const fs::filesystem_error& e) {
    fmt::print(stderr, "accumcheck gallery: error: {}\n", e.what());
    return 2;
  }
}

}  // namespace accumcheck::surface
