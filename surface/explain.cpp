// Explain: the story of a finding in words, and the catalogue hint computed from its facts.
//
// The catalogue hint recomputes step 0 exactly under three hypotheses about what a broken engine kept (every
// micro-batch once with the target's framework-layer coefficients; micro-batches 0 and n-1 only; micro-batch
// n-1 only) and names a catalogue entry only when the recorded actual values equal one hypothesis exactly and
// the configuration is the one that entry needs. Membership findings are read from their decoded entries.
#include "surface/explain.h"

#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "fuzz/generator.h"
#include "models/model_spec.h"
#include "sim/external/adapter_target.h"
#include "properties/membership.h"
#include "sim/loss_normaliser.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives

namespace {

using models::Rational;
using Tensors = std::vector<models::Matrix<Rational>>;

constexpr std::string_view kProperty1 = "accumulated_update_equals_full_batch_update";
constexpr std::string_view kProperty2 = "split_does_not_change_the_update";
constexpr std::string_view kProperty3 = "offload_and_partitioning_do_not_change_the_update";
constexpr std::string_view kProperty5 = "applied_gradient_holds_each_micro_batch_once";

// Token values are listed only for scenarios this small; beyond it the counts tell the story.
constexpr int kTokensListedMax = 16;

std::string plural(long count, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", count, count == 1 ? one : many);
}

std::string decimal(const Rational& value) { return fmt::format("{}", value.to_double()); }

int total_tokens(const sim::Scenario& s) {
  int tokens = 0;
  for (const auto& step : s.steps)
    for (const auto& mb : step.micro_batches)
      for (const auto& rank : mb.rank_sequences)
        for (const auto& seq : rank) tokens += seq.token_count();
  return tokens;
}

std::string row_of(const models::Matrix<Rational>& m, int row) {
  std::string out = "(";
  for (Eigen::Index c = 0; c < m.cols(); ++c) out += (c > 0 ? ", " : "") + m(row, c).to_string();
  return out + ")";
}

std::string optimizer_text(const models::OptimizerSpec& o) {
  std::string out;
  switch (o.kind) {
    case models::OptimizerKind::sgd:
      out = "SGD (lr " + o.lr.to_string();
      if (!o.momentum.is_zero()) out += ", momentum " + o.momentum.to_string();
      if (!o.dampening.is_zero()) out += ", dampening " + o.dampening.to_string();
      if (o.nesterov) out += ", nesterov";
      break;
    case models::OptimizerKind::adam:
    case models::OptimizerKind::adamw:
      out = std::string(o.kind == models::OptimizerKind::adam ? "Adam" : "AdamW") + " (lr " + o.lr.to_string() +
            ", betas (" + o.beta1.to_string() + ", " + o.beta2.to_string() + "), eps " + o.eps.to_string();
      break;
  }
  if (!o.weight_decay.is_zero()) out += ", weight decay " + o.weight_decay.to_string();
  if (o.missing_gradient_is_zero) out += ", missing gradients stepped as zeros";
  return out + ")";
}

std::string model_text(const models::ModelSpec& m) {
  std::string out;
  switch (m.kind) {
    case models::ModelKind::linear:
      out = fmt::format("linear (input {}, output {}", m.input_size, m.output_size);
      if (m.expert_count > 1) out += fmt::format(", {} routed experts", m.expert_count);
      out += ")";
      break;
    case models::ModelKind::mlp:
      out = fmt::format("mlp (input {}, hidden {}, output {})", m.input_size, m.hidden_size, m.output_size);
      break;
    case models::ModelKind::tied_embedding:
      out = fmt::format("tied_embedding (vocabulary {}, embedding {})", m.vocab_size, m.embed_size);
      break;
  }
  const auto names = models::parameter_names(m);
  const auto shapes = models::parameter_shapes(m);
  out += " with parameters ";
  for (std::size_t p = 0; p < names.size(); ++p)
    out += fmt::format("{}{} [{}, {}]", p > 0 ? ", " : "", names[p], shapes[p].first, shapes[p].second);
  if (!m.frozen.empty()) {
    out += " (frozen: ";
    for (std::size_t i = 0; i < m.frozen.size(); ++i) out += (i > 0 ? ", " : "") + m.frozen[i];
    out += ")";
  }
  return out;
}

// "step S / gradient / NAME[r,c]" -> its parts.
struct GradientWhere {
  int step = 0;
  std::string name;
  int row = 0, col = 0;
};
std::optional<GradientWhere> parse_gradient_where(const std::string& where) {
  constexpr std::string_view kStep = "step ", kGradient = " / gradient / ";
  if (!where.starts_with(kStep)) return std::nullopt;
  const std::size_t slash = where.find(kGradient);
  const std::size_t open = where.rfind('[');
  const std::size_t comma = where.rfind(',');
  if (slash == std::string::npos || open == std::string::npos || comma == std::string::npos || open < slash ||
      comma < open || !where.ends_with("]"))
    return std::nullopt;
  try {
    GradientWhere g;
    g.step = std::stoi(where.substr(kStep.size(), slash - kStep.size()));
    g.name = where.substr(slash + kGradient.size(), open - slash - kGradient.size());
    g.row = std::stoi(where.substr(open + 1, comma - open - 1));
    g.col = std::stoi(where.substr(comma + 1, where.size() - comma - 2));
    return g;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Step 0 recomputed exactly under what a broken engine might have kept.
struct StepZeroHypotheses {
  Tensors every_micro_batch;  // each micro-batch once, with the framework layer's coefficients
  Tensors first_and_last;     // micro-batches 0 and n-1 only
  Tensors last_only;          // micro-batch n-1 only
  bool layer_is_window_global = true;  // the layer's coefficients equal G R c_i for this window
  int micro_batch_count = 0;
};

Tensors sum_of(const std::vector<models::Gradient<Rational>>& parts, const std::vector<std::size_t>& which,
               const models::ModelSpec& spec) {
  models::Gradient<Rational> out = models::zero_gradient<Rational>(spec);
  for (std::size_t k : which)
    for (std::size_t p = 0; p < out.tensors.size(); ++p) out.tensors[p] += parts[k].tensors[p];
  return out.tensors;
}

std::optional<StepZeroHypotheses> step_zero_hypotheses(const sim::Scenario& s, std::string_view target) {
  if (s.steps.empty() || s.steps[0].micro_batches.empty()) return std::nullopt;
  const auto layer = sim::find_normaliser(framework_layer_of(target));
  if (!layer) return std::nullopt;
  const sim::StepPlan& window = s.steps[0];
  const models::ModelSpec& spec = s.training.model;
  const int G = s.engine.accumulation_steps, R = s.engine.rank_count;
  const sim::WindowCoefficients coefficients = layer->coefficients(window, s.engine, s.training.aggregation);

  std::vector<models::Sequence<Rational>> everything;
  for (const auto& mb : window.micro_batches)
    for (const auto& rank : mb.rank_sequences) everything.insert(everything.end(), rank.begin(), rank.end());
  const auto counts = models::count_scope(std::span<const models::Sequence<Rational>>(everything));

  StepZeroHypotheses h;
  h.micro_batch_count = static_cast<int>(window.micro_batches.size());
  std::vector<models::Gradient<Rational>> per_micro_batch;
  const Rational engine_scale = Rational(1) / Rational(static_cast<long long>(G) * R);
  for (std::size_t k = 0; k < window.micro_batches.size(); ++k) {
    models::Gradient<Rational> g = models::zero_gradient<Rational>(spec);
    for (std::size_t r = 0; r < window.micro_batches[k].rank_sequences.size(); ++r) {
      const auto& seqs = window.micro_batches[k].rank_sequences[r];
      std::vector<Rational> c;
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        const Rational layer_c = coefficients[k][r][i];
        const Rational global_c = models::sequence_coefficient(s.training.aggregation, seqs[i].valid_token_count(), counts) *
                                  Rational(static_cast<long long>(G) * R);
        if (layer_c != global_c && seqs[i].valid_token_count() > 0) h.layer_is_window_global = false;
        c.push_back(layer_c * engine_scale);
      }
      models::accumulate_gradient(spec, s.initial_parameters, std::span<const models::Sequence<Rational>>(seqs),
                                  std::span<const Rational>(c), g);
    }
    per_micro_batch.push_back(std::move(g));
  }
  const std::size_t n = per_micro_batch.size();
  std::vector<std::size_t> all(n);
  for (std::size_t k = 0; k < n; ++k) all[k] = k;
  h.every_micro_batch = sum_of(per_micro_batch, all, spec);
  h.first_and_last = sum_of(per_micro_batch, n >= 2 ? std::vector<std::size_t>{0, n - 1} : std::vector<std::size_t>{0}, spec);
  h.last_only = sum_of(per_micro_batch, {n - 1}, spec);
  return h;
}

// True when the finding records at least one step-0 gradient mismatch and every one of them has exactly the
// hypothesis's value as its actual value (and no step-0 "applied" mismatch).
bool step_zero_actual_equals(const Finding& f, const Tensors& hypothesis) {
  const auto names = models::parameter_names(f.scenario.training.model);
  int matched = 0;
  for (const auto& m : f.verdict.mismatches) {
    if (m.where == "step 0 / applied") return false;
    const auto g = parse_gradient_where(m.where);
    if (!g || g->step != 0) continue;
    const auto it = std::find(names.begin(), names.end(), g->name);
    if (it == names.end()) return false;
    const auto& t = hypothesis[static_cast<std::size_t>(it - names.begin())];
    if (g->row < 0 || g->col < 0 || g->row >= t.rows() || g->col >= t.cols()) return false;
    if (t(g->row, g->col) != m.actual) return false;
    ++matched;
  }
  return matched > 0;
}

std::string normalisation_section(std::string_view layer) {
  if (layer.starts_with("openrlhf")) return "catalogue section 2 (OpenRLHF: mean of per-micro-batch means)";
  if (layer.starts_with("transformers"))
    return "catalogue section 3 (Hugging Face Trainer: loss normalised per micro-batch or per rank)";
  return "catalogue sections 2 and 3 (per-micro-batch or per-rank loss normalisation)";
}

constexpr const char* kSection1 =
    "catalogue section 1 (DeepSpeed ZeRO-2 with a CPU-offloaded optimizer drops intermediate micro-batches; "
    "PR #6550, fixed in v0.19.0 by PRs #7967 and #7981)";

std::string membership_hint(const Finding& f, const sim::Scenario& run) {
  const properties::MembershipReport& report = *f.verdict.membership;
  const auto& e = run.engine;
  const std::string layer = framework_layer_of(f.target);
  if (report.summary.find("wrong weights") != std::string::npos) {
    // The probe uses `sum`, whose window-global coefficient is 1: a layer that hands the engine anything but
    // G R (the compensation of its 1/G and rank average) weights every micro-batch wrongly.
    const auto normaliser = sim::find_normaliser(layer);
    if (!normaliser) return {};
    const properties::MembershipProbe probe = properties::membership_probe(run);
    if (probe.scenario.steps.empty()) return {};
    const auto c = normaliser->coefficients(probe.scenario.steps[0], probe.scenario.engine, probe.scenario.training.aggregation);
    const Rational compensation(static_cast<long long>(e.accumulation_steps) * e.rank_count);
    bool compensates = true;
    for (const auto& k : c)
      for (const auto& r : k)
        for (const auto& ci : r) compensates = compensates && ci == compensation;
    if (compensates) return {};
    return "resembles " + normalisation_section(layer) + ": the framework layer " + layer +
           " does not hand the engine window-global coefficients (G R c_i), so every micro-batch gets a wrong weight";
  }
  bool drops = false, duplicates = false, leaks = false, intermediate_drops_only = true;
  std::vector<std::string> dropped;
  for (const auto& w : report.wrong) {
    const bool own = w.applied_in_step == w.micro_batch.step;
    if (own && w.multiplicity.is_zero()) {
      drops = true;
      const auto step = static_cast<std::size_t>(w.micro_batch.step);
      const int n = step < f.scenario.steps.size() ? static_cast<int>(f.scenario.steps[step].micro_batches.size()) : 0;
      if (!(w.micro_batch.micro_batch > 0 && w.micro_batch.micro_batch < n - 1)) intermediate_drops_only = false;
      const std::string name = fmt::format("{} of step {}", w.micro_batch.micro_batch, w.micro_batch.step);
      if (std::find(dropped.begin(), dropped.end(), name) == dropped.end()) dropped.push_back(name);
    } else if (own) {
      duplicates = true;
    } else {
      leaks = true;
    }
  }
  if (drops && !duplicates && !leaks && intermediate_drops_only && e.zero_stage == 2 && e.offload &&
      e.accumulation_steps >= 3) {
    std::string list;
    for (std::size_t i = 0; i < dropped.size(); ++i) list += (i > 0 ? ", " : "") + dropped[i];
    return std::string("resembles ") + kSection1 + ": only intermediate micro-batches were dropped (micro-batch " + list +
           "), with ZeRO-2, offload and G = " + std::to_string(e.accumulation_steps);
  }
  if (leaks) return "resembles catalogue section 5, gradient leaking from one optimizer step into the next";
  if (duplicates) return "resembles catalogue section 5, a double-counted micro-batch";
  if (drops) return "resembles catalogue section 5, a dropped micro-batch";
  return {};
}

}  // namespace

std::string framework_layer_of(std::string_view target_name) {
  const auto parts = sim::split_target_name(target_name);
  if (parts.size() == 3) return parts[1];
  if (parts.size() == 2 && sim::find_normaliser(parts[0])) return parts[0];
  return "reference";
}

std::string target_description(std::string_view target_name) {
  try {
    return sim::make_target(target_name)->description();
  } catch (const std::invalid_argument& e) {
    return std::string("(this build of accumcheck does not know this target: ") + e.what() + ")";
  }
}

sim::Scenario scenario_as_run(std::string_view target_name, const sim::Scenario& scenario) {
  try {
    return sim::make_target(target_name)->as_run(scenario);
  } catch (const std::invalid_argument&) {
  }
  return scenario;
}

std::string describe_configuration(const sim::Scenario& s, sim::ScalarKind scalar) {
  const sim::EngineConfig& e = s.engine;
  std::string loop = e.boundary == sim::BoundaryMode::automatic
                         ? "automatic boundary"
                         : "boundary set by the caller on the last backward of each window";
  loop += e.step_after_every_backward ? ", engine.step() after every backward" : ", engine.step() once per window";
  std::string zero = e.zero_stage == 0 ? "no ZeRO partitioning (stage 0)" : "ZeRO-" + std::to_string(e.zero_stage);
  zero += e.offload ? " with the optimizer offloaded to the host" : " without offload";
  std::string precision = e.precision == sim::Precision::full ? "full precision" : std::string(sim::to_string(e.precision)) + " storage";
  if (e.loss_scaler)
    precision += fmt::format(", {} loss scaling from {}", e.loss_scaler->dynamic ? "dynamic" : "static",
                             e.loss_scaler->initial_scale.to_string());
  const bool exact = scalar == sim::ScalarKind::rational || scalar == sim::ScalarKind::fast_rational;
  std::string first = fmt::format("{}, G = {} ({}), {}, {}, computed in {}{} arithmetic",
                                  plural(e.rank_count, "data-parallel rank", "data-parallel ranks"), e.accumulation_steps,
                                  loop, zero, precision, exact ? "exact " : "", sim::to_string(scalar));
  if (e.bucket_element_count > 0) first += fmt::format(", reduction buckets of {} elements", e.bucket_element_count);
  if (s.schedule_seed != 0) first += fmt::format(", schedule seed {}", s.schedule_seed);

  const models::TrainingSpec& t = s.training;
  std::string aggregation(models::to_string(t.aggregation.mode));
  if (t.aggregation.mode == models::LossAggregation::seq_mean_token_sum_norm)
    aggregation += " (C = " + t.aggregation.norm_constant.to_string() + ")";
  std::string second = fmt::format("Model {}; {} aggregation; {}; {}; {}", model_text(t.model), aggregation,
                                   optimizer_text(t.optimizer),
                                   t.max_grad_norm ? "gradient clipping at global norm " + t.max_grad_norm->to_string()
                                                   : std::string("no gradient clipping"),
                                   plural(static_cast<long>(s.steps.size()), "optimizer step", "optimizer steps"));
  if (s.checkpoint_after_step)
    second += fmt::format(", with a checkpoint saved after step {} and resumed in a fresh engine", *s.checkpoint_after_step);
  return first + ". " + second + ".";
}

std::string describe_token(const models::ModelSpec& spec, const models::Sequence<Rational>& seq, int t) {
  std::string out;
  if (spec.kind == models::ModelKind::tied_embedding) out = "id=" + std::to_string(seq.token_ids[static_cast<std::size_t>(t)]);
  else out = "x=" + row_of(seq.features, t);
  out += " y=" + row_of(seq.targets, t);
  if (spec.kind == models::ModelKind::linear && spec.expert_count > 1)
    out += " expert=" + std::to_string(seq.expert_index[static_cast<std::size_t>(t)]);
  if (seq.loss_mask[static_cast<std::size_t>(t)] == 0) out += " masked";
  return out;
}

std::vector<std::string> describe_data(const sim::Scenario& s, std::size_t line_count_max) {
  const bool list_values = total_tokens(s) <= kTokensListedMax;
  std::vector<std::string> lines;
  std::size_t left_out = 0;
  auto add = [&](std::string line) {
    if (lines.size() < line_count_max) lines.push_back(std::move(line));
    else ++left_out;
  };
  for (std::size_t st = 0; st < s.steps.size(); ++st) {
    const auto& window = s.steps[st].micro_batches;
    long sequences = 0, tokens = 0, supervised = 0;
    for (const auto& mb : window)
      for (const auto& rank : mb.rank_sequences)
        for (const auto& seq : rank) {
          ++sequences;
          tokens += seq.token_count();
          supervised += seq.valid_token_count();
        }
    add(fmt::format("step {}: {}; {}, {} ({} supervised)", st, plural(static_cast<long>(window.size()), "micro-batch", "micro-batches"),
                    plural(sequences, "sequence", "sequences"), plural(tokens, "token", "tokens"), supervised));
    for (std::size_t k = 0; k < window.size(); ++k) {
      std::string line = fmt::format("  micro-batch {}:", k);
      const auto& ranks = window[k].rank_sequences;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        line += fmt::format("{} rank {}: ", r > 0 ? ";" : "", r);
        if (ranks[r].empty()) {
          line += "no sequences";
          continue;
        }
        long rank_tokens = 0, rank_supervised = 0;
        std::string lengths;
        for (std::size_t i = 0; i < ranks[r].size(); ++i) {
          rank_tokens += ranks[r][i].token_count();
          rank_supervised += ranks[r][i].valid_token_count();
          lengths += (i > 0 ? " + " : "") + std::to_string(ranks[r][i].token_count());
        }
        line += plural(static_cast<long>(ranks[r].size()), "sequence", "sequences") + " of " + lengths +
                (rank_tokens == 1 ? " token" : " tokens");
        if (rank_supervised != rank_tokens) line += fmt::format(" ({} supervised)", rank_supervised);
        if (list_values) {
          line += " =";
          for (const auto& seq : ranks[r]) {
            line += " [";
            for (int t = 0; t < seq.token_count(); ++t) line += (t > 0 ? "; " : "") + describe_token(s.training.model, seq, t);
            line += "]";
          }
        }
      }
      add(std::move(line));
    }
  }
  if (left_out > 0) lines.push_back(fmt::format("  ... and {} more lines", left_out));
  return lines;
}

