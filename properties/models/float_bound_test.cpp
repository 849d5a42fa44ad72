// Properties of FloatBound<F>: its exact values are run_oracle<FastRational>'s bit for bit; its bounds hold for
// real fp32 and fp64 evaluations in two summation orders; a bound of 0 means the float run is exact; the bounds are
// tight enough that a dropped micro-batch stands far outside them, and ordered by precision (bf16 > fp32 > fp64);
// an undecidable branch throws AmbiguousComparison and an unbounded value reads as std::nullopt.
//
// Method: a small local swarm generator, shaped like fuzz/generator.cpp (which properties/models must not link),
// draws training specs and step batches from one seed each: all three model kinds, every aggregation mode, SGD with
// momentum and weight decay, Adam, AdamW, clipping, 1-3 steps, fractions, thirds and tenths, masked tokens and empty
// sequences. Each scenario runs through run_oracle in FloatBound<F>, in FastRational, and in the float type twice
// (forward, and with every step's sequences reversed: another summation order with the same exact value); every
// output is compared exactly, in Rational. Counts and worst ratios are printed, never asserted beyond the bar.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/clipping.h"
#include "models/fast_rational.h"
#include "models/float_bound.h"
#include "models/oracle.h"

namespace accumcheck::models {
namespace {

using Fp32Bound = FloatBound<FloatFormatKind::fp32>;
using Fp64Bound = FloatBound<FloatFormatKind::fp64>;

static_assert(ScalarTraits<Fp32Bound>::name == "fp32-bound");
static_assert(ScalarTraits<FloatBound<FloatFormatKind::bf16>>::name == "bf16-bound");
static_assert(!ScalarTraits<Fp32Bound>::exact && ScalarTraits<Fp32Bound>::checked);

// ---- A local deterministic generator ----------------------------------------------------------------------------

// splitmix64 (Steele, Lea, Flood 2014): one seed, one stream, no global state.
class Stream {
 public:
  explicit Stream(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int in_range(int lo, int hi_inclusive) {
    return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi_inclusive - lo + 1));
  }
  bool coin() { return (next() & 1) != 0; }
  bool one_in(int n) { return in_range(0, n - 1) == 0; }

