// Swarm scenario generation.
#include "fuzz/generator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "models/model.h"
#include "sim/schedule.h"
#include "sim/sequence_pool.h"

namespace accumcheck::fuzz {

using models::Rational;

namespace {

struct Swarm {
  bool multi_rank, multi_step, partitioned, offload, manual_boundary, boundary_every_backward, empty_sequences,
      masked_tokens, experts, frozen, clipping, adam, momentum_decay, checkpoint, fractions, varied_lengths;
  models::ModelKind kind;
  models::LossAggregation aggregation;
};

// The generator's small values in lowest terms, by fractions on or off, the drawn kind (0 to 7) and the drawn n
// (0 to 8, the integer n - 4): kind 0 is 0, 1 is 1, 2 is -1 (n unused), 3 to 5 the integer n - 4, and 6 and 7 the
// same integer, or with fractions on (n - 4) / 2 and (n - 4) / 4.
struct SmallValue {
  std::int64_t num, den;
};
constexpr auto kSmallValues = [] {
  std::array<std::array<std::array<SmallValue, 9>, 8>, 2> table{};
  for (int fractions = 0; fractions < 2; ++fractions)
    for (int kind = 0; kind < 8; ++kind)
      for (int n = 0; n < 9; ++n) {
        std::int64_t num = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? -1 : n - 4, den = 1;
        if (fractions && kind >= 6 && num != 0) {
          den = kind == 6 ? 2 : 4;
          while (den > 1 && num % 2 == 0) num /= 2, den /= 2;
        }
        table[fractions][kind][n] = {num, den};
      }
  return table;
}();

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : stream_(seed) {}
  bool coin() { return stream_.coin(); }
  bool one_in(std::uint32_t n) { return stream_.below(n) == 0; }
  int in_range(int lo, int hi_inclusive) { return lo + static_cast<int>(stream_.below(static_cast<std::uint32_t>(hi_inclusive - lo + 1))); }
  // Small values: zero and one often, small integers, and (when fractions are on) halves and quarters. The
  // value is read from a table (kSmallValues) instead of chosen by branches on the drawn kind: those branches, on
  // a random value, mispredicted 16% to 26% of the time (cachegrind --branch-sim: 40 of a trial's 1,155
  // mispredictions at the peer's sizes). The draws and the values are those of the branches they replace.
  Rational value(bool fractions) {
    const std::uint32_t kind = stream_.below(8);
    const std::uint32_t n = stream_.below_if(kind >= 3, 9);  // n - 4 in [-4, 4]; kinds 0 to 2 draw nothing more
    const SmallValue& v = kSmallValues[fractions ? 1 : 0][kind][n];
    return Rational::from_canonical(v.num, v.den);
  }

