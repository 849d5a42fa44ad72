// The nine accumulation properties. Each is one invariant, named as a sentence; docs/fuzzing.md lists them.
#include <functional>
#include <memory>
#include <stdexcept>

#include "models/fast_rational.h"
#include "properties/comparison.h"
#include "properties/membership.h"
#include "properties/property.h"
#include "properties/transforms.h"
#include "properties/trial_oracle.h"
#include "sim/deepspeed_zero.h"

namespace accumcheck::properties {

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::pass: return "pass";
    case Outcome::fail: return "fail";
    case Outcome::cannot_run: return "cannot-run";
    case Outcome::target_fault: return "target-fault";
  }
  return "?";
}

namespace {

using models::Rational;

bool exact(const sim::RunOptions& options) {
  return options.scalar == sim::ScalarKind::rational || options.scalar == sim::ScalarKind::fast_rational;
}

// A target that names its behavioural model (an adapter's "model") computes what that model computes, which may
// round where a correct run does not: transformers 4.45 divides each micro-batch's loss by its own token count,
// 1/3 say, where the window's count is a power of two. Its bounds are raised to those of the model's own run
// in FloatBound (Target::run_bounded), so that a relation between two of its runs (property 4's rotation, for
// one) is never failed on its own rounding. Where the model cannot run or bound the scenario, the correct run's
// bounds stay as they are.
void widen_to_the_models_arithmetic(RunBounds& bounds, const sim::Target& target, const sim::Scenario& scenario,
                                    sim::ScalarKind scalar) {
  const std::optional<std::string> name = target.behavioural_model();
  if (!name) return;
  try {
    const std::unique_ptr<sim::Target> model = sim::make_target(*name);
    if (!model->unsupported(scenario).empty()) return;
    if (auto bounded = model->run_bounded(scenario, scalar)) bounds.widen_to(bounded->bounds);
  } catch (const std::invalid_argument&) {      // not a target: property 10 says so
  } catch (const sim::EngineCrash&) {           // the model raises: the target's run decides
  } catch (const sim::NoRoundingBound&) {       // no bound of the model's arithmetic: the correct run's holds
  } catch (const sim::TargetUnsupported&) {
  }
}

// Runs the target; an unsupported configuration becomes cannot_run, an upstream crash becomes a failure, a
// misbehaving target a target fault. With a float scalar the run also carries its rounding bounds (those of a
// correct run of the same scenario, raised to its behavioural model's), and a scenario whose bound cannot be
// derived cannot be checked.
struct Run {
  std::shared_ptr<const sim::RunResult> result;  // shared with the trial's other properties (Target::run_shared)
  std::optional<Verdict> verdict;  // set when the run did not produce a result
  std::optional<RunBounds> bounds;  // float scalars only: an exact run's bounds are all zero, and none are built

