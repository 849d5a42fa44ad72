#include "cuda/batched_trials.h"

#include <gmpxx.h>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <span>

#include "cuda/batched_entry.h"
#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "models/loss_aggregation.h"
#include "properties/property.h"
#include "sim/target.h"

namespace accumcheck::cuda {

namespace {

using models::Rational;

constexpr double kBoundMax = 0x1p120;  // every intermediate of a trial's sums stays below this (Int128 holds 2^127)

BatchedView view_of(const BatchedTrials& t) {
  return BatchedView{t.model.data(),          t.input_size.data(),    t.output_size.data(),  t.expert_count.data(),
                     t.hidden_size.data(),    t.denominator.data(),   t.frozen_tensors.data(), t.weight_begin.data(),
                     t.bias_begin.data(),     t.token_begin.data(),   t.entry_begin.data(),  t.feature_begin.data(),
                     t.target_begin.data(),   t.weight_difference.data(), t.route.data(),    t.weights.data(),
                     t.biases.data(),         t.features.data(),      t.targets.data(),      t.entry_trial.data(),
                     t.entry_count()};
}

double magnitude(std::int64_t v) { return std::fabs(static_cast<double>(v)); }

}  // namespace

namespace {

// What every trial appends, whatever its model: its header (sizes, D, frozen tensors, where its parameters begin),
// its values, and per token where its features and targets begin, its route and its d_t.
struct TrialLayout {
  BatchedModel model;
  int input_size, output_size, expert_count, hidden_size;
  std::int64_t denominator;
  const std::vector<std::int64_t>* weights;  // in BatchedTrials::weights' order for the model
  const std::vector<std::int64_t>* biases;   // the linear model's; empty otherwise
  const std::vector<std::int64_t>* features;
  const std::vector<std::int64_t>* targets;
  int feature_stride, target_stride;  // per token
  std::vector<std::int32_t> route;    // per token
  std::size_t entries;
};

void append_trial(BatchedTrials& trials, const TrialLayout& l, const models::ModelSpec& spec,
                  const std::vector<std::int64_t>& token_d, bool clipped) {
  const std::int64_t feature_base = static_cast<std::int64_t>(trials.features.size());
  const std::int64_t target_base = static_cast<std::int64_t>(trials.targets.size());
  const int s_index = trials.trial_count();
  trials.model.push_back(l.model);
  trials.input_size.push_back(l.input_size);
  trials.output_size.push_back(l.output_size);
  trials.expert_count.push_back(l.expert_count);
  trials.hidden_size.push_back(l.hidden_size);
  trials.denominator.push_back(l.denominator);
  std::uint64_t frozen = 0;
  const std::vector<bool> mask = models::frozen_mask(spec);
  for (std::size_t p = 0; p < mask.size(); ++p)
    if (mask[p]) frozen |= std::uint64_t{1} << p;
  trials.frozen_tensors.push_back(frozen);
  trials.weight_begin.push_back(static_cast<std::int64_t>(trials.weights.size()));
  trials.bias_begin.push_back(static_cast<std::int64_t>(trials.biases.size()));
  const auto concat = [](std::vector<std::int64_t>& into, const std::vector<std::int64_t>& from) {
    into.insert(into.end(), from.begin(), from.end());
  };
  concat(trials.weights, *l.weights);
  concat(trials.biases, *l.biases);
  concat(trials.features, *l.features);
  concat(trials.targets, *l.targets);
  for (std::size_t t = 0; t < token_d.size(); ++t) {
    trials.feature_begin.push_back(feature_base + static_cast<std::int64_t>(t) * l.feature_stride);
    trials.target_begin.push_back(target_base + static_cast<std::int64_t>(t) * l.target_stride);
    trials.weight_difference.push_back(token_d[t]);
    trials.route.push_back(l.route[t]);
  }
  trials.token_begin.push_back(static_cast<std::int64_t>(trials.route.size()));
  trials.entry_trial.insert(trials.entry_trial.end(), l.entries, s_index);
  trials.entry_begin.push_back(static_cast<std::int64_t>(trials.entry_trial.size()));
  trials.clipped.push_back(clipped ? 1 : 0);
}

// The linear model's bound on every intermediate: the sum over the tokens of |d| R_t X_t, R_t bounding |r_t| and its
// partial sums, X_t = max(|x_t|, D).
double linear_bound(const ExactLinearBatch& b, const std::vector<std::int64_t>& token_d) {
  const int in = b.input_size, out = b.output_size;
  const double D = static_cast<double>(b.denominator);
  double weight_max = 0, bias_max = 0;
  for (auto w : b.weights) weight_max = std::max(weight_max, magnitude(w));
  for (auto v : b.biases) bias_max = std::max(bias_max, magnitude(v));
  double bound = 0;
  for (std::size_t t = 0; t < token_d.size(); ++t) {
    if (token_d[t] == 0) continue;
    double x_sum = 0, x_max = D, y_max = 0;
    for (int k = 0; k < in; ++k) {
      const double x = magnitude(b.features[t * static_cast<std::size_t>(in) + static_cast<std::size_t>(k)]);
      x_sum += x;
      x_max = std::max(x_max, x);
    }
    for (int o = 0; o < out; ++o)
      y_max = std::max(y_max, magnitude(b.targets[t * static_cast<std::size_t>(out) + static_cast<std::size_t>(o)]));
    bound += magnitude(token_d[t]) * (bias_max * D + weight_max * x_sum + y_max * D) * x_max;
  }
  return bound;
}

}  // namespace

std::string add_batched_trial(BatchedTrials& trials, const sim::Scenario& s, const sim::LossNormaliser& normaliser) {
  const models::ModelSpec& spec = s.training.model;
  if (s.steps.size() != 1) return "not one optimizer step";
  if (s.engine.precision != sim::Precision::full || s.engine.loss_scaler) return "16-bit storage or loss scaling";
  if (spec.kind == models::ModelKind::linear && 2 * spec.expert_count > kBatchedTensorsMax) return "more than 32 experts";
  if (const std::string why = normaliser.unsupported(s.training.aggregation); !why.empty()) return why;

  // The target's weight of each sequence (the framework's coefficient times the engine's 1/G and 1/R) against the
  // oracle's, in the oracle's order: micro-batch, rank, sequence.
  const sim::StepPlan& window = s.steps.front();
  const sim::WindowCoefficients c = normaliser.coefficients(window, s.engine, s.training.aggregation);
  std::vector<models::Sequence<Rational>> sequences;
  std::vector<Rational> target_weight;
  const Rational engine_scale(1LL, static_cast<long long>(s.engine.accumulation_steps) * s.engine.rank_count);
  for (std::size_t k = 0; k < window.micro_batches.size(); ++k)
    for (std::size_t r = 0; r < window.micro_batches[k].rank_sequences.size(); ++r)
      for (std::size_t i = 0; i < window.micro_batches[k].rank_sequences[r].size(); ++i) {
        sequences.push_back(window.micro_batches[k].rank_sequences[r][i]);
        target_weight.push_back(c.at(k).at(r).at(i) * engine_scale);
      }
  const std::span<const models::Sequence<Rational>> all(sequences);
  const std::vector<Rational> oracle_weight =
      models::sequence_coefficients(s.training.aggregation, all, models::count_scope(all));
  // d over the least common denominator of the differences (equality to zero does not depend on the scale).
  std::vector<Rational> difference(sequences.size());
  mpz_class common = 1;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    difference[i] = target_weight[i] - oracle_weight[i];
    const mpz_class den = difference[i].denominator();
    mpz_lcm(common.get_mpz_t(), common.get_mpz_t(), den.get_mpz_t());
  }
  // Per token: its sequence's d, 0 when unsupervised.
  std::vector<std::int64_t> token_d;
  double d_max = 0;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const mpz_class scaled = difference[i].numerator() * (common / difference[i].denominator());
    if (!scaled.fits_slong_p() || abs(scaled) >= (mpz_class(1) << 31)) return "a weight difference above 2^31";
    for (int t = 0; t < sequences[i].token_count(); ++t) {
      const bool supervised = sequences[i].loss_mask[static_cast<std::size_t>(t)] != 0;
      token_d.push_back(supervised ? scaled.get_si() : 0);
      if (supervised) d_max = std::max(d_max, magnitude(scaled.get_si()));
    }
  }

  // One group: the layouts' per-group sums are not what the check computes, only their values and bounds are used.
  const std::vector<int> group(sequences.size(), 0);
  const std::vector<std::int64_t> none;
  try {
    if (spec.kind == models::ModelKind::mlp) {
      const ExactMlpBatch b = lay_out_mlp(spec, s.initial_parameters, all, group, 1);
      if (!(d_max * b.sums_bound < kBoundMax)) return "its sums could reach 2^120";
      std::vector<std::int64_t> params = b.w1;
      for (const auto* tensor : {&b.b1, &b.w2, &b.b2}) params.insert(params.end(), tensor->begin(), tensor->end());
      append_trial(trials,
                   TrialLayout{batched_mlp, b.input_size, b.output_size, 1, b.hidden_size, b.denominator, &params,
                               &none, &b.features, &b.targets, b.input_size, b.output_size,
                               std::vector<std::int32_t>(token_d.size(), 0), b.sum_count()},
                   spec, token_d, s.training.max_grad_norm.has_value());
    } else if (spec.kind == models::ModelKind::tied_embedding) {
      const ExactTiedBatch b = lay_out_tied(spec, s.initial_parameters, all, group, 1);
      if (!(d_max * b.sums_bound < kBoundMax)) return "its sums could reach 2^120";
      std::vector<std::int64_t> params = b.embedding;
      params.insert(params.end(), b.bias.begin(), b.bias.end());
      append_trial(trials,
                   TrialLayout{batched_tied, b.embed_size, b.vocab_size, 1, 0, b.denominator, &params, &none, &none,
                               &b.targets, 0, b.vocab_size, b.token_id, b.sum_count()},
                   spec, token_d, s.training.max_grad_norm.has_value());
    } else {
      const ExactLinearBatch b = lay_out(spec, s.initial_parameters, all, group, 1);
      if (!(linear_bound(b, token_d) < kBoundMax)) return "its sums could reach 2^120";
      append_trial(trials,
                   TrialLayout{batched_linear, b.input_size, b.output_size, b.expert_count, 0, b.denominator,
                               &b.weights, &b.biases, &b.features, &b.targets, b.input_size, b.output_size, b.expert,
                               b.sum_count()},
                   spec, token_d, s.training.max_grad_norm.has_value());
    }
  } catch (const ExactRangeError& e) {
    return to_string(e.limit());
  }
  return {};
}

