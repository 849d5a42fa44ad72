// `accumcheck report`: campaign reports, findings and audits as self-contained pages (surface/report.h).
#include "surface/report.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "fuzz/finding.h"
#include "models/model.h"
#include "properties/membership.h"
#include "surface/explain.h"
#include "surface/html_page.h"

namespace accumcheck::surface {

using models::Rational;
using nlohmann::json;

namespace {

// Colours of the figures: one meaning each, on every page.
constexpr const char* kColourReached = "#4cae4c";
constexpr const char* kColourWrong = "#d9534f";
constexpr const char* kColourExpected = "#337ab7";
constexpr const char* kColourOther = "#e0a800";

std::string decimal(const Rational& q) {
  if (q.is_integer()) return q.to_string();
  return fmt::format("{} (~{:.6g})", q.to_string(), q.to_double());
}

json bar_dataset(const std::string& label, const json& values, const char* colour) {
  return {{"label", label}, {"data", values}, {"backgroundColor", colour}, {"borderColor", colour}, {"borderWidth", 1}};
}

json axis_titles(const std::string& x, const std::string& y) {
  return {{"x", {{"title", {{"display", true}, {"text", x}}}}}, {"y", {{"title", {{"display", true}, {"text", y}}}}}};
}

// ---- finding -------------------------------------------------------------------------------------------------

void membership_section(HtmlPage& page, const fuzz::Finding& f) {
  page.heading(2, "Which micro-batch reached which optimizer step, with what weight");
  if (f.target.starts_with("adapter:")) {
    page.paragraph("The target is external code, which this page does not start. " +
                   (f.verdict.membership ? "What the property decoded: " + f.verdict.membership->summary
                                         : std::string("Run the membership property on it: accumcheck fuzz --target " + f.target +
                                                       " --property every_micro_batch_is_applied_exactly_once_in_its_own_step")));
    return;
  }
  std::unique_ptr<sim::Target> target;
  try {
    target = sim::make_target(f.target);
  } catch (const std::invalid_argument& e) {
    page.paragraph(std::string("Not measured: this build does not know the target (") + e.what() + ").");
    return;
  }
  const MembershipWeights w = membership_weights(*target, f.scenario);
  if (!w.why_not.empty()) {
    page.paragraph("Not measured: " + w.why_not);
    return;
  }
  json labels = w.micro_batches, own = json::array(), elsewhere = json::array(), expected = json::array();
  std::vector<std::string> words;
  for (std::size_t i = 0; i < w.micro_batches.size(); ++i) {
    Rational in_own(0), other(0);
    for (std::size_t s = 0; s < w.weight.size(); ++s) {
      const Rational& x = w.weight[s][i];
      if (static_cast<int>(s) == w.own_step[i]) in_own = x;
      else other += x < Rational(0) ? -x : x;
    }
    own.push_back(in_own.to_double());
    elsewhere.push_back(other.to_double());
    expected.push_back(1);
    if (in_own != Rational(1) || other != Rational(0))
      words.push_back(fmt::format("{}: weight {} in its own step{}", w.micro_batches[i], decimal(in_own),
                                  other == Rational(0) ? (in_own == Rational(0) ? " (dropped)" : "")
                                                       : fmt::format(", {} in other steps (leaked)", decimal(other))));
  }
  json expected_line = {{"type", "line"}, {"label", "expected weight"}, {"data", expected}, {"borderColor", kColourExpected},
                        {"borderDash", {6, 4}}, {"pointRadius", 0}, {"fill", false}};
  json config = {{"type", "bar"},
                 {"data", {{"labels", labels},
                           {"datasets", {bar_dataset("weight in its own optimizer step", own, kColourReached),
                                         bar_dataset("weight in other optimizer steps", elsewhere, kColourWrong), expected_line}}}},
                 {"options", {{"scales", axis_titles("micro-batch (s step, k micro-batch, r rank)", "weight of its gradient")}}}};
  page.chart("membership", fmt::format("Measured on {}: each micro-batch's gradient alone (all others zero) through the run's "
                                       "engine configuration; the bar is the weight it reached the optimizer with. A correct "
                                       "target reaches the dashed line in its own step and nothing elsewhere.", f.target),
             config);
  if (words.empty()) page.paragraph("Every micro-batch reached its own optimizer step exactly once, with weight 1.");
  else page.list(words);
}

void mismatch_section(HtmlPage& page, const fuzz::Finding& f) {
  if (f.verdict.mismatches.empty()) return;
  page.heading(2, "Expected against actual");
  constexpr std::size_t kShown = 24;
  json labels = json::array(), expected = json::array(), actual = json::array();
  std::vector<std::vector<HtmlCell>> rows;
  for (std::size_t i = 0; i < f.verdict.mismatches.size() && i < kShown; ++i) {
    const auto& m = f.verdict.mismatches[i];
    labels.push_back(m.where);
    expected.push_back(m.expected.to_double());
    actual.push_back(m.actual.to_double());
    rows.push_back({{m.where}, {decimal(m.expected)}, {decimal(m.actual), "fail"},
                    {m.tolerance == Rational(0) ? "exact" : decimal(m.tolerance)}});
  }
  json config = {{"type", "bar"},
                 {"data", {{"labels", labels},
                           {"datasets", {bar_dataset("expected (the full-batch oracle)", expected, kColourExpected),
                                         bar_dataset("actual (" + f.target + ")", actual, kColourWrong)}}}},
                 {"options", {{"scales", axis_titles("value", "")}}}};
  page.chart("mismatches", "Each value that differs: what the oracle says against what the target applied (nearest doubles; the "
                           "table has the exact values).", config);
  page.table({"where", "expected", "actual", "tolerance"}, rows);
  if (f.verdict.mismatches.size() > kShown)
    page.paragraph(fmt::format("{} more values differ; accumcheck explain lists them.", f.verdict.mismatches.size() - kShown));
}

std::string finding_page(const json& doc, const std::string& source) {
  const fuzz::Finding f = fuzz::finding_from_json(doc);
  HtmlPage page("Finding: " + f.property + " on " + f.target);
  const std::string outcome(properties::to_string(f.verdict.outcome));
  page.verdict(outcome, fmt::format("{}: {}", outcome == "fail" ? "FAIL" : outcome, f.verdict.message));
  page.paragraph("From " + source + ". " + target_description(f.target));
  page.heading(2, "Configuration");
  page.paragraph(describe_configuration(f.scenario, f.scalar));
  const auto& e = f.scenario.engine;
  std::size_t micro_batches = 0;
  for (const auto& s : f.scenario.steps) micro_batches += s.micro_batches.size();
  page.table({"field", "value"},
             {{{"target"}, {f.target}},
              {{"property"}, {f.property}},
              {{"scalar"}, {std::string(sim::to_string(f.scalar))}},
              {{"campaign seed, trial"}, {fmt::format("{}, {}", f.campaign_seed, f.trial)}},
              {{"ranks, G"}, {fmt::format("{}, {}", e.rank_count, e.accumulation_steps)}},
              {{"ZeRO stage, offload"}, {fmt::format("{}, {}", e.zero_stage, e.offload ? "on" : "off")}},
              {{"boundary"}, {std::string(sim::to_string(e.boundary)) + (e.step_after_every_backward ? ", step() after every backward"
                                                                                                    : ", step() once per window")}},
              {{"precision"}, {std::string(sim::to_string(e.precision))}},
              {{"optimizer steps, micro-batches"}, {fmt::format("{}, {}", f.scenario.steps.size(), micro_batches)}},
              {{"shrunk"}, {fmt::format("size {} from {} ({} attempts, {} accepted)", f.shrunk_size, f.original_size,
                                        f.shrink_attempts, f.shrink_accepted)}}});
  membership_section(page, f);
  mismatch_section(page, f);
  page.heading(2, "The story");
  page.code(explain(f));
  page.heading(2, "Replay and export");
  page.code(fmt::format("accumcheck replay {0}\naccumcheck explain {0}\naccumcheck export {0} --format markdown -o issue.md\n"
                        "accumcheck export {0} --format pytorch -o repro.py\naccumcheck export {0} --format gtest -o repro_test.cpp{1}",
                        source, f.target.find("deepspeed") != std::string::npos
                                    ? fmt::format("\naccumcheck export {} --format deepspeed -o repro_deepspeed.py", source)
                                    : std::string()));
  return page.render();
}

// ---- campaign report -----------------------------------------------------------------------------------------

std::string campaign_page(const json& doc, const std::string& source) {
  const json& results = doc.at("results");
  const std::uint64_t findings = results.at("findings").get<std::uint64_t>();
  HtmlPage page("Campaign report: seed " + results.at("seed").get<std::string>());
  std::uint64_t faults = 0;
  for (const auto& p : results.at("pairs")) faults += p.at("target_faults").get<std::uint64_t>();
  if (findings > 0) page.verdict("fail", fmt::format("{} finding{}", findings, findings == 1 ? "" : "s"));
  else if (faults > 0) page.verdict("target-fault", fmt::format("no finding, but {} target faults: not everything was checked", faults));
  else page.verdict("clean", "no finding");
  page.paragraph(fmt::format("From {}: {} trials of seed {}{}.", source, results.at("trials").get<std::uint64_t>(),
                             results.at("seed").get<std::string>(),
                             results.value("stopped_at_first_finding", false) ? ", stopped at the first finding" : ""));

  if (const json& g = results.value("generator", json()); g.is_object())
    page.paragraph(fmt::format("Scenarios drawn within: at most {} ranks, {} optimizer steps, G and windows of {}, {} sequences per "
                               "micro-batch and rank, {} tokens per sequence; model {}{}{}.",
                               g.at("rank_count_max").get<int>(), g.at("step_count_max").get<int>(),
                               g.at("accumulation_steps_max").get<int>(), g.at("sequences_per_micro_batch_max").get<int>(),
                               g.at("token_count_max").get<int>(), g.at("model").get<std::string>(),
                               g.at("ordinary_only").get<bool>() ? "; ordinary loops only" : "",
                               g.at("offload").is_boolean() ? (g.at("offload").get<bool>() ? "; offload on" : "; offload off") : ""));
  page.heading(2, "Per target and property");
  std::vector<std::vector<HtmlCell>> rows;
  json labels = json::array(), checked = json::array(), cannot = json::array(), faulted = json::array();
  std::map<std::string, std::uint64_t> exercised;
  std::vector<const json*> found;
  for (const auto& p : results.at("pairs")) {
    const auto trials = p.at("trials").get<std::uint64_t>(), cannot_run = p.at("cannot_run").get<std::uint64_t>(),
               target_faults = p.at("target_faults").get<std::uint64_t>();
    const bool failed = p.at("found").get<bool>();
    const std::string name = p.at("target").get<std::string>() + " / " + p.at("property").get<std::string>();
    labels.push_back(name);
    checked.push_back(trials - std::min(trials, cannot_run + target_faults));
    cannot.push_back(cannot_run);
    faulted.push_back(target_faults);
    std::string gap = "-";
    if (const auto& r = p.value("rounding_gap", json()); r.is_object())
      gap = fmt::format("{:.3g} of its bound", r.at("largest_ratio_to_bound").get<double>());
    rows.push_back({{p.at("target").get<std::string>()},
                    {p.at("property").get<std::string>()},
                    {std::to_string(trials)},
                    {std::to_string(cannot_run)},
                    {std::to_string(target_faults), target_faults > 0 ? "target-fault" : ""},
                    {failed ? fmt::format("found after {} trials", p.at("trials_to_first_failure").get<std::uint64_t>()) : "clean",
                     failed ? "fail" : "pass"},
                    {gap}});
    for (const auto& [feature, count] : p.at("exercised").items()) exercised[feature] += count.get<std::uint64_t>();
    if (failed) found.push_back(&p);
  }
  page.table({"target", "property", "trials", "could not run", "target faults", "verdict", "largest rounding gap"}, rows);
  json stacked = {{"x", {{"stacked", true}, {"title", {{"display", true}, {"text", "trials"}}}}}, {"y", {{"stacked", true}}}};
  page.chart("pairs", "Trials per target and property: checked (passed or failed), the property could not run on the scenario, "
                      "or the target misbehaved. A pair checked on few trials says little.",
             {{"type", "bar"},
              {"data", {{"labels", labels},
                        {"datasets", {bar_dataset("checked", checked, kColourReached), bar_dataset("could not run", cannot, kColourOther),
                                      bar_dataset("target fault", faulted, kColourWrong)}}}},
              {"options", {{"indexAxis", "y"}, {"scales", stacked}}}},
             900, std::max(200, 40 + 28 * static_cast<int>(labels.size())));

  if (!found.empty()) {
    page.heading(2, "Findings, shrunk");
    for (const json* p : found) {
      const json& m = p->at("minimal");
      page.heading(3, p->at("target").get<std::string>() + " / " + p->at("property").get<std::string>());
      if (!m.is_object()) {
        page.paragraph("Found from " + p->value("corpus_file", std::string("the corpus")) + ".");
        continue;
      }
      page.paragraph(m.at("message").get<std::string>());
      page.table({"steps", "micro-batches", "G", "ranks", "ZeRO", "offload", "parameters"},
                 {{{std::to_string(m.at("steps").get<int>())},
                   {std::to_string(m.at("micro_batches").get<int>())},
                   {std::to_string(m.at("accumulation_steps").get<int>())},
                   {std::to_string(m.at("ranks").get<int>())},
                   {std::to_string(m.at("zero_stage").get<int>())},
                   {m.at("offload").get<bool>() ? "on" : "off"},
                   {std::to_string(m.at("parameters").get<int>())}}});
      if (m.contains("file") && m.at("file").is_string()) {
        const std::string file = m.at("file").get<std::string>();
        page.code(fmt::format("accumcheck replay {0}\naccumcheck report {0} -o finding.html", file));
      }
    }
  }
  if (!exercised.empty()) {
    page.heading(2, "What the checked scenarios exercised");
    json names = json::array(), counts = json::array();
    for (const auto& [feature, count] : exercised) {
      names.push_back(feature);
      counts.push_back(count);
    }
    page.chart("exercised", "Over every target and property: how many checked trials had each feature (scenario_features, "
                            "docs/fuzzing.md).",
               {{"type", "bar"},
                {"data", {{"labels", names}, {"datasets", {bar_dataset("checked trials with the feature", counts, kColourExpected)}}}},
                {"options", {{"indexAxis", "y"}}}},
               900, std::max(200, 40 + 22 * static_cast<int>(names.size())));
  }
  if (const auto& timing = doc.value("timing", json()); timing.is_object())
    page.paragraph(fmt::format("Took {:.1f} s on {} job(s) ({:.0f} trials/s); timing is not part of what the seed determines.",
                               timing.at("seconds").get<double>(), timing.at("jobs").get<int>(),
                               timing.at("trials_per_second").get<double>()));
  return page.render();
}

// ---- audit ---------------------------------------------------------------------------------------------------

std::string as_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "unknown";
  return v.dump();
}

// The input that stated a value; empty when none did (null in the JSON).
std::string source_of(const json& stated) {
  const json& source = stated.value("source", json());
  return source.is_string() ? source.get<std::string>() : std::string();
}

void audit_run_section(HtmlPage& page, const json& run, std::size_t index) {
  const std::string verdict = run.at("verdict").get<std::string>();
  page.heading(2, "Run " + run.at("run").get<std::string>(), fmt::format("run-{}", index));
  page.verdict(verdict, verdict);
  std::vector<std::vector<HtmlCell>> config_rows;
  for (const auto& [field, stated] : run.at("configuration").items()) {
    if (field == "versions") continue;
    if (!stated.is_object()) continue;
    config_rows.push_back({{field}, {as_text(stated.value("value", json()))}, {source_of(stated)}});
  }
  for (const auto& [name, stated] : run.at("configuration").at("versions").items())
    config_rows.push_back({{name}, {as_text(stated.at("value"))}, {source_of(stated)}});
  page.table({"field", "value", "stated by"}, config_rows);
  for (const auto& d : run.at("defects")) {
    const std::string status = d.at("status").get<std::string>();
    page.heading(3, d.at("id").get<std::string>() + ": " + status);
    page.paragraph(d.at("title").get<std::string>() + " (" + d.at("evidence").get<std::string>() + "; " + d.at("where").get<std::string>() + ")");
    std::vector<std::vector<HtmlCell>> rows;
    for (const auto& c : d.at("conditions")) {
      const json& holds = c.at("holds");
      rows.push_back({{c.at("condition").get<std::string>()}, {as_text(c.at("value"))}, {source_of(c)},
                      holds.is_null() ? HtmlCell{"unknown", "cannot-tell"}
                                      : holds.get<bool>() ? HtmlCell{"yes", ""} : HtmlCell{"no", "not-affected"}});
    }
    page.table({"condition", "value", "stated by", "holds"}, rows);
    if (d.at("damage").is_string()) page.paragraph(d.at("damage").get<std::string>());
    const json& numbers = d.at("numbers");
    if (numbers.contains("micro_batches_reaching_optimizer") && numbers.contains("window_measured")) {
      const int window = numbers.at("window_measured").get<int>();
      const auto reaching = numbers.at("micro_batches_reaching_optimizer").get<std::vector<int>>();
      json labels = json::array(), reached = json::array(), dropped = json::array();
      for (int k = 0; k < window; ++k) {
        const bool in = std::find(reaching.begin(), reaching.end(), k) != reaching.end();
        labels.push_back(fmt::format("micro-batch {}", k));
        reached.push_back(in ? 1 : 0);
        dropped.push_back(in ? 0 : 1);
      }
      page.chart(fmt::format("run-{}-{}", index, d.at("id").get<std::string>()),
                 fmt::format("Measured on {} at G = {}: which micro-batches of a window reached the optimizer ({}).",
                             numbers.value("model", std::string("our model")), window, numbers.value("fraction_of_signal", std::string())),
                 {{"type", "bar"},
                  {"data", {{"labels", labels},
                            {"datasets", {bar_dataset("reached the optimizer", reached, kColourReached),
                                          bar_dataset("dropped", dropped, kColourWrong)}}}},
                  {"options", {{"scales", {{"x", {{"stacked", true}}}, {"y", {{"stacked", true}, {"max", 1}, {"ticks", {{"stepSize", 1}}}}}}}}}},
                 720, 240);
    }
  }
  if (const json& c = run.at("confirmation"); c.is_object()) {
    page.heading(3, "Confirmed on the real release (--confirm)");
    if (!c.at("ran").get<bool>()) {
      page.verdict("cannot-tell", "could not run: " + as_text(c.at("why_not")));
    } else {
      const bool real = c.at("real_shows_defect").get<bool>(), agree = c.at("agree").get<bool>();
      page.verdict(real ? "fail" : "pass", fmt::format("{}: {}; our model {}", c.at("target").get<std::string>(),
                                                       real ? "the defect shows" : "the defect does not show",
                                                       agree ? "agrees" : "DISAGREES"));
      page.paragraph(c.at("scenario").get<std::string>() + " " + c.at("real_message").get<std::string>());
      if (c.at("finding").is_string())
        page.code(fmt::format("accumcheck replay {0}\naccumcheck report {0} -o finding.html\npython3 {1}", c.at("finding").get<std::string>(),
                              as_text(c.at("reproducer"))));
    }
  }
  if (const json& notes = run.at("notes"); notes.is_array() && !notes.empty()) {
    std::vector<std::string> items;
    for (const auto& n : notes) items.push_back(as_text(n));
    page.heading(3, "Notes");
    page.list(items);
  }
}

std::string audit_page(const json& doc, const std::string& source) {
  const json& runs = doc.at("runs");
  HtmlPage page(fmt::format("Audit: {} run{}", runs.size(), runs.size() == 1 ? "" : "s"));
  std::size_t affected = 0, unknown = 0;
  std::vector<std::vector<HtmlCell>> rows;
  for (const auto& run : runs) {
    const std::string verdict = run.at("verdict").get<std::string>();
    affected += verdict == "affected";
    unknown += verdict == "cannot tell";
    std::string which;
    for (const auto& d : run.at("defects"))
      if (d.at("status").get<std::string>() != "not affected")
        which += (which.empty() ? "" : ", ") + d.at("id").get<std::string>() + " (" + d.at("status").get<std::string>() + ")";
    rows.push_back({{run.at("run").get<std::string>()}, {verdict, verdict}, {which.empty() ? "-" : which}});
  }
  if (affected > 0) page.verdict("affected", fmt::format("{} of {} runs affected", affected, runs.size()));
  else if (unknown > 0) page.verdict("cannot-tell", fmt::format("no run affected, but {} cannot be decided", unknown));
  else page.verdict("not-affected", "no run affected");
  page.paragraph("From " + source + ". docs/audit.md says what each defect's conditions are and how the damage is measured.");
  page.table({"run", "verdict", "defects not ruled out"}, rows);
  for (std::size_t i = 0; i < runs.size(); ++i) audit_run_section(page, runs[i], i);
  return page.render();
}

}  // namespace