 private:
  std::uint64_t state_;
};

struct Scenario {
  TrainingSpec training;
  Parameters<Rational> initial;
  std::vector<StepBatch<Rational>> steps;
};

// exact_friendly: only what every float evaluation computes exactly (dyadic values of few bits, sum aggregation,
// plain SGD with a power-of-two rate, one step, tiny batches), for the exactness test.
struct DrawOptions {
  bool exact_friendly = false;
};

struct Swarm {
  ModelKind kind;
  LossAggregation aggregation;
  bool fractions, non_dyadic, empty_sequences, masked_tokens, experts, frozen, clipping, momentum_decay,
      pytorch_constants, varied_lengths;
};

// Small values like the fuzz generator's: 0 and +-1 often, small integers, halves and quarters; with non_dyadic,
// also thirds and tenths, which no binary format holds exactly.
Rational draw_value(Stream& d, const Swarm& w) {
  const int kind = d.in_range(0, 9);
  if (kind == 0) return Rational(0);
  if (kind == 1) return Rational(1);
  if (kind == 2) return Rational(-1);
  const int n = d.in_range(-4, 4);
  if (w.fractions && (kind == 6 || kind == 7)) return Rational(static_cast<long long>(n), kind == 6 ? 2LL : 4LL);
  if (w.non_dyadic && kind >= 8) return Rational(static_cast<long long>(n), kind == 8 ? 3LL : 10LL);
  return Rational(n);
}

Sequence<Rational> draw_sequence(Stream& d, const Swarm& w, const ModelSpec& spec, int token_count_max) {
  int T = w.varied_lengths ? d.in_range(1, token_count_max) : std::min(2, token_count_max);
  if (w.empty_sequences && d.one_in(4)) T = 0;
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>(T, feature_size(spec));
  for (Eigen::Index i = 0; i < seq.features.size(); ++i) seq.features(i) = draw_value(d, w);
  seq.targets = Matrix<Rational>(T, target_size(spec));
  for (Eigen::Index i = 0; i < seq.targets.size(); ++i) seq.targets(i) = draw_value(d, w);
  for (int t = 0; t < T; ++t) {
    seq.loss_mask.push_back(w.masked_tokens && d.one_in(3) ? 0 : 1);
    if (spec.kind == ModelKind::tied_embedding) seq.token_ids.push_back(d.in_range(0, spec.vocab_size - 1));
    if (spec.kind == ModelKind::linear && spec.expert_count > 1)
      seq.expert_index.push_back(d.in_range(0, spec.expert_count - 1));
  }
  return seq;
}

Scenario draw_scenario(std::uint64_t seed, const DrawOptions& options = {}) {
  Stream d(seed);
  Swarm w{};
  const int k = d.in_range(0, 5);
  w.kind = k <= 2 ? ModelKind::linear : (k <= 4 ? ModelKind::mlp : ModelKind::tied_embedding);
  w.aggregation = kAllLossAggregations[d.in_range(0, 4)];
  w.fractions = d.coin();
  w.non_dyadic = d.one_in(3);
  w.empty_sequences = d.coin();
  w.masked_tokens = d.coin();
  w.experts = d.one_in(4);
  w.frozen = d.one_in(4);
  w.clipping = d.one_in(3);
  w.momentum_decay = d.one_in(3);
  w.pytorch_constants = d.coin();
  w.varied_lengths = d.coin();
  if (options.exact_friendly) {
    w.aggregation = LossAggregation::sum;
    w.fractions = true;
    w.non_dyadic = w.experts = w.clipping = w.momentum_decay = w.pytorch_constants = false;
  }

  Scenario s;
  ModelSpec& spec = s.training.model;
  spec.kind = w.kind;
  switch (w.kind) {
    case ModelKind::linear:
      spec.input_size = d.in_range(1, options.exact_friendly ? 2 : 4);
      spec.output_size = d.in_range(1, 2);
      spec.expert_count = w.experts ? d.in_range(2, 3) : 1;
      break;
    case ModelKind::mlp:
      spec.input_size = d.in_range(1, 3);
      spec.hidden_size = d.in_range(1, 3);
      spec.output_size = d.in_range(1, 2);
      break;
    case ModelKind::tied_embedding:
      spec.vocab_size = d.in_range(2, 4);
      spec.embed_size = d.in_range(1, 2);
      break;
  }
  if (w.frozen) {
    const auto names = parameter_names(spec);
    spec.frozen.push_back(names[static_cast<std::size_t>(d.in_range(0, static_cast<int>(names.size()) - 1))]);
  }
  s.training.aggregation.mode = w.aggregation;
  s.training.aggregation.norm_constant = Rational(d.in_range(1, 8));

  OptimizerSpec& o = s.training.optimizer;
  const int optimizer = options.exact_friendly ? 0 : d.in_range(0, 2);
  o.kind = optimizer == 0 ? OptimizerKind::sgd : (optimizer == 1 ? OptimizerKind::adam : OptimizerKind::adamw);
  if (w.pytorch_constants) {
    // torch.optim's defaults and the usual recipe values: none of them dyadic.
    o.lr = d.coin() ? Rational(1LL, 10LL) : Rational(1LL, 1000LL);
    o.beta1 = Rational(9LL, 10LL);
    o.beta2 = Rational(999LL, 1000LL);
    o.eps = Rational(1LL, 100000000LL);
    if (w.momentum_decay) {
      o.weight_decay = Rational(1LL, 100LL);
      if (o.kind == OptimizerKind::sgd) {
        o.momentum = Rational(9LL, 10LL);
        o.dampening = d.coin() ? Rational(0) : Rational(1LL, 10LL);
        o.nesterov = o.dampening.is_zero() && d.coin();
      }
    }
  } else {
    // The fuzz generator's constants: all dyadic.
    o.lr = d.coin() ? Rational(1LL, 2LL) : Rational(1LL, 8LL);
    o.beta1 = Rational(1LL, 2LL);
    o.beta2 = Rational(3LL, 4LL);
    o.eps = Rational(1LL, 8LL);
    if (w.momentum_decay) {
      o.weight_decay = Rational(1LL, 4LL);
      if (o.kind == OptimizerKind::sgd) o.momentum = Rational(1LL, 2LL);
    }
  }
  o.missing_gradient_is_zero = d.one_in(6);
  if (w.clipping) s.training.max_grad_norm = d.one_in(4) ? Rational(1LL, 2LL) : Rational(d.in_range(1, 4));

  s.initial = zero_parameters<Rational>(spec);
  for (auto& t : s.initial.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = draw_value(d, w);
  const int step_count = options.exact_friendly ? 1 : d.in_range(1, 3);
  const int sequence_count_max = options.exact_friendly ? 2 : 6;
  const int token_count_max = options.exact_friendly ? 2 : 6;
  for (int st = 0; st < step_count; ++st) {
    StepBatch<Rational> batch;
    const int count = w.empty_sequences && d.one_in(5) ? 0 : d.in_range(1, sequence_count_max);
    for (int i = 0; i < count; ++i) batch.push_back(draw_sequence(d, w, spec, token_count_max));
    s.steps.push_back(std::move(batch));
  }
  return s;
}

// ---- Running a scenario in any scalar ---------------------------------------------------------------------------

template <class S>
Matrix<S> matrix_in(const Matrix<Rational>& m) {
  return convert_matrix<S>(m, [](const Rational& q) { return from_rational<S>(q); });
}

template <class S>
Sequence<S> sequence_in(const Sequence<Rational>& seq) {
  return {matrix_in<S>(seq.features), seq.token_ids, seq.expert_index, matrix_in<S>(seq.targets), seq.loss_mask};
}

template <class S>
OracleResult<S> run_in(const Scenario& s, bool reversed = false) {
  Parameters<S> initial;
  for (const auto& t : s.initial.tensors) initial.tensors.push_back(matrix_in<S>(t));
  std::vector<StepBatch<S>> steps;
  for (const auto& batch : s.steps) {
    StepBatch<S> converted;
    for (const auto& seq : batch) converted.push_back(sequence_in<S>(seq));
    if (reversed) std::reverse(converted.begin(), converted.end());
    steps.push_back(std::move(converted));
  }
  return run_oracle(s.training, initial, std::span<const StepBatch<S>>(steps));
}

// Every output of an oracle run, in one fixed order, with a label for messages.
template <class S>
struct Outputs {
  std::vector<const S*> values;
  std::vector<std::string> labels;
  // Per step: where its pre-clipping gradient starts and how many elements it has (for the tightness scale).
  std::vector<std::pair<std::size_t, std::size_t>> gradient_ranges;
};

template <class S>
void add_tensors(Outputs<S>& out, const std::vector<Matrix<S>>& tensors, const std::string& label) {
  for (std::size_t p = 0; p < tensors.size(); ++p)
    for (Eigen::Index i = 0; i < tensors[p].size(); ++i) {
      out.values.push_back(&tensors[p](i));
      out.labels.push_back(label + "[" + std::to_string(p) + "](" + std::to_string(i) + ")");
    }
}

template <class S>
Outputs<S> outputs_of(const OracleResult<S>& r) {
  Outputs<S> out;
  for (std::size_t st = 0; st < r.steps.size(); ++st) {
    const OracleStep<S>& step = r.steps[st];
    const std::string at = "step " + std::to_string(st) + " ";
    out.values.push_back(&step.loss);
    out.labels.push_back(at + "loss");
    const std::size_t start = out.values.size();
    add_tensors(out, step.gradient.tensors, at + "gradient");
    out.gradient_ranges.emplace_back(start, out.values.size() - start);
    out.values.push_back(&step.grad_norm);
    out.labels.push_back(at + "grad_norm");
    out.values.push_back(&step.clip_coefficient);
    out.labels.push_back(at + "clip_coefficient");
    add_tensors(out, step.applied_gradient.tensors, at + "applied_gradient");
  }
  add_tensors(out, r.parameters.tensors, "parameter");
  add_tensors(out, r.state.first_moment, "first_moment");
  add_tensors(out, r.state.second_moment, "second_moment");
  return out;
}

Rational rational_of_float(double x) { return Rational::from_double(x); }

// ---- Soundness --------------------------------------------------------------------------------------------------

struct Tally {
  long scenarios = 0;
  long ambiguous_scenarios = 0;
  long scenarios_with_unbounded = 0;
  long checked_values = 0;    // float values compared with a finite bound (both orders count)
  long zero_bound_values = 0;  // of which the bound was 0 (and the float value had to be exact)
  long unbounded_values = 0;
  double worst_error_ratio = 0;  // max |float - exact| / bound
  std::string worst_where;
};

template <FloatFormatKind F, class Float>
void check_soundness(std::uint64_t seed, const Scenario& s, Tally& tally) {
  ++tally.scenarios;
  std::optional<OracleResult<FloatBound<F>>> bound_run;
  try {
    bound_run = run_in<FloatBound<F>>(s);
  } catch (const AmbiguousComparison&) {
    ++tally.ambiguous_scenarios;
    return;
  }
  const OracleResult<FastRational> exact_run = run_in<FastRational>(s);
  const OracleResult<Float> forward = run_in<Float>(s), backward = run_in<Float>(s, /*reversed=*/true);
  const Outputs<FloatBound<F>> b = outputs_of(*bound_run);
  const Outputs<FastRational> e = outputs_of(exact_run);
  const Outputs<Float> f = outputs_of(forward), r = outputs_of(backward);
  ASSERT_EQ(b.values.size(), e.values.size());
  ASSERT_EQ(b.values.size(), f.values.size());
  ASSERT_EQ(b.values.size(), r.values.size());
  bool any_unbounded = false;
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    const std::string where = "seed " + std::to_string(seed) + " " + std::string(ScalarTraits<FloatBound<F>>::name) +
                              " " + b.labels[i];
    ASSERT_TRUE(exact_value(*b.values[i]) == *e.values[i])
        << where << ": FloatBound's exact value " << exact_value(*b.values[i]).to_string()
        << " differs from run_oracle<FastRational>'s " << e.values[i]->to_string();
    const std::optional<Rational> bound = error_bound(*b.values[i]);
    if (!bound) {
      any_unbounded = true;
      ++tally.unbounded_values;
      continue;
    }
    const Rational exact = e.values[i]->to_rational();
    for (const Float* actual : {f.values[i], r.values[i]}) {
      const double value = static_cast<double>(*actual);
      ASSERT_TRUE(ScalarTraits<Float>::is_finite(*actual))
          << where << ": the float run is not finite (" << value << ") but the bound is " << bound->to_string();
      const Rational error = abs(rational_of_float(value) - exact);
      ++tally.checked_values;
      if (bound->is_zero()) ++tally.zero_bound_values;
      ASSERT_TRUE(error <= *bound) << where << ": |" << value << " - " << exact.to_string()
                                   << "| = " << error.to_double() << " exceeds the bound " << bound->to_double()
                                   << " (exact bound " << bound->to_string() << ")";
      if (!bound->is_zero()) {
        const double ratio = (error / *bound).to_double();
        if (ratio > tally.worst_error_ratio) {
          tally.worst_error_ratio = ratio;
          tally.worst_where = where;
        }
      }
    }
  }
  if (any_unbounded) ++tally.scenarios_with_unbounded;
}

void print_tally(const char* name, const Tally& t) {
  std::printf(
      "[ %s ] scenarios %ld, ambiguous %ld, with unbounded values %ld; float values checked %ld (bound 0: %ld), "
      "unbounded values %ld; worst |float - exact| / bound %.4g at %s\n",
      name, t.scenarios, t.ambiguous_scenarios, t.scenarios_with_unbounded, t.checked_values, t.zero_bound_values,
      t.unbounded_values, t.worst_error_ratio, t.worst_where.c_str());
}

// Enough scenarios to cover every swarm combination many times over (about 6 s per format in release).
constexpr int kSoundnessScenarioCount = 2000;
constexpr std::uint64_t kSoundnessRootSeed = 0xF10A7B0D5EEDULL;

template <FloatFormatKind F, class Float>
Tally soundness_campaign() {
  Tally tally;
  for (int i = 0; i < kSoundnessScenarioCount; ++i) {
    const std::uint64_t seed = kSoundnessRootSeed + static_cast<std::uint64_t>(i);
    check_soundness<F, Float>(seed, draw_scenario(seed), tally);
    if (::testing::Test::HasFatalFailure()) break;
  }
  return tally;
}

TEST(FloatBound, fp32_runs_stay_within_the_bound_in_two_summation_orders) {
  const Tally t = soundness_campaign<FloatFormatKind::fp32, float>();
  print_tally("fp32 soundness", t);
  // The bar: ambiguity and poison are a small minority, so the check covers almost every scenario.
  EXPECT_LT(t.ambiguous_scenarios + t.scenarios_with_unbounded, t.scenarios / 10);
}

TEST(FloatBound, fp64_runs_stay_within_the_bound_in_two_summation_orders) {
  const Tally t = soundness_campaign<FloatFormatKind::fp64, double>();
  print_tally("fp64 soundness", t);
  EXPECT_LT(t.ambiguous_scenarios + t.scenarios_with_unbounded, t.scenarios / 10);
}

// ---- Exactness ----------------------------------------------------------------------------------------------------

template <FloatFormatKind F, class Float>
void expect_exact_and_bound_zero(std::uint64_t seed, const Scenario& s) {
  const OracleResult<FloatBound<F>> bound_run = run_in<FloatBound<F>>(s);
  const OracleResult<Float> forward = run_in<Float>(s), backward = run_in<Float>(s, true);
  const Outputs<FloatBound<F>> b = outputs_of(bound_run);
  const Outputs<Float> f = outputs_of(forward), r = outputs_of(backward);
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    // The norm is an irrational root in general, and the clip coefficient divides by it: not claimed exact.
    if (b.labels[i].find("grad_norm") != std::string::npos || b.labels[i].find("clip") != std::string::npos) continue;
    const std::string where = "seed " + std::to_string(seed) + " " + std::string(ScalarTraits<FloatBound<F>>::name) +
                              " " + b.labels[i];
    const std::optional<Rational> bound = error_bound(*b.values[i]);
    ASSERT_TRUE(bound && bound->is_zero()) << where << ": bound " << (bound ? bound->to_string() : "unbounded")
                                           << " for exact value " << exact_value(*b.values[i]).to_string();
    const Rational exact = exact_value(*b.values[i]).to_rational();
    ASSERT_EQ(rational_of_float(static_cast<double>(*f.values[i])), exact) << where << " (forward order)";
    ASSERT_EQ(rational_of_float(static_cast<double>(*r.values[i])), exact) << where << " (reversed order)";
  }
}