std::string describe_mismatch(const properties::Mismatch& m) {
  std::string out = fmt::format("{}: expected {} ({}), actual {} ({})", m.where, m.expected.to_string(),
                                decimal(m.expected), m.actual.to_string(), decimal(m.actual));
  const Rational difference = m.actual - m.expected;
  out += fmt::format("; actual - expected = {} ({})", difference.to_string(), decimal(difference));
  return out;
}

std::string describe_membership_entry(const properties::MembershipReport& report, const properties::MembershipEntry& w) {
  // decode_membership writes "step S: applied gradient G is not a whole sum ... (wrong weights)" for such a step.
  const std::string marker = "step " + std::to_string(w.applied_in_step) + ": applied gradient ";
  for (std::size_t at = report.summary.find(marker); at != std::string::npos; at = report.summary.find(marker, at + 1)) {
    if (at > 0 && report.summary.compare(at - 2, 2, "; ") != 0) continue;
    const std::size_t end = report.summary.find("; ", at);
    if (report.summary.substr(at, end == std::string::npos ? std::string::npos : end - at).find("wrong weights") != std::string::npos)
      return "wrong weight (the gradient applied in step " + std::to_string(w.applied_in_step) +
             " is not a whole sum of micro-batch gradients)";
  }
  const bool own = w.applied_in_step == w.micro_batch.step;
  if (own && w.multiplicity.is_zero()) return "dropped";
  if (own) return "applied " + w.multiplicity.to_string() + " times (expected once)";
  return "leaked into step " + std::to_string(w.applied_in_step) + " (" + w.multiplicity.to_string() + " times; expected 0)";
}