MembershipWeights membership_weights(const sim::Target& target, const sim::Scenario& scenario) {
  MembershipWeights out;
  const sim::Scenario as_run = target.as_run(scenario);
  const properties::MembershipProbe probe = properties::membership_probe(as_run);
  if (probe.ids.size() > kMembershipWeightsMicroBatchMax) {
    out.why_not = fmt::format("the run has {} micro-batch gradients (over steps and ranks); the picture measures at most {}",
                              probe.ids.size(), kMembershipWeightsMicroBatchMax);
    return out;
  }
  if (const std::string why = target.unsupported(probe.scenario); !why.empty()) {
    out.why_not = "the target refuses the probe's scenario: " + why;
    return out;
  }
  out.weight.assign(probe.scenario.steps.size(), std::vector<Rational>(probe.ids.size(), Rational(0)));
  for (std::size_t id = 0; id < probe.ids.size(); ++id) {
    const auto& m = probe.ids[id];
    out.micro_batches.push_back(fmt::format("s{} k{} r{}", m.step, m.micro_batch, m.rank));
    out.own_step.push_back(m.step);
    // Only micro-batch `id` has a gradient (1 in w at w = 0: target -1), every other one 0.
    sim::Scenario one = probe.scenario;
    std::size_t seen = 0;
    for (auto& step : one.steps)
      for (auto& mb : step.micro_batches)
        for (auto& rank : mb.rank_sequences)
          for (auto& seq : rank) seq.targets(0, 0) = seen++ == id ? Rational(-1) : Rational(0);
    sim::RunResult result;
    try {
      result = target.run(one, {.scalar = sim::ScalarKind::rational});
    } catch (const std::exception& e) {
      out.why_not = std::string("the target did not run the probe: ") + e.what();
      return out;
    }
    for (std::size_t s = 0; s < result.steps.size() && s < out.weight.size(); ++s)
      if (result.steps[s].applied) out.weight[s][id] = result.steps[s].gradient.tensors[0](0, 0);
  }
  return out;
}

std::string report_html(const json& document, const std::string& source) {
  try {
    if (!document.is_object()) throw std::invalid_argument("report: " + source + " is not a JSON object");
    if (document.contains("audit")) return audit_page(document, source);
    const std::string format = document.value("format", std::string());
    if (format == fuzz::kFindingFormat) return finding_page(document, source);
    if (format == "accumcheck-report") return campaign_page(document, source);
    throw std::invalid_argument("report: " + source +
                                " is neither a campaign report (\"format\": \"accumcheck-report\"), a finding (\"format\": "
                                "\"accumcheck-finding\") nor an audit (accumcheck audit --json)");
  } catch (const json::exception& e) {
    throw std::invalid_argument("report: " + source + ": a field is missing or has the wrong type (" + e.what() + ")");
  }
}

}  // namespace accumcheck::surface