TEST(FloatBound, small_dyadic_computations_are_bounded_by_zero_and_floats_compute_them_exactly) {
  constexpr int kScenarioCount = 300;
  for (int i = 0; i < kScenarioCount; ++i) {
    const std::uint64_t seed = 0xE8AC7ULL + static_cast<std::uint64_t>(i);
    const Scenario s = draw_scenario(seed, DrawOptions{.exact_friendly = true});
    expect_exact_and_bound_zero<FloatFormatKind::fp32, float>(seed, s);
    expect_exact_and_bound_zero<FloatFormatKind::fp64, double>(seed, s);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(FloatBound, representable_inputs_are_exact_and_others_are_charged_as_inputs) {
  EXPECT_EQ(error_bound(Fp32Bound::from_rational(Rational(3LL, 4LL))), Rational(0));
  EXPECT_EQ(error_bound(Fp32Bound::from_rational(Rational((1LL << 24) - 1))), Rational(0));  // 24 bits fit
  EXPECT_NE(error_bound(Fp32Bound::from_rational(Rational((1LL << 24) + 1))), Rational(0));  // 25 bits do not
  EXPECT_EQ(error_bound(Fp64Bound::from_rational(Rational((1LL << 24) + 1))), Rational(0));
  EXPECT_EQ(error_bound(Fp32Bound(1 << 30)), Rational(0));
  const std::optional<Rational> third = error_bound(Fp32Bound::from_rational(Rational(1LL, 3LL)));
  ASSERT_TRUE(third);
  // k_r u |q| + eta, slightly widened: between 2^-24 * 1/3 and 2^-23 * 1/3 * (1 + 2^-30).
  EXPECT_GT(*third, pow2(-24) * Rational(1LL, 3LL));
  EXPECT_LT(*third, pow2(-23) * Rational(1LL, 3LL) * (Rational(1) + pow2(-30)));
  EXPECT_EQ(exact_value(Fp32Bound::from_rational(Rational(1LL, 3LL))), FastRational(1, 3));
  // A product of exact values whose significand would not fit is charged; one that fits is not.
  const Fp32Bound wide = Fp32Bound((1 << 12) + 1) * Fp32Bound((1 << 12) + 1);
  EXPECT_NE(error_bound(wide), Rational(0));
  EXPECT_EQ(error_bound(Fp32Bound(3) * Fp32Bound::from_rational(Rational(5LL, 4LL))), Rational(0));
}

TEST(FloatBound, adams_update_is_the_exact_oracles_truncation_with_its_distance_in_the_bound) {
  // Off the grid: the exact value is the oracle's (truncated to 2^-64), and the bound covers a float evaluation,
  // which does not truncate: at least the 2^-64 it may have moved, plus the quotient's own rounding.
  const Fp64Bound quotient = Fp64Bound(1) / Fp64Bound(3);
  const Fp64Bound update = ScalarTraits<Fp64Bound>::round_update(quotient);
  EXPECT_EQ(exact_value(update), ScalarTraits<FastRational>::round_update(FastRational(1, 3)));
  EXPECT_NE(exact_value(update), FastRational(1, 3));
  const std::optional<Rational> error = error_bound(update), before = error_bound(quotient);
  ASSERT_TRUE(error && before);
  EXPECT_GE(*error, *before + pow2(-kExactUpdateFractionBits));
  EXPECT_LE(abs(Rational(1LL, 3LL) - exact_value(update).to_rational()), *error - *before);
  // On the grid: nothing moves, and an exact value stays exact (certified).
  const Fp32Bound on_grid = Fp32Bound::from_rational(Rational(3LL, 4LL));
  EXPECT_EQ(exact_value(ScalarTraits<Fp32Bound>::round_update(on_grid)), FastRational(3, 4));
  EXPECT_EQ(error_bound(ScalarTraits<Fp32Bound>::round_update(on_grid)), Rational(0));
}

TEST(FloatBound, the_clip_coefficient_is_the_exact_truncated_one_and_its_bound_covers_a_float_division) {
  // models::clip_coefficient truncates an exact coefficient to 2^-64 (as Adam's update); a float run divides once.
  const Fp64Bound coef = clip_coefficient(Fp64Bound(5), Rational(1));
  EXPECT_EQ(exact_value(coef), clip_coefficient(FastRational(5), Rational(1)));
  EXPECT_NE(exact_value(coef), FastRational(1000000, 5000001));
  const std::optional<Rational> error = error_bound(coef);
  ASSERT_TRUE(error);
  EXPECT_GE(*error, pow2(-kExactUpdateFractionBits));
  EXPECT_LE(abs(Rational::from_double(1.0 / (5.0 + 1e-6)) - exact_value(coef).to_rational()), *error);
}

TEST(FloatBound, distributing_a_factor_over_an_exact_sum_is_not_assumed_exact) {
  // a + b = 1/8 is exact in fp32 and 65 (a + b) = 65/8 is representable, but a target that distributes the factor
  // computes 65 a + 65 b, and 65 a rounds: the plain rule "the exact product is representable" would call a float
  // result wrong that is right. The dyadic certificate (float_bound.h) does not certify the product.
  const Rational a = Rational(1LL, 2LL) + pow2(-19), b = Rational(-3LL, 8LL) - pow2(-19);
  const Fp32Bound sum = Fp32Bound::from_rational(a) + Fp32Bound::from_rational(b);
  EXPECT_EQ(error_bound(sum), Rational(0));
  const Fp32Bound product = Fp32Bound(65) * sum;
  const std::optional<Rational> bound = error_bound(product);
  ASSERT_TRUE(bound);
  EXPECT_GT(*bound, Rational(0));
  volatile float fa = static_cast<float>(a.to_double()), fb = static_cast<float>(b.to_double()), c = 65.0f;
  volatile float ca = c * fa, cb = c * fb;  // volatile: one rounding per operation, as written
  const float distributed = ca + cb;
  const Rational error = abs(rational_of_float(distributed) - Rational(65LL, 8LL));
  EXPECT_GT(error, Rational(0)) << "the distributed form rounds";
  EXPECT_LE(error, *bound);
}

// ---- Tightness ----------------------------------------------------------------------------------------------------

TrainingSpec catalogue_spec(LossAggregation mode) {
  TrainingSpec spec;
  spec.model = ModelSpec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
  spec.model.frozen = {"bias"};
  spec.aggregation.mode = mode;
  spec.optimizer = OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 10LL)};
  return spec;
}