void append_batched_trials(BatchedTrials& t, const BatchedTrials& piece) {
  const auto rebase = [](std::vector<std::int64_t>& into, const std::vector<std::int64_t>& from, std::size_t skip,
                         std::int64_t by) {
    for (std::size_t i = skip; i < from.size(); ++i) into.push_back(from[i] + by);
  };
  const auto concat = [](auto& into, const auto& from) { into.insert(into.end(), from.begin(), from.end()); };
  const int trials_before = t.trial_count();
  concat(t.model, piece.model);
  concat(t.input_size, piece.input_size);
  concat(t.output_size, piece.output_size);
  concat(t.expert_count, piece.expert_count);
  concat(t.hidden_size, piece.hidden_size);
  concat(t.denominator, piece.denominator);
  concat(t.frozen_tensors, piece.frozen_tensors);
  rebase(t.weight_begin, piece.weight_begin, 0, static_cast<std::int64_t>(t.weights.size()));
  rebase(t.bias_begin, piece.bias_begin, 0, static_cast<std::int64_t>(t.biases.size()));
  rebase(t.token_begin, piece.token_begin, 1, t.token_begin.back());  // both start with 0
  rebase(t.entry_begin, piece.entry_begin, 1, t.entry_begin.back());
  rebase(t.feature_begin, piece.feature_begin, 0, static_cast<std::int64_t>(t.features.size()));
  rebase(t.target_begin, piece.target_begin, 0, static_cast<std::int64_t>(t.targets.size()));
  concat(t.weight_difference, piece.weight_difference);
  concat(t.route, piece.route);
  concat(t.weights, piece.weights);
  concat(t.biases, piece.biases);
  concat(t.features, piece.features);
  concat(t.targets, piece.targets);
  for (std::int32_t s : piece.entry_trial) t.entry_trial.push_back(s + trials_before);
  concat(t.clipped, piece.clipped);
}