 private:
  sim::Stream stream_;
};

Swarm draw_swarm(Draw& d, const GeneratorOptions& options) {
  Swarm w{};
  w.multi_rank = d.coin();
  w.multi_step = d.coin();
  w.partitioned = d.coin();
  w.offload = d.coin();
  w.manual_boundary = d.one_in(3);
  w.boundary_every_backward = !w.manual_boundary && d.one_in(6) && !options.ordinary_only;
  w.empty_sequences = d.coin();
  w.masked_tokens = d.coin();
  w.experts = d.one_in(4) && !options.ordinary_only;
  w.frozen = d.one_in(4);
  w.clipping = d.one_in(4);
  w.adam = d.one_in(3);
  w.momentum_decay = d.one_in(3);
  w.checkpoint = d.one_in(4);
  w.fractions = d.coin();
  w.varied_lengths = d.coin();
  if (options.model) {
    w.kind = *options.model;
  } else if (!options.model_kinds.empty()) {
    w.kind = options.model_kinds[static_cast<std::size_t>(d.in_range(0, static_cast<int>(options.model_kinds.size()) - 1))];
  } else {
    const int k = d.in_range(0, 5);
    w.kind = k <= 3 ? models::ModelKind::linear : (k == 4 ? models::ModelKind::mlp : models::ModelKind::tied_embedding);
  }
  w.aggregation = models::kAllLossAggregations[d.in_range(0, 4)];
  return w;
}

models::ModelSpec draw_model(Draw& d, const Swarm& w, const GeneratorOptions& o) {
  models::ModelSpec spec;
  spec.kind = w.kind;
  switch (w.kind) {
    case models::ModelKind::linear:
      spec.input_size = d.in_range(1, o.linear_input_size_max);
      spec.output_size = d.in_range(1, o.output_size_max);
      spec.expert_count = w.experts ? d.in_range(2, 3) : 1;
      break;
    case models::ModelKind::mlp:
      spec.input_size = d.in_range(1, o.mlp_input_size_max);
      spec.hidden_size = d.in_range(1, o.hidden_size_max);
      spec.output_size = d.in_range(1, o.output_size_max);
      break;
    case models::ModelKind::tied_embedding:
      spec.vocab_size = d.in_range(2, o.vocab_size_max);
      spec.embed_size = d.in_range(1, o.embed_size_max);
      break;
  }
  if (w.frozen) {
    const auto names = models::parameter_names(spec);
    spec.frozen.push_back(names[static_cast<std::size_t>(d.in_range(0, static_cast<int>(names.size()) - 1))]);
  }
  return spec;
}

models::Sequence<Rational> draw_sequence(Draw& d, const Swarm& w, const models::ModelSpec& spec, const GeneratorOptions& o) {
  int T = w.varied_lengths ? d.in_range(1, o.token_count_max) : std::min(2, o.token_count_max);
  if (w.empty_sequences && d.one_in(4)) T = 0;
  // In storage a finished trial gave back (fuzz/campaign.cpp, sim/sequence_pool.h); every value is drawn below.
  models::Sequence<Rational> seq = sim::SequencePool<Rational>::local().take(T, models::feature_size(spec), models::target_size(spec));
  seq.loss_mask.reserve(static_cast<std::size_t>(T));
  for (Eigen::Index i = 0; i < seq.features.size(); ++i) seq.features(i) = d.value(w.fractions);
  for (Eigen::Index i = 0; i < seq.targets.size(); ++i) seq.targets(i) = d.value(w.fractions);
  for (int t = 0; t < T; ++t) {
    seq.loss_mask.push_back(w.masked_tokens && d.one_in(3) ? 0 : 1);
    if (spec.kind == models::ModelKind::tied_embedding) seq.token_ids.push_back(d.in_range(0, spec.vocab_size - 1));
    if (spec.kind == models::ModelKind::linear && spec.expert_count > 1)
      seq.expert_index.push_back(d.in_range(0, spec.expert_count - 2));  // the last expert never gets a token
  }
  return seq;
}

}  // namespace

std::uint64_t trial_seed(std::uint64_t root, std::uint64_t index) {
  sim::Stream s(root ^ (index * 0x9E3779B97F4A7C15ULL));
  s.next();
  return s.next() ^ index;
}

namespace {
// Out of line, so that the checks themselves inline: generate_scenario validates its options on every trial, and
// with the message's strings in each check's body none did (300 instructions a trial).
[[noreturn, gnu::cold, gnu::noinline]] void outside(int value, int low, int high, const char* what) {
  throw std::invalid_argument(std::string("generator: ") + what + " is " + std::to_string(value) + ", outside [" +
                              std::to_string(low) + ", " + std::to_string(high) + "]");
}
}  // namespace