Sequence<Rational> one_token(const Rational& target) {
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>::Constant(1, 1, Rational(1));
  seq.targets = Matrix<Rational>::Constant(1, 1, target);
  seq.loss_mask = {1};
  return seq;
}

// Catalogue section 1: w = 0, loss_k = c_k w with c = (1, 10, 100) in three micro-batches of one token each.
TEST(FloatBound, catalogue_example_bound_is_far_below_a_dropped_micro_batch) {
  const StepBatch<Rational> batch = {one_token(Rational(-1)), one_token(Rational(-10)), one_token(Rational(-100))};
  for (LossAggregation mode :
       {LossAggregation::token_mean, LossAggregation::sum, LossAggregation::seq_mean_token_sum}) {
    const TrainingSpec spec = catalogue_spec(mode);
    StepBatch<Fp32Bound> converted;
    for (const auto& seq : batch) converted.push_back(to_float_bound<FloatFormatKind::fp32>(seq));
    const std::vector<StepBatch<Fp32Bound>> steps = {converted};
    const auto result = run_oracle(spec, to_float_bound<FloatFormatKind::fp32>(zero_parameters<Rational>(spec.model)),
                                   std::span<const StepBatch<Fp32Bound>>(steps));
    const Fp32Bound& g = result.steps[0].gradient.tensors[0](0, 0);
    const std::optional<Rational> bound = error_bound(g);
    ASSERT_TRUE(bound);
    const Rational exact = exact_value(g).to_rational();
    // Band B keeps micro-batches 0 and 2 only, under the same normalisation: 101/3 instead of 37, 101 for 111.
    const Rational band_b = mode == LossAggregation::sum ? Rational(101) : Rational(101LL, 3LL);
    const double ratio = (*bound / abs(exact)).to_double();
    if (bound->is_zero()) {
      std::printf("[ catalogue ] %s: gradient %s, fp32 bound 0 (every evaluation is exact); band B's %s differs\n",
                  std::string(to_string(mode)).c_str(), exact.to_string().c_str(), band_b.to_string().c_str());
    } else {
      std::printf("[ catalogue ] %s: gradient %s, fp32 bound %.3g (bound / |gradient| = %.3g); band B's %s is %.3g "
                  "bounds away\n",
                  std::string(to_string(mode)).c_str(), exact.to_string().c_str(), bound->to_double(), ratio,
                  band_b.to_string().c_str(), (abs(band_b - exact) / *bound).to_double());
    }
    EXPECT_LT(ratio, 1e-4);
    EXPECT_GT(abs(band_b - exact), *bound * Rational(1000));
  }
}