  // The bounds for the comparisons' `tolerance` arguments: nullptr (equality) for an exact run.
  const RunBounds* bound() const { return bounds ? &*bounds : nullptr; }
};
Run run(const sim::Target& target, const sim::Scenario& scenario, const sim::RunOptions& options, const char* label) {
  if (const std::string why = target.unsupported(scenario); !why.empty())
    return {nullptr, Verdict::cannot_run(std::string(label) + ": " + why), {}};
  Run r;
  if (compared_within_bounds(options.scalar)) {
    auto b = rounding_bounds(oracle_training_for(target, scenario), scenario, options.scalar);
    if (auto* why = std::get_if<std::string>(&b)) return {nullptr, Verdict::cannot_run(std::string(label) + ": " + *why), {}};
    r.bounds = std::get<RunBounds>(std::move(b));
    widen_to_the_models_arithmetic(*r.bounds, target, scenario, options.scalar);
  }
  try {
    r.result = target.run_shared(scenario, options);
    return r;
  } catch (const sim::EngineCrash& crash) {
    return {nullptr, Verdict::fail(std::string(label) + ": the target crashed: " + crash.what()), {}};
  } catch (const sim::TargetUnsupported& e) {
    return {nullptr, Verdict::cannot_run(std::string(label) + ": " + e.what()), {}};
  } catch (const sim::TargetFault& e) {
    return {nullptr, Verdict::target_fault(std::string(label) + ": " + e.what()), {}};
  }
}

// floor(q + 1/2).
Rational nearest_integer(const Rational& q) {
  mpz_class n;
  mpz_fdiv_q(n.get_mpz_t(), mpz_class(q.numerator() * 2 + q.denominator()).get_mpz_t(), mpz_class(q.denominator() * 2).get_mpz_t());
  return Rational(n);
}

// A property that needs a part of the result the target does not report could not run.
std::optional<Verdict> needs(const Run&, bool reported, const char* what) {
  if (reported) return std::nullopt;
  return Verdict::cannot_run(std::string("the target does not report ") + what);
}

// The failure's text is made into a string only on a failure.
Verdict finish(std::string_view failure, std::vector<Mismatch> mismatches, const RoundingGap& gap) {
  Verdict v = mismatches.empty() ? Verdict::pass() : Verdict::fail(std::string(failure), std::move(mismatches));
  v.rounding = gap;
  return v;
}

class FunctionProperty final : public Property {
 public:
  using Check = std::function<Verdict(const sim::Target&, const sim::Scenario&, const sim::RunOptions&)>;
  // A property that reads the oracle: given the trial's shared one, or nullptr to compute its own.
  using OracleCheck = std::function<Verdict(const sim::Target&, const sim::Scenario&, const sim::RunOptions&, TrialOracle*)>;
  FunctionProperty(std::string_view name, std::string_view description, Check check)
      : name_(name), description_(description),
        check_([check = std::move(check)](const sim::Target& t, const sim::Scenario& s, const sim::RunOptions& o, TrialOracle*) {
          return check(t, s, o);
        }) {}
  FunctionProperty(std::string_view name, std::string_view description, OracleCheck check)
      : name_(name), description_(description), check_(std::move(check)), reads_oracle_(true) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  bool reads_oracle() const override { return reads_oracle_; }
  Verdict check(const sim::Target& target, const sim::Scenario& scenario, const sim::RunOptions& options,
                TrialOracle* oracle) const override {
    if (!exact(options) && !compared_within_bounds(options.scalar))
      return Verdict::cannot_run("needs an exact scalar (rational or fast-rational) or a float one compared within its "
                                 "rounding bound (fp32, fp64), got " + std::string(sim::to_string(options.scalar)));
    try {
      return check_(target, scenario, options, oracle);
    } catch (const models::ExactSizeExceeded& e) {
      // A float scalar's bound is centred on the same exact values, so it cannot check such a run either.
      return Verdict::cannot_run(std::string(e.what()) + "; fewer steps (--max-steps) keep such a run in range");
    }
  }

 private:
  std::string_view name_, description_;
  OracleCheck check_;
  bool reads_oracle_ = false;
};

// The oracle's truth in `scope` for the target on s: the trial's shared oracle when a campaign gives one (it
// computes the trajectory, which holds both properties' scopes), else its own. Where the trajectory passes the
// exact size limit (the last step's update) and applied_gradients may not, that scope is computed alone, so that no
// verdict depends on sharing.
std::shared_ptr<const TrialOracle::Result> oracle_of(TrialOracle* shared, const sim::Target& target, const sim::Scenario& s,
                                                     models::OracleScope scope) {
  const models::TrainingSpec training = oracle_training_for(target, s);
  if (shared) {
    try {
      return shared->get(training, s);
    } catch (const models::ExactSizeExceeded&) {
      if (scope != models::OracleScope::applied_gradients) throw;
    }
  }
  return std::make_shared<const TrialOracle::Result>(run_oracle_fast(training, s, scope));
}

// Property 1.
Verdict accumulated_update_equals_full_batch_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o,
                                                    TrialOracle* trial_oracle) {
  sim::RunOptions gradients_only = o;  // nothing after the last window's applied gradient is read
  gradients_only.applied_gradients_only = true;
  Run r = run(target, s, gradients_only, "scenario");
  if (r.verdict) return *r.verdict;
  if (auto v = needs(r, r.result->reported.applied_gradient, "the applied gradient")) return *v;
  const auto oracle = oracle_of(trial_oracle, target, s, models::OracleScope::applied_gradients);
  std::vector<Mismatch> mismatches;
  RoundingGap gap;
  for (std::size_t i = 0; i < oracle->steps.size(); ++i) {
    if (!r.result->steps[i].applied) {
      mismatches.push_back({Where(i, "applied").str(), Rational(1), Rational(0)});
      continue;
    }
    compare_tensors(Where(i, "gradient"), s.training.model, oracle->steps[i].applied_gradient.tensors,
                    r.result->steps[i].gradient.tensors, mismatches, r.bounds ? &r.bounds->step_gradient[i] : nullptr, &gap);
  }
  return finish("the applied gradient differs from the full-batch gradient", std::move(mismatches), gap);
}