void validate(const GeneratorOptions& o) {
  const auto check = [](int value, int low, int high, const char* what) {
    if (value < low || value > high) [[unlikely]] outside(value, low, high, what);
  };
  check(o.step_count_max, 1, sim::kStepCountMax, "the most optimizer steps");
  check(o.rank_count_max, 1, sim::kRankCountMax, "the most ranks");
  check(o.accumulation_steps_max, 1, std::min(sim::kAccumulationStepsMax, sim::kMicroBatchesPerWindowMax), "the largest G");
  check(o.sequences_per_micro_batch_max, 1, kSequencesPerMicroBatchMax, "the most sequences per micro-batch and rank");
  check(o.token_count_max, 1, kTokenCountMax, "the most tokens per sequence");
  check(o.linear_input_size_max, 1, kModelWidthMax, "the widest linear input");
  check(o.mlp_input_size_max, 1, kModelWidthMax, "the widest MLP input");
  check(o.hidden_size_max, 1, kModelWidthMax, "the widest hidden layer");
  check(o.output_size_max, 1, kModelWidthMax, "the widest output");
  check(o.vocab_size_max, 2, kModelWidthMax, "the largest vocabulary");
  check(o.embed_size_max, 1, kModelWidthMax, "the widest embedding");
}

nlohmann::json to_json(const GeneratorOptions& o) {
  nlohmann::json kinds = nlohmann::json::array();
  for (auto k : o.model_kinds) kinds.push_back(std::string(models::to_string(k)));
  return {{"model", o.model ? std::string(models::to_string(*o.model)) : std::string("any")},
          {"ordinary_only", o.ordinary_only},
          {"offload", o.offload ? nlohmann::json(*o.offload) : nlohmann::json("any")},
          {"model_kinds", kinds},
          {"rank_counts", o.rank_counts},
          {"rank_count_max", o.rank_count_max},
          {"step_count_max", o.step_count_max},
          {"accumulation_steps_max", o.accumulation_steps_max},
          {"sequences_per_micro_batch_max", o.sequences_per_micro_batch_max},
          {"token_count_max", o.token_count_max},
          {"model_size_max", {{"linear_input", o.linear_input_size_max}, {"mlp_input", o.mlp_input_size_max},
                              {"hidden", o.hidden_size_max}, {"output", o.output_size_max}, {"vocab", o.vocab_size_max},
                              {"embed", o.embed_size_max}}},
          {"mixed_precision", o.mixed_precision}};
}