TEST(FloatBound, random_scenarios_have_fp32_gradient_bounds_far_below_the_gradient_scale) {
  // The scale of a step's gradient is its largest |element|: a dropped or doubled micro-batch moves elements by
  // about scale / G. Measured on the first step, whose gradient depends on inputs only; later steps also carry the
  // optimizer's amplification (Adam divides by sqrt(v) + eps), which is reported but not held to the same ratio.
  constexpr int kScenarioCount = 1500;
  double worst_first_step = 0, worst_later_steps = 0;
  std::string worst_where;
  long gradients_measured = 0;
  for (int i = 0; i < kScenarioCount; ++i) {
    const std::uint64_t seed = kSoundnessRootSeed + static_cast<std::uint64_t>(i);
    const Scenario s = draw_scenario(seed);
    std::optional<OracleResult<Fp32Bound>> result;
    try {
      result = run_in<Fp32Bound>(s);
    } catch (const AmbiguousComparison&) {
      continue;
    }
    const Outputs<Fp32Bound> out = outputs_of(*result);
    for (std::size_t st = 0; st < out.gradient_ranges.size(); ++st) {
      const auto [start, count] = out.gradient_ranges[st];
      Rational scale(0);
      for (std::size_t j = start; j < start + count; ++j)
        scale = std::max(scale, abs(exact_value(*out.values[j]).to_rational()));
      if (scale.is_zero()) continue;
      for (std::size_t j = start; j < start + count; ++j) {
        const std::optional<Rational> bound = error_bound(*out.values[j]);
        if (!bound) continue;
        const double ratio = (*bound / scale).to_double();
        ++gradients_measured;
        if (st == 0 && ratio > worst_first_step) {
          worst_first_step = ratio;
          worst_where = "seed " + std::to_string(seed) + " " + out.labels[j];
        }
        if (st > 0) worst_later_steps = std::max(worst_later_steps, ratio);
      }
    }
  }
  std::printf("[ tightness ] %ld fp32 gradient elements; worst bound / gradient scale: first step %.3g (%s), "
              "later steps %.3g\n",
              gradients_measured, worst_first_step, worst_where.c_str(), worst_later_steps);
  EXPECT_LT(worst_first_step, 1e-4);
}