std::string catalogue_hint(const Finding& f) {
  const sim::Scenario run = scenario_as_run(f.target, f.scenario);
  if (f.property == kProperty5) return f.verdict.membership ? membership_hint(f, run) : std::string();
  if (f.property != kProperty1 && f.property != kProperty2 && f.property != kProperty3) return {};
  // The run whose values are "actual": the scenario as run; property 3 reports the offload-on run as actual.
  sim::Scenario actual_run = run;
  if (f.property == kProperty3) actual_run.engine.offload = true;
  std::optional<StepZeroHypotheses> h;
  try {
    h = step_zero_hypotheses(actual_run, f.target);
  } catch (const std::exception&) {
    return {};  // a scenario this build cannot evaluate gets no hint rather than a guess
  }
  if (!h) return {};
  const auto& e = actual_run.engine;
  const int n = h->micro_batch_count;
  if (n >= 3 && e.zero_stage == 2 && e.offload && e.accumulation_steps >= 3 && step_zero_actual_equals(f, h->first_and_last))
    return std::string("resembles ") + kSection1 + ": the actual step-0 gradient is exactly the sum of micro-batches 0 and " +
           std::to_string(n - 1) + " alone, with ZeRO-2, offload and G = " + std::to_string(e.accumulation_steps);
  if (f.property != kProperty3 && !h->layer_is_window_global && step_zero_actual_equals(f, h->every_micro_batch)) {
    const std::string layer = framework_layer_of(f.target);
    const auto normaliser = sim::find_normaliser(layer);
    return "resembles " + normalisation_section(layer) + ": the actual step-0 gradient is exactly every micro-batch once, "
           "weighted by the framework layer " + layer + " (" + std::string(normaliser->description()) +
           ") instead of window-global counts (catalogue section 4)";
  }
  if (n >= 2 && e.zero_stage == 2 && !e.offload && step_zero_actual_equals(f, h->last_only))
    return "resembles catalogue section 5, a dropped micro-batch: the actual step-0 gradient is exactly micro-batch " +
           std::to_string(n - 1) + " alone, as docs/targets.md section 7.5 describes for DeepSpeed 0.17.6 - 0.18.2 "
           "ZeRO-2 without offload (issue #7718)";
  return {};
}