sim::Scenario generate_scenario(std::uint64_t seed, const GeneratorOptions& options) {
  validate(options);
  Draw d(seed);
  const Swarm w = draw_swarm(d, options);
  sim::Scenario s;
  s.training.model = draw_model(d, w, options);
  s.training.aggregation.mode = w.aggregation;
  s.training.aggregation.norm_constant = Rational(d.in_range(1, 8));
  auto& o = s.training.optimizer;
  o.kind = w.adam ? (d.coin() ? models::OptimizerKind::adam : models::OptimizerKind::adamw) : models::OptimizerKind::sgd;
  o.lr = d.coin() ? Rational::from_canonical(1, 2) : Rational::from_canonical(1, 8);
  if (w.momentum_decay) {
    o.weight_decay = Rational::from_canonical(1, 4);
    if (o.kind == models::OptimizerKind::sgd) o.momentum = Rational::from_canonical(1, 2);
  }
  if (o.kind != models::OptimizerKind::sgd) {
    o.beta1 = Rational::from_canonical(1, 2);
    o.beta2 = Rational::from_canonical(3, 4);
    o.eps = Rational::from_canonical(1, 8);
  }
  if (w.clipping) s.training.max_grad_norm = Rational(d.in_range(1, 4));

  auto& e = s.engine;
  e.rank_count = w.multi_rank && options.rank_count_max >= 2 ? d.in_range(2, options.rank_count_max) : 1;
  if (!options.rank_counts.empty() &&
      std::find(options.rank_counts.begin(), options.rank_counts.end(), e.rank_count) == options.rank_counts.end())
    e.rank_count = options.rank_counts[static_cast<std::size_t>(d.in_range(0, static_cast<int>(options.rank_counts.size()) - 1))];
  e.accumulation_steps = d.in_range(1, options.accumulation_steps_max);
  e.zero_stage = w.partitioned ? d.in_range(1, 3) : 0;
  e.offload = options.offload.value_or(w.offload);
  e.bucket_element_count = d.coin() ? 0 : d.in_range(1, 4);
  if (w.manual_boundary) {
    e.boundary = sim::BoundaryMode::manual;
    e.step_after_every_backward = d.coin();
  } else if (w.boundary_every_backward) {
    e.accumulation_steps = 1;
    e.step_after_every_backward = false;
  }
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  for (auto& t : s.initial_parameters.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = d.value(w.fractions);

  const int steps = w.multi_step && options.step_count_max >= 2 ? d.in_range(2, options.step_count_max) : 1;
  // Ordinary loops drive a manual boundary the way accelerate >= 1.8 does: windows of exactly the configured G.
  const bool fixed_windows = (e.boundary == sim::BoundaryMode::automatic && e.step_after_every_backward) ||
                             (options.ordinary_only && e.boundary == sim::BoundaryMode::manual);
  s.steps.reserve(static_cast<std::size_t>(steps));
  for (int st = 0; st < steps; ++st) {
    sim::StepPlan plan;
    const int window = fixed_windows ? e.accumulation_steps : d.in_range(1, options.accumulation_steps_max);
    plan.micro_batches.reserve(static_cast<std::size_t>(window));
    for (int k = 0; k < window; ++k) {
      sim::MicroBatch mb;
      mb.rank_sequences.reserve(static_cast<std::size_t>(e.rank_count));
      for (int r = 0; r < e.rank_count; ++r) {
        std::vector<models::Sequence<Rational>> seqs;
        const int count = w.empty_sequences && d.one_in(5) ? 0 : d.in_range(1, options.sequences_per_micro_batch_max);
        seqs.reserve(static_cast<std::size_t>(count));
        for (int i = 0; i < count; ++i) seqs.push_back(draw_sequence(d, w, s.training.model, options));
        mb.rank_sequences.push_back(std::move(seqs));
      }
      plan.micro_batches.push_back(std::move(mb));
    }
    s.steps.push_back(std::move(plan));
  }
  if (w.checkpoint && steps > 1) s.checkpoint_after_step = d.in_range(0, steps - 2);
  if (options.mixed_precision && d.one_in(3)) e.precision = d.coin() ? sim::Precision::bf16 : sim::Precision::fp16;
  // An epoch's last window is often short, and ordinary: with a manual boundary (accelerate, the Trainer) the
  // loop sets the boundary on the epoch's last micro-batch, so that window holds fewer than G. Drawn last, so
  // that every other draw of the scenario stays as it was.
  if (options.ordinary_only && e.boundary == sim::BoundaryMode::manual && e.accumulation_steps >= 2 && d.one_in(3))
    s.steps.back().micro_batches.resize(static_cast<std::size_t>(d.in_range(1, e.accumulation_steps - 1)));
  s.schedule_seed = seed;
  return s;
}

std::vector<std::string> outside_ordinary_features(const sim::Scenario& s) {
  std::vector<std::string> f;
  const auto& e = s.engine;
  bool several = false, uneven_inside = false;
  for (std::size_t st = 0; st < s.steps.size(); ++st) {
    const auto n = static_cast<int>(s.steps[st].micro_batches.size());
    several = several || (!e.step_after_every_backward && n > 1);
    // Under a manual boundary only the run's last window may be short (an epoch's end); elsewhere a window of
    // other than G is outside ordinary loops. Under an automatic boundary the engine counts, and the driver's
    // windows follow it.
    if (e.boundary == sim::BoundaryMode::manual && n != e.accumulation_steps && !(st + 1 == s.steps.size() && n < e.accumulation_steps))
      uneven_inside = true;
  }
  if (e.boundary == sim::BoundaryMode::automatic && several)
    f.emplace_back("the boundary on every backward with one step() per window (G = 1 and several backwards per step())");
  if (uneven_inside) f.emplace_back("a manual window of other than G micro-batches that is not the run's last");
  for (const auto& feature : scenario_features(s))
    if (feature == "a parameter without a gradient in a micro-batch") f.push_back(feature);
  return f;
}

namespace {
// The nearest engine configuration and aggregation the target runs, for a scenario with the given features:
// the aggregation as drawn, then the token mean every framework layer has, then every other mode; for each,
// stage 2 before 1 before 0 before 3, keeping offload, then with offload flipped.
bool fit_engine(sim::Scenario& s, const sim::Scenario& base, const sim::Target& target) {
  std::vector<models::LossAggregation> modes = {base.training.aggregation.mode, models::LossAggregation::token_mean};
  for (auto m : models::kAllLossAggregations) modes.push_back(m);
  for (models::LossAggregation mode : modes)
    for (bool offload : {base.engine.offload, !base.engine.offload})
      for (int stage : {base.engine.zero_stage, 2, 1, 0, 3}) {
        s = base;
        s.training.aggregation.mode = mode;
        s.engine.offload = offload;
        s.engine.zero_stage = stage;
        if (target.unsupported(s).empty()) return true;
      }
  return false;
}
}  // namespace

namespace {
// The labels of ScenarioFeatures::flags, bit i for entry i.
constexpr std::array<std::string_view, 9> kFlagLabels = {
    "manual boundary", "boundary on every backward", "several backwards per step()",
    "a window of other than G micro-batches", "checkpoint and resume", "frozen parameters",
    "a parameter without a gradient in a micro-batch", "clipping", "Adam or AdamW"};
enum FeatureFlag : std::uint32_t {
  kManualBoundary = 1U << 0,
  kBoundaryOnEveryBackward = 1U << 1,
  kSeveralBackwards = 1U << 2,
  kUnevenWindow = 1U << 3,
  kCheckpoint = 1U << 4,
  kFrozen = 1U << 5,
  kMissingGradient = 1U << 6,
  kClipping = 1U << 7,
  kAdam = 1U << 8,
};
}  // namespace

std::vector<std::string> ScenarioFeatures::labels() const {
  std::vector<std::string> f;
  f.push_back(std::to_string(rank_count) + (rank_count == 1 ? " rank" : " ranks"));
  f.push_back("ZeRO-" + std::to_string(zero_stage) + (offload ? " + offload" : ""));
  f.push_back("model " + std::string(models::to_string(model)));
  for (std::size_t i = 0; i < kFlagLabels.size(); ++i)
    if (flags & (1U << i)) f.emplace_back(kFlagLabels[i]);
  if (precision != sim::Precision::full) f.push_back(std::string(sim::to_string(precision)) + " storage");
  return f;
}

std::vector<std::string> scenario_features(const sim::Scenario& s) { return features_of(s).labels(); }

ScenarioFeatures features_of(const sim::Scenario& s) {
  const auto& e = s.engine;
  ScenarioFeatures f{.rank_count = e.rank_count, .zero_stage = e.zero_stage, .offload = e.offload,
                     .model = s.training.model.kind, .precision = e.precision};
  bool several = false, uneven = false;
  for (const auto& step : s.steps) {
    several = several || (!e.step_after_every_backward && step.micro_batches.size() > 1);
    uneven = uneven || static_cast<int>(step.micro_batches.size()) != e.accumulation_steps;
  }
  if (e.boundary == sim::BoundaryMode::manual) f.flags |= kManualBoundary;
  else if (several && e.accumulation_steps == 1) f.flags |= kBoundaryOnEveryBackward;
  if (several) f.flags |= kSeveralBackwards;
  if (uneven) f.flags |= kUnevenWindow;
  if (s.checkpoint_after_step) f.flags |= kCheckpoint;
  if (!s.training.model.frozen.empty()) f.flags |= kFrozen;
  if (s.training.model.expert_count > 1) {
    bool missing = false;
    for (const auto& step : s.steps)
      for (const auto& mb : step.micro_batches)
        for (const auto& rank : mb.rank_sequences) {
          std::vector<bool> hit(static_cast<std::size_t>(s.training.model.expert_count), false);
          for (const auto& seq : rank)
            for (int x : seq.expert_index) hit[static_cast<std::size_t>(x)] = true;
          missing = missing || std::find(hit.begin(), hit.end(), false) != hit.end();
        }
    if (missing) f.flags |= kMissingGradient;
  }
  if (s.training.max_grad_norm) f.flags |= kClipping;
  if (s.training.optimizer.kind != models::OptimizerKind::sgd) f.flags |= kAdam;
  return f;
}

bool fit_to_target(sim::Scenario& s, const sim::Target& target) {
  if (target.unsupported(s).empty()) return true;
  const sim::Scenario original = s;
  // Features are given up one at a time, cumulatively, in a fixed order, until the target runs the scenario:
  // mixed precision, clipping, momentum and weight decay, Adam, frozen parameters, the checkpoint, then the
  // loop shape. The data, model kind and rank count are never changed (the generator draws them inside the
  // targets' limits, GeneratorOptions).
  const std::vector<std::function<void(sim::Scenario&)>> give_up = {
      [](sim::Scenario& x) {
        x.engine.precision = sim::Precision::full;
        x.engine.loss_scaler.reset();
      },
      [](sim::Scenario& x) { x.training.max_grad_norm.reset(); },
      [](sim::Scenario& x) {
        auto& o = x.training.optimizer;
        o.momentum = o.dampening = o.weight_decay = Rational(0);
        o.nesterov = false;
      },
      [](sim::Scenario& x) { x.training.optimizer.kind = models::OptimizerKind::sgd; },
      [](sim::Scenario& x) { x.training.model.frozen.clear(); },
      [](sim::Scenario& x) { x.checkpoint_after_step.reset(); },
      [](sim::Scenario& x) { x.engine.step_after_every_backward = !x.engine.step_after_every_backward; },
      [](sim::Scenario& x) {
        x.engine.boundary = x.engine.boundary == sim::BoundaryMode::manual ? sim::BoundaryMode::automatic : sim::BoundaryMode::manual;
      },
  };
  constexpr std::size_t kGiveUpAdam = 3;
  const auto fit_from = [&](sim::Scenario base, bool keep_optimizer_kind) {
    if (fit_engine(s, base, target)) return true;
    for (std::size_t i = 0; i < give_up.size(); ++i) {
      if (keep_optimizer_kind && i == kGiveUpAdam) continue;
      give_up[i](base);
      try {
        sim::validate(base);
      } catch (const std::invalid_argument&) {
        continue;  // this loop shape does not fit the windows: try the next feature
      }
      if (fit_engine(s, base, target)) return true;
    }
    return false;
  };
  if (fit_from(original, false)) return true;
  // A target that runs no SGD (LLaMA-Factory's offload config steps every torch optimizer as Adam): SGD becomes
  // AdamW with the generator's Adam hyperparameters, weight decay kept, and the rest is given up as above with
  // AdamW kept. Tried only after everything else, so that a target that runs SGD gets the same scenarios as ever.
  if (original.training.optimizer.kind == models::OptimizerKind::sgd) {
    sim::Scenario adamw = original;
    auto& o = adamw.training.optimizer;
    o.kind = models::OptimizerKind::adamw;
    o.momentum = o.dampening = Rational(0);
    o.nesterov = false;
    o.beta1 = Rational(1LL, 2LL);
    o.beta2 = Rational(3LL, 4LL);
    o.eps = Rational(1LL, 8LL);
    if (fit_from(adamw, true)) return true;
  }
  s = original;
  return false;
}

}  // namespace accumcheck::fuzz