TEST(FloatBound, bounds_shrink_with_precision_bf16_over_fp32_over_fp64) {
  TrainingSpec spec = catalogue_spec(LossAggregation::token_mean);
  spec.model = ModelSpec{.kind = ModelKind::linear, .input_size = 2, .output_size = 1};
  Scenario s{spec, zero_parameters<Rational>(spec.model), {}};
  s.initial.tensors[0](0, 0) = Rational(1LL, 3LL);
  s.initial.tensors[0](0, 1) = Rational(-2LL, 5LL);
  StepBatch<Rational> batch;
  for (int t = 0; t < 3; ++t) {
    Sequence<Rational> seq;
    seq.features = Matrix<Rational>(1, 2);
    seq.features(0, 0) = Rational(t + 1, 3);
    seq.features(0, 1) = Rational(7LL, 10LL);
    seq.targets = Matrix<Rational>::Constant(1, 1, Rational(-t, 7));
    seq.loss_mask = {1};
    batch.push_back(seq);
  }
  s.steps = {batch, batch};
  const auto bf16 = run_in<FloatBound<FloatFormatKind::bf16>>(s);
  const auto fp32 = run_in<Fp32Bound>(s);
  const auto fp64 = run_in<Fp64Bound>(s);
  const auto b = outputs_of(bf16);
  const auto f = outputs_of(fp32);
  const auto d = outputs_of(fp64);
  int compared = 0;
  for (std::size_t i = 0; i < d.values.size(); ++i) {
    const auto e16 = error_bound(*b.values[i]), e32 = error_bound(*f.values[i]), e64 = error_bound(*d.values[i]);
    ASSERT_TRUE(e16 && e32 && e64) << d.labels[i];
    if (e64->is_zero()) continue;
    EXPECT_GT(*e16, *e32) << d.labels[i];
    EXPECT_GT(*e32, *e64) << d.labels[i];
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

// ---- Ambiguity and poison ---------------------------------------------------------------------------------------

Scenario relu_at_its_kink(const Rational& input, const Rational& weight) {
  // z = weight * input - 1 = 0 exactly.
  TrainingSpec spec;
  spec.model = ModelSpec{.kind = ModelKind::mlp, .input_size = 1, .output_size = 1, .hidden_size = 1};
  spec.aggregation.mode = LossAggregation::sum;
  spec.optimizer = OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1LL, 2LL)};
  Scenario s{spec, zero_parameters<Rational>(spec.model), {}};
  s.initial.tensors[0](0, 0) = weight;       // fc1.weight
  s.initial.tensors[1](0, 0) = Rational(-1);  // fc1.bias
  s.initial.tensors[2](0, 0) = Rational(1);  // fc2.weight
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>::Constant(1, 1, input);
  seq.targets = Matrix<Rational>::Constant(1, 1, Rational(1));
  seq.loss_mask = {1};
  s.steps = {{seq}};
  return s;
}