std::vector<std::uint8_t> host_batched_failures(const BatchedTrials& trials) {
  std::vector<std::uint8_t> failed(static_cast<std::size_t>(trials.trial_count()), 0);
  const BatchedView v = view_of(trials);
  for (std::size_t i = 0; i < v.entry_count; ++i) {
    const auto s = static_cast<std::size_t>(v.entry_trial[i]);
    if (!failed[s] && batched_entry_fails(v, i)) failed[s] = 1;
  }
  return failed;
}

std::vector<Int128> host_batched_entries(const BatchedTrials& trials) {
  const BatchedView v = view_of(trials);
  std::vector<Int128> out(v.entry_count);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = batched_entry(v, i);
  return out;
}

fuzz::GeneratorOptions batched_one_step() {
  fuzz::GeneratorOptions options;
  options.step_count_max = 1;
  return options;
}

std::string batched_target_name(const std::string& framework) {
  return framework == "reference" ? "reference" : framework + "+reference";
}

BatchedCampaignReport run_batched_campaign(const BatchedCampaignConfig& config) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto normaliser = sim::find_normaliser(config.framework);
  if (!normaliser) throw std::invalid_argument("unknown framework layer '" + config.framework + "'");
  if (config.trials_per_launch < 1) throw std::invalid_argument("trials_per_launch must be at least 1");
  BatchedCampaignReport report;
  report.target = batched_target_name(config.framework);
  const auto target = sim::make_target(report.target);
  const properties::Property* property = properties::find_property("accumulated_update_equals_full_batch_update");
  fuzz::GeneratorOptions options = config.generator;

  if (config.jobs < 1) throw std::invalid_argument("jobs must be at least 1");
  tbb::task_arena arena(config.jobs);
  std::vector<std::uint64_t> failing;
  std::atomic<std::uint64_t> could_not_run = 0;
  const auto cpu_check = [&](const sim::Scenario& scenario) {
    const properties::Verdict v = fuzz::check_pair(*target, *property, scenario, sim::ScalarKind::fast_rational);
    if (v.outcome == properties::Outcome::cannot_run) could_not_run += 1;
    return v.outcome == properties::Outcome::fail;
  };
  // A piece of a launch's trials, generated and laid out by one task.
  struct Piece {
    BatchedTrials batch;
    std::vector<std::uint64_t> batched_index;
    std::vector<std::pair<std::uint64_t, sim::Scenario>> cpu_path;
  };
  constexpr std::uint64_t kPieceTrials = 1024;
  for (std::uint64_t first = 0; first < config.trials; first += config.trials_per_launch) {
    const std::uint64_t last = std::min(config.trials, first + config.trials_per_launch);
    auto start = Clock::now();
    std::vector<Piece> pieces((last - first + kPieceTrials - 1) / kPieceTrials);
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, pieces.size(), [&](std::size_t p) {
        Piece& piece = pieces[p];
        for (std::uint64_t i = first + p * kPieceTrials; i < std::min(last, first + (p + 1) * kPieceTrials); ++i) {
          sim::Scenario scenario = fuzz::generate_scenario(fuzz::trial_seed(config.seed, i), options);
          // As check_pair does first: the configuration adjusted until the target accepts it (an aggregation mode
          // the framework has, say).
          sim::Scenario fitted = scenario;
          if (fuzz::fit_to_target(fitted, *target) && add_batched_trial(piece.batch, fitted, *normaliser).empty())
            piece.batched_index.push_back(i);
          else
            piece.cpu_path.emplace_back(i, std::move(scenario));
        }
      });
    });
    BatchedTrials batch;
    std::vector<std::uint64_t> batched_index;
    std::vector<std::pair<std::uint64_t, sim::Scenario>> cpu_path;
    for (Piece& piece : pieces) {
      append_batched_trials(batch, piece.batch);
      batched_index.insert(batched_index.end(), piece.batched_index.begin(), piece.batched_index.end());
      for (auto& entry : piece.cpu_path) cpu_path.push_back(std::move(entry));
    }
    report.build_seconds += since(start);
    start = Clock::now();
    const std::vector<std::uint8_t> failed = batch.trial_count() == 0 ? std::vector<std::uint8_t>()
                                             : config.backend == BatchedBackend::device
                                                 ? device_batched_failures(batch, LaunchConfig{})
                                                 : host_batched_failures(batch);
    report.check_seconds += since(start);
    start = Clock::now();
    // The flagged trials, then the uncovered ones, through property 1 on the CPU path.
    std::vector<std::uint64_t> flagged;
    std::vector<std::uint8_t> flagged_clipped;
    for (std::size_t j = 0; j < failed.size(); ++j)
      if (failed[j]) {
        flagged.push_back(batched_index[j]);
        flagged_clipped.push_back(batch.clipped[j]);
      }
    std::vector<std::uint8_t> flagged_fails(flagged.size()), cpu_fails(cpu_path.size());
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, flagged.size(), [&](std::size_t j) {
        flagged_fails[j] = cpu_check(fuzz::generate_scenario(fuzz::trial_seed(config.seed, flagged[j]), options));
      });
      tbb::parallel_for(std::size_t{0}, cpu_path.size(), [&](std::size_t j) { cpu_fails[j] = cpu_check(cpu_path[j].second); });
    });
    for (std::size_t j = 0; j < flagged.size(); ++j) {
      if (flagged_fails[j]) failing.push_back(flagged[j]);
      else if (flagged_clipped[j]) report.equal_after_clipping += 1;
      else report.disagreements.push_back("trial " + std::to_string(flagged[j]) +
                                          ": the batched check failed it, the CPU path passed it");
    }
    for (std::size_t j = 0; j < cpu_path.size(); ++j)
      if (cpu_fails[j]) failing.push_back(cpu_path[j].first);
    report.cpu_path_seconds += since(start);
    report.batched += batched_index.size();
    report.cpu_path += cpu_path.size();
  }
  report.could_not_run = could_not_run;
  report.trials = config.trials;
  std::sort(failing.begin(), failing.end());
  report.failing_trials = failing;
  if (!failing.empty()) {
    const auto start = Clock::now();
    const std::uint64_t i = failing.front();
    const sim::Scenario scenario = fuzz::generate_scenario(fuzz::trial_seed(config.seed, i), options);
    report.finding = fuzz::make_finding(*target, *property, scenario, sim::ScalarKind::fast_rational, config.seed,
                                        static_cast<std::int64_t>(i), fuzz::trial_seed(config.seed, i),
                                        config.shrink_budget);
    report.shrink_seconds = since(start);
  }
  return report;
}

}  // namespace accumcheck::cuda