// Property 2.
Verdict split_does_not_change_the_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run a = run(target, s, o, "scenario");
  if (a.verdict) return *a.verdict;
  const sim::Scenario full = resplit(s, 1, 1);
  Run b = run(target, full, o, "one micro-batch on one rank");
  if (b.verdict) return *b.verdict;
  RoundingGap gap;
  auto mismatches = compare_runs(s.training.model, *b.result, *a.result, b.bound(), a.bound(), &gap);
  return finish("the same global batches as one micro-batch on one rank give a different update "
                "(expected: that run; actual: this split)",
                std::move(mismatches), gap);
}

// Property 3.
Verdict offload_and_partitioning_do_not_change_the_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run a = run(target, s, o, "scenario");
  if (a.verdict) return *a.verdict;
  sim::Scenario toggled = s;
  toggled.engine.offload = !s.engine.offload;
  Run b = run(target, toggled, o, "offload toggled");
  if (b.verdict && b.verdict->outcome == Outcome::fail) return *b.verdict;
  if (b.verdict && b.verdict->outcome == Outcome::target_fault) return *b.verdict;
  if (b.result) {
    auto mismatches = compare_runs(s.training.model, s.engine.offload ? *b.result : *a.result,
                                   s.engine.offload ? *a.result : *b.result, b.bound(), a.bound());
    if (!mismatches.empty())
      return Verdict::fail("offload on differs from offload off (expected: off, actual: on)", std::move(mismatches));
  }
  // The lowest ZeRO stage the target runs is the baseline for partitioning.
  for (int stage = 0; stage < s.engine.zero_stage; ++stage) {
    sim::Scenario lower = s;
    lower.engine.zero_stage = stage;
    if (!target.unsupported(lower).empty()) continue;
    Run c = run(target, lower, o, "lower ZeRO stage");
    if (c.verdict) return *c.verdict;
    auto mismatches = compare_runs(s.training.model, *c.result, *a.result, c.bound(), a.bound());
    if (!mismatches.empty())
      return Verdict::fail("ZeRO-" + std::to_string(s.engine.zero_stage) + " differs from ZeRO-" + std::to_string(stage),
                           std::move(mismatches));
    break;
  }
  if (!b.result && s.engine.zero_stage == 0) return Verdict::cannot_run("nothing to compare: " + b.verdict->message);
  return Verdict::pass();
}

// Property 4.
Verdict micro_batch_order_does_not_change_the_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run a = run(target, s, o, "scenario");
  if (a.verdict) return *a.verdict;
  Run b = run(target, rotate_micro_batches(s), o, "micro-batches rotated");
  if (b.verdict) return *b.verdict;
  RoundingGap gap;
  auto mismatches = compare_runs(s.training.model, *a.result, *b.result, a.bound(), b.bound(), &gap);
  return finish("rotating the micro-batches of each window by one changes the update (expected: original order)",
                std::move(mismatches), gap);
}