TEST(FloatBound, relu_at_its_kink_with_a_rounded_input_is_ambiguous) {
  const Scenario inexact = relu_at_its_kink(Rational(1LL, 3LL), Rational(3));
  EXPECT_THROW(run_in<Fp32Bound>(inexact), AmbiguousComparison);
  EXPECT_THROW(run_in<Fp64Bound>(inexact), AmbiguousComparison);
  try {
    run_in<Fp32Bound>(inexact);
  } catch (const AmbiguousComparison& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fp32-bound"), std::string::npos) << what;
    EXPECT_NE(what.find("exact values 0 and 0"), std::string::npos) << what;
  }
  // The same kink computed from exact inputs: every float evaluation gives exactly 0, so the branch is decided.
  const Scenario exact = relu_at_its_kink(Rational(1LL, 2LL), Rational(2));
  EXPECT_NO_THROW(run_in<Fp32Bound>(exact));
  const auto result = run_in<Fp32Bound>(exact);
  EXPECT_EQ(error_bound(result.steps[0].gradient.tensors[0](0, 0)), Rational(0));
}

TEST(FloatBound, division_by_an_interval_containing_zero_is_unbounded) {
  // y = (big + tiny) - big: exactly tiny, but its bound (from rounding big + tiny) is far larger than tiny.
  const Fp32Bound big = Fp32Bound::from_rational(pow2(30) / Rational(3)), tiny = Fp32Bound::from_rational(pow2(-30));
  const Fp32Bound y = (big + tiny) - big;
  EXPECT_EQ(exact_value(y), FastRational(pow2(-30)));
  ASSERT_TRUE(error_bound(y));
  EXPECT_GT(*error_bound(y), pow2(-30));
  const Fp32Bound q = Fp32Bound(1) / y;
  EXPECT_EQ(error_bound(q), std::nullopt);
  EXPECT_FALSE(ScalarTraits<Fp32Bound>::is_finite(q));
  EXPECT_EQ(exact_value(q), FastRational(pow2(30)));  // the exact value survives the poison
  EXPECT_EQ(error_bound(q * Fp32Bound(2) + Fp32Bound(1)), std::nullopt);  // poison propagates
  EXPECT_THROW((void)(q < Fp32Bound(0)), AmbiguousComparison);
  EXPECT_THROW((void)(Fp32Bound(1) / Fp32Bound(0)), std::domain_error);  // the exact formula is undefined
}