std::string explain(const Finding& f) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line(fmt::format("accumcheck finding: {} fails {}", f.target, f.property));
  line("  " + std::string(properties::to_string(f.verdict.outcome)) + ": " + f.verdict.message);
  line("");
  line("Target: " + f.target);
  line("  " + target_description(f.target));
  const sim::Scenario run = scenario_as_run(f.target, f.scenario);
  if (!(run.engine == f.scenario.engine))
    line(fmt::format("  Its preset runs the scenario as ZeRO-{} {} offload.", run.engine.zero_stage, run.engine.offload ? "with" : "without"));
  const properties::Property* property = properties::find_property(f.property);
  line("Property: " + f.property);
  line("  " + (property ? std::string(property->description()) : std::string("(this build of accumcheck does not know this property)")));
  line("");
  line("Configuration: " + describe_configuration(f.scenario, f.scalar));
  if (const auto outside = outside_ordinary_features(f.scenario); !outside.empty()) {
    std::string list;
    for (const auto& o : outside) list += (list.empty() ? "" : "; ") + o;
    line("  Outside ordinary training: this finding needs " + list + "." +
         (f.target.starts_with(sim::external::kAdapterPrefix)
              ? std::string()
              : std::string(" What the target's model does there is read from the source and not confirmed by running the "
                            "real release; campaigns with --ordinary keep to ordinary loops.")));
  }
  if (models::trainable_value_count(f.scenario.training.model) == 0)
    line("  Every parameter is frozen: the property fails with nothing to train, so the defect is not in the values "
         "accumulated but in what the engine does around them (whether and when it applies a step, what it reports or "
         "keeps as state). The shrinker froze each parameter because the failure survived it.");
  if (f.property == kProperty5)
    line("  The membership probe keeps this engine configuration and these window shapes but replaces model and data: one "
         "scalar parameter w, `sum` aggregation, and micro-batch number id (counted across the run) with gradient 10^id, "
         "so the digits of each applied gradient count how often each micro-batch was applied.");
  line("");
  long sequences = 0, tokens = 0, micro_batches = 0;
  for (const auto& step : f.scenario.steps)
    for (const auto& mb : step.micro_batches) {
      ++micro_batches;
      for (const auto& rank : mb.rank_sequences)
        for (const auto& seq : rank) {
          ++sequences;
          tokens += seq.token_count();
        }
    }
  line(fmt::format("Data: {}, {}, {}, {}:", plural(static_cast<long>(f.scenario.steps.size()), "step", "steps"),
                   plural(micro_batches, "micro-batch", "micro-batches"), plural(sequences, "sequence", "sequences"),
                   plural(tokens, "token", "tokens")));
  for (const auto& text : describe_data(f.scenario)) line("  " + text);
  line("");
  if (!f.verdict.mismatches.empty()) {
    line("Expected versus actual (exact rationals; nearest doubles in brackets):");
    for (const auto& m : f.verdict.mismatches) line("  " + describe_mismatch(m));
  } else if (!f.verdict.membership) {
    line("Expected versus actual: no values recorded; the message above says what failed.");
  }
  if (f.verdict.membership) {
    line("Membership: " + f.verdict.membership->summary);
    for (const auto& w : f.verdict.membership->wrong)
      line(fmt::format("  micro-batch {} of step {} on rank {}: {}", w.micro_batch.micro_batch, w.micro_batch.step,
                       w.micro_batch.rank, describe_membership_entry(*f.verdict.membership, w)));
  }
  if (const std::string hint = catalogue_hint(f); !hint.empty()) {
    line("");
    line("Hint: this " + hint + ".");
  }
  line("");
  if (f.trial >= 0)
    line(fmt::format("Found by campaign seed {}, trial {} (trial seed {}); shrunk from size {} to {} ({} attempts, {} kept).",
                     f.campaign_seed, f.trial, f.trial_seed, f.original_size, f.shrunk_size, f.shrink_attempts, f.shrink_accepted));
  else
    line(fmt::format("Found replaying a corpus finding (trial seed {}); shrunk from size {} to {} ({} attempts, {} kept).",
                     f.trial_seed, f.original_size, f.shrunk_size, f.shrink_attempts, f.shrink_accepted));
  line("Replay: " + replay_command(f));
  return out;
}

}  // namespace accumcheck::surface