// Property 5.
Verdict applied_gradient_holds_each_micro_batch_once(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  const MembershipProbe probe = membership_probe(s);
  Run r = run(target, probe.scenario, o, "membership probe");
  if (r.verdict) return *r.verdict;
  if (auto v = needs(r, r.result->reported.applied_gradient, "the applied gradient")) return *v;
  RoundingGap gap;
  if (compared_within_bounds(o.scalar)) {
    // A correct float run of the probe is within its bound of an integer sum of powers of ten; when the bound
    // is below one half, the nearest integer is the one a correct run meant, and its digits decode exactly.
    // A value farther from every integer than its bound stays as it is: a wrong weight.
    auto decoded = std::make_shared<sim::RunResult>(*r.result);  // the shared result stays as the target gave it
    r.result = decoded;
    for (std::size_t i = 0; i < decoded->steps.size(); ++i)
      for (std::size_t p = 0; p < decoded->steps[i].gradient.tensors.size(); ++p) {
        auto& t = decoded->steps[i].gradient.tensors[p];
        for (Eigen::Index j = 0; j < t.size(); ++j) {
          const Rational& bound = r.bounds->step_gradient[i][p](j);
          if (bound >= Rational(1LL, 2LL))
            return Verdict::cannot_run("membership probe: the rounding bound " + bound.to_string() +
                                       " of step " + std::to_string(i) + " is not below one half, so its digits cannot be read");
          const Rational nearest = nearest_integer(t(j));
          const Rational diff = models::abs(t(j) - nearest);
          if (diff <= bound) {
            gap.add("step " + std::to_string(i) + " / gradient", diff, bound);
            t(j) = nearest;
          }
        }
      }
  }
  MembershipReport report = decode_membership(probe, *r.result);
  if (report.wrong.empty() && report.summary.empty()) {
    Verdict v = Verdict::pass();
    v.rounding = gap;
    return v;
  }
  Verdict v = Verdict::fail(report.summary);
  v.membership = std::move(report);
  return v;
}

// Property 6.
Verdict reported_norm_is_the_norm_of_the_applied_gradient(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run r = run(target, s, o, "scenario");
  if (r.verdict) return *r.verdict;
  if (auto v = needs(r, r.result->reported.applied_gradient, "the applied gradient")) return *v;
  if (auto v = needs(r, r.result->reported.grad_norm, "its grad norm")) return *v;
  // Without the clip factor the gradient before clipping cannot be recovered from the applied one.
  if (s.training.max_grad_norm)
    if (auto v = needs(r, r.result->reported.clip_coefficient, "its clip coefficient, and the run clips")) return *v;
  const bool float_run = compared_within_bounds(o.scalar);
  std::vector<Mismatch> mismatches;
  RoundingGap gap;
  for (std::size_t i = 0; i < r.result->steps.size(); ++i) {
    const auto& step = r.result->steps[i];
    if (!step.applied) continue;
    if (step.clip_coefficient.is_zero()) {
      mismatches.push_back({Where(i, "clip_coefficient").str(), Rational(1), step.clip_coefficient});
      continue;
    }
    // The gradient before clipping, from what was applied and the coefficient applied.
    // Summed in FastRational, whose values and root are Rational's (fast_rational_test) without GMP for the
    // small ones; Rational's arithmetic is GMP's on every value, by design.
    const bool clipped = step.clip_coefficient != Rational(1);
    const models::FastRational coefficient(step.clip_coefficient);
    std::vector<models::FastRational> unclipped;
    for (const auto& t : step.gradient.tensors)
      for (Eigen::Index j = 0; j < t.size(); ++j) {
        const models::FastRational applied(t(j));
        unclipped.push_back(clipped ? applied / coefficient : applied);
      }
    const models::FastRational squared = models::sum_of_squares(unclipped);
    const Rational norm = models::ScalarTraits<models::FastRational>::sqrt(squared).to_rational();
    // Float runs: |reported - ||g_applied / c||| <= B_norm + (sum_j B_g_j + N B_c) / c, with N the norm, by the
    // triangle inequality; the clip factor recomputed from the reported norm moves by at most c B_norm / (N - B_norm).
    Rational norm_tolerance(0), coef_tolerance(0);
    if (float_run) {
      Rational gradient_bound(0);
      for (const auto& t : r.bounds->step_gradient[i])
        for (Eigen::Index j = 0; j < t.size(); ++j) gradient_bound += t(j);
      const Rational& bn = r.bounds->step_grad_norm[i];
      const Rational& bc = r.bounds->step_clip_coefficient[i];
      const Rational c = models::abs(step.clip_coefficient);
      norm_tolerance = bn + (gradient_bound + (models::abs(step.grad_norm) + bn) * bc) / c + models::pow2(-60);
      const Rational denominator = models::abs(step.grad_norm) + models::kClipEpsilon - bn;
      // The expected factor is truncated to 2^-64 below, as the exact types truncate theirs: up to 2^-64 more.
      coef_tolerance = denominator.sign() > 0 ? bc + c * bn / denominator + models::pow2(-64) : Rational(1);
    }
    compare_value(Where(i, "grad_norm"), norm, step.grad_norm, mismatches, norm_tolerance, &gap);
    if (!r.result->reported.clip_coefficient) continue;
    Rational expected_coef(1);
    if (s.training.max_grad_norm) {
      // max_norm / (norm + eps), truncated toward zero to 2^-64 as an exact run's is (models/clipping.h).
      const Rational coef =
          models::truncate_to_bits(*s.training.max_grad_norm / (step.grad_norm + models::kClipEpsilon), models::kExactUpdateFractionBits);
      if (coef < Rational(1)) expected_coef = coef;
    }
    compare_value(Where(i, "clip_coefficient"), expected_coef, step.clip_coefficient, mismatches, coef_tolerance, &gap);
  }
  return finish("the reported grad norm or clipping factor is not that of the applied gradient", std::move(mismatches), gap);
}