TEST(FloatBound, values_past_max_finite_are_unbounded) {
  using Fp16Bound = FloatBound<FloatFormatKind::fp16>;
  EXPECT_EQ(error_bound(Fp16Bound::from_rational(Rational(70000))), std::nullopt);  // fp16 max is 65504
  EXPECT_EQ(error_bound(Fp16Bound(256) * Fp16Bound(256)), std::nullopt);
  // 65280 is representable, but fp16 certifies no product whose sub-products pass 2^12, 3 bits below its top
  // binade (certificate_range_margin_bits): bounded, not exact. Far from the top, small products are exact.
  const std::optional<Rational> near_top = error_bound(Fp16Bound(255) * Fp16Bound(256));
  ASSERT_TRUE(near_top);
  EXPECT_GT(*near_top, Rational(0));
  EXPECT_EQ(error_bound(Fp16Bound(5) * Fp16Bound(7)), Rational(0));
  EXPECT_EQ(error_bound(Fp16Bound(60000) + Fp16Bound(10000)), std::nullopt);
}

// ---- Cost -------------------------------------------------------------------------------------------------------

TEST(FloatBound, cost_against_fast_rational_is_reported) {
  constexpr int kScenarioCount = 400;
  std::vector<Scenario> scenarios;
  for (int i = 0; i < kScenarioCount; ++i)
    scenarios.push_back(draw_scenario(0xC057ULL + static_cast<std::uint64_t>(i)));
  using Clock = std::chrono::steady_clock;
  auto time_of = [&](auto&& run_one) {
    const auto start = Clock::now();
    for (const Scenario& s : scenarios) run_one(s);
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kScenarioCount;
  };
  const double exact_us = time_of([](const Scenario& s) { (void)run_in<FastRational>(s); });
  const double bound_us = time_of([](const Scenario& s) {
    try {
      (void)run_in<Fp32Bound>(s);
    } catch (const AmbiguousComparison&) {
    }
  });
  std::printf("[ cost ] run_oracle per scenario (with input conversion): FastRational %.1f us, FloatBound<fp32> "
              "%.1f us (%.2fx)\n",
              exact_us, bound_us, bound_us / exact_us);
  SUCCEED();
}

}  // namespace
}  // namespace accumcheck::models