// Property 7.
Verdict automatic_boundary_equals_manual_boundary(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  const auto automatic = with_automatic_boundary(s);
  if (!automatic) return Verdict::cannot_run("windows of different sizes have no automatic boundary");
  const auto manual = with_manual_boundary(*automatic);
  // Where the scenario already sets its boundary automatically, it is that run: run the trial's own scenario
  // object, whose run a campaign shares among the properties (fuzz/trial_runs.h).
  const sim::Scenario& automatic_run = automatic->engine == s.engine ? s : *automatic;
  Run a = run(target, automatic_run, o, "automatic boundary");
  if (a.verdict) return *a.verdict;
  Run b = run(target, *manual, o, "manual boundary");
  if (b.verdict) return *b.verdict;
  RoundingGap gap;
  auto mismatches = compare_runs(s.training.model, *a.result, *b.result, a.bound(), b.bound(), &gap);
  return finish("setting the boundary by hand on the last of G backwards differs from the automatic boundary "
                "(expected: automatic)",
                std::move(mismatches), gap);
}

// Property 8.
Verdict checkpoint_then_resume_equals_running_straight_through(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  if (s.steps.size() < 2) return Verdict::cannot_run("needs two steps to resume between");
  sim::Scenario resumed = s;
  // Without a checkpoint the scenario is the straight run: run its own object, which a campaign's properties share.
  std::optional<sim::Scenario> straight;
  if (s.checkpoint_after_step) {
    straight = s;
    straight->checkpoint_after_step.reset();
  }
  resumed.checkpoint_after_step = s.checkpoint_after_step && *s.checkpoint_after_step + 1 < static_cast<int>(s.steps.size())
                                      ? *s.checkpoint_after_step
                                      : 0;
  Run a = run(target, straight ? *straight : s, o, "straight through");
  if (a.verdict) return *a.verdict;
  Run b = run(target, resumed, o, "checkpoint and resume");
  if (b.verdict) return *b.verdict;
  RoundingGap gap;
  auto mismatches = compare_runs(s.training.model, *a.result, *b.result, a.bound(), b.bound(), &gap);
  if (mismatches.empty()) {
    Verdict v = Verdict::pass();
    v.rounding = gap;
    return v;
  }
  return Verdict::fail("resuming from a checkpoint after step " + std::to_string(*resumed.checkpoint_after_step) +
                           " differs from running straight through (expected: straight)",
                       std::move(mismatches));
}

// Property 9.
Verdict multi_step_trajectory_equals_full_batch_trajectory(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o,
                                                           TrialOracle* trial_oracle) {
  Run r = run(target, s, o, "scenario");
  if (r.verdict) return *r.verdict;
  const auto oracle = oracle_of(trial_oracle, target, s, models::OracleScope::trajectory);
  std::vector<Mismatch> mismatches;
  RoundingGap gap;
  compare_tensors("final / parameters", s.training.model, oracle->parameters.tensors, r.result->parameters.tensors, mismatches,
                  r.bounds ? &r.bounds->parameters : nullptr, &gap);
  // A target that does not report its optimizer's state is held to its parameters alone.
  if (r.result->reported.optimizer_state) {
    compare_tensors("final / first_moment", s.training.model, oracle->state.first_moment, r.result->optimizer_state.first_moment,
                    mismatches, r.bounds ? &r.bounds->first_moment : nullptr, &gap);
    compare_tensors("final / second_moment", s.training.model, oracle->state.second_moment, r.result->optimizer_state.second_moment,
                    mismatches, r.bounds ? &r.bounds->second_moment : nullptr, &gap);
    for (std::size_t p = 0; p < oracle->state.step_count.size(); ++p)
      if (oracle->state.step_count[p] != r.result->optimizer_state.step_count[p])  // names built only here
        compare_value("final / step_count / " + models::parameter_names(s.training.model)[p], Rational(oracle->state.step_count[p]),
                      Rational(r.result->optimizer_state.step_count[p]), mismatches);
  }
  return finish("parameters or optimizer state after the run differ from full-batch training", std::move(mismatches), gap);
}

// Property 10.
Verdict target_agrees_with_its_behavioural_model(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  const std::optional<std::string> model_name = target.behavioural_model();
  if (!model_name)
    return Verdict::cannot_run("the target names no behavioural model to compare with (an adapter's \"model\" in adapter.json, "
                               "or --adapter-model)");
  std::unique_ptr<sim::Target> model;
  try {
    model = sim::make_target(*model_name);
  } catch (const std::invalid_argument& e) {
    return Verdict::cannot_run("the behavioural model '" + *model_name + "' is not a target: " + e.what());
  }
  if (const std::string why = model->unsupported(s); !why.empty())
    return Verdict::cannot_run("the behavioural model " + *model_name + " cannot run it: " + why);
  if (const std::string why = target.unsupported(s); !why.empty()) return Verdict::cannot_run("target: " + why);

  // The model first: it is cheap, and a scenario without a bound need not reach the target.
  std::optional<sim::RunResult> expected;
  RunBounds expected_bounds = RunBounds::zero(s.training.model, s.steps.size());
  std::optional<std::string> model_crash;
  try {
    if (compared_within_bounds(o.scalar)) {
      auto bounded = model->run_bounded(s, o.scalar);
      if (!bounded) return Verdict::cannot_run("the behavioural model " + *model_name + " does not run in FloatBound");
      expected = std::move(bounded->result);
      expected_bounds = std::move(bounded->bounds);
    } else {
      expected = model->run(s, sim::RunOptions{.scalar = sim::ScalarKind::fast_rational});
    }
  } catch (const sim::EngineCrash& crash) {
    model_crash = crash.what();
  } catch (const sim::NoRoundingBound& e) {
    return Verdict::cannot_run("the behavioural model " + *model_name + ": " + e.what());
  } catch (const sim::TargetUnsupported& e) {  // the model does not follow this scenario
    return Verdict::cannot_run("the behavioural model " + *model_name + ": " + e.what());
  }

  std::optional<sim::RunResult> actual;
  try {
    actual = target.run(s, o);
  } catch (const sim::EngineCrash& crash) {
    if (model_crash) return Verdict::pass();  // both raise where upstream raises
    return Verdict::fail("the target raised where its behavioural model " + *model_name + " ran: " + crash.what());
  } catch (const sim::TargetUnsupported& e) {
    return Verdict::cannot_run("target: " + std::string(e.what()));
  } catch (const sim::TargetRaised& e) {
    if (model_crash) return Verdict::pass();  // both raise where upstream raises
    return Verdict::target_fault("the target raised where its behavioural model " + *model_name +
                                 " runs (the model misses a crash, or the adapter is broken): " + e.what());
  } catch (const sim::TargetFault& e) {
    if (model_crash)
      return Verdict::target_fault("the behavioural model " + *model_name + " raises (" + *model_crash +
                                   ") and the target misbehaved instead of raising: " + e.what());
    return Verdict::target_fault(e.what());
  }
  if (model_crash)
    return Verdict::fail("the behavioural model " + *model_name + " raises where the target ran: " + *model_crash);
  RoundingGap gap;
  const RunBounds actual_bounds = RunBounds::zero(s.training.model, s.steps.size());
  auto mismatches = compare_runs(s.training.model, *expected, *actual, &expected_bounds, &actual_bounds, &gap);
  return finish("the target disagrees with its behavioural model " + *model_name +
                    " (expected: the model; actual: the target): the model is wrong here, or the target is not deterministic",
                std::move(mismatches), gap);
}

}  // namespace

const Property& differential_property() {
  static const FunctionProperty property(kDifferentialProperty,
                                         "10. the target's results equal its behavioural model's, within the model's own float bound",
                                         target_agrees_with_its_behavioural_model);
  return property;
}

const std::vector<std::unique_ptr<Property>>& all_properties() {
  static const std::vector<std::unique_ptr<Property>> all = [] {
    std::vector<std::unique_ptr<Property>> v;
    auto add = [&](std::string_view name, std::string_view description, auto check) {
      v.push_back(std::make_unique<FunctionProperty>(name, description, std::move(check)));
    };
    add("accumulated_update_equals_full_batch_update",
        "1. each step's applied gradient equals the oracle's full-batch gradient", accumulated_update_equals_full_batch_update);
    add("split_does_not_change_the_update",
        "2. the same global batch as one micro-batch on one rank gives the same update", split_does_not_change_the_update);
    add("offload_and_partitioning_do_not_change_the_update",
        "3. offload on equals off; ZeRO-k equals the lowest stage the target runs", offload_and_partitioning_do_not_change_the_update);
    add("micro_batch_order_does_not_change_the_update",
        "4. rotating the micro-batches of each window by one gives the same update", micro_batch_order_does_not_change_the_update);
    add("applied_gradient_holds_each_micro_batch_once",
        "5. with gradients 10^id per micro-batch, each is applied once, in its own step, with weight 1",
        applied_gradient_holds_each_micro_batch_once);
    add("reported_norm_is_the_norm_of_the_applied_gradient",
        "6. the reported grad norm and clip factor come from the gradient actually applied",
        reported_norm_is_the_norm_of_the_applied_gradient);
    add("automatic_boundary_equals_manual_boundary",
        "7. the automatic boundary equals the caller setting it on the last of G backwards", automatic_boundary_equals_manual_boundary);
    add("checkpoint_then_resume_equals_running_straight_through",
        "8. saving after a step and resuming in a fresh engine equals running straight through",
        checkpoint_then_resume_equals_running_straight_through);
    add("multi_step_trajectory_equals_full_batch_trajectory",
        "9. parameters and optimizer state after the last step equal full-batch training",
        multi_step_trajectory_equals_full_batch_trajectory);
    return v;
  }();
  return all;
}

const Property* find_property(std::string_view name) {
  for (const auto& p : all_properties())
    if (p->name() == name) return p.get();
  if (name == kDifferentialProperty) return &differential_property();
  return nullptr;
}

}  // namespace accumcheck::properties
