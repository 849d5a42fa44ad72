// The nine accumulation properties. Each is one invariant, named as a sentence; docs/fuzzing.md lists them.
#include <functional>
#include <stdexcept>

#include "properties/comparison.h"
#include "properties/membership.h"
#include "properties/property.h"
#include "properties/transforms.h"
#include "sim/deepspeed_zero.h"

namespace accumcheck::properties {

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::pass: return "pass";
    case Outcome::fail: return "fail";
    case Outcome::cannot_run: return "cannot-run";
  }
  return "?";
}

namespace {

using models::Rational;

bool exact(const sim::RunOptions& options) {
  return options.scalar == sim::ScalarKind::rational || options.scalar == sim::ScalarKind::fast_rational;
}

// Runs the target; an unsupported configuration becomes cannot_run, an upstream crash becomes a failure.
struct Run {
  std::optional<sim::RunResult> result;
  std::optional<Verdict> verdict;  // set when the run did not produce a result
};
Run run(const sim::Target& target, const sim::Scenario& scenario, const sim::RunOptions& options, const char* label) {
  if (const std::string why = target.unsupported(scenario); !why.empty())
    return {std::nullopt, Verdict::cannot_run(std::string(label) + ": " + why)};
  try {
    return {target.run(scenario, options), std::nullopt};
  } catch (const sim::EngineCrash& crash) {
    return {std::nullopt, Verdict::fail(std::string(label) + ": the target crashed: " + crash.what())};
  }
}

class FunctionProperty final : public Property {
 public:
  using Check = std::function<Verdict(const sim::Target&, const sim::Scenario&, const sim::RunOptions&)>;
  FunctionProperty(std::string_view name, std::string_view description, Check check)
      : name_(name), description_(description), check_(std::move(check)) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  Verdict check(const sim::Target& target, const sim::Scenario& scenario, const sim::RunOptions& options) const override {
    if (!exact(options))
      return Verdict::cannot_run("needs an exact scalar (rational or fast-rational), got " +
                                 std::string(sim::to_string(options.scalar)));
    return check_(target, scenario, options);
  }

 private:
  std::string_view name_, description_;
  Check check_;
};

// Property 1.
Verdict accumulated_update_equals_full_batch_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run r = run(target, s, o, "scenario");
  if (r.verdict) return *r.verdict;
  const auto oracle = run_oracle_exact(oracle_training_for(target, s), s);
  std::vector<Mismatch> mismatches;
  for (std::size_t i = 0; i < oracle.steps.size(); ++i) {
    const std::string step = "step " + std::to_string(i);
    if (!r.result->steps[i].applied) {
      mismatches.push_back({step + " / applied", Rational(1), Rational(0)});
      continue;
    }
    compare_tensors(step + " / gradient", s.training.model, oracle.steps[i].applied_gradient.tensors,
                    r.result->steps[i].gradient.tensors, mismatches);
  }
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("the applied gradient differs from the full-batch gradient", std::move(mismatches));
}

// Property 2.
Verdict split_does_not_change_the_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run a = run(target, s, o, "scenario");
  if (a.verdict) return *a.verdict;
  const sim::Scenario full = resplit(s, 1, 1);
  Run b = run(target, full, o, "one micro-batch on one rank");
  if (b.verdict) return *b.verdict;
  auto mismatches = compare_runs(s.training.model, *b.result, *a.result);
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("the same global batches as one micro-batch on one rank give a different update "
                       "(expected: that run; actual: this split)",
                       std::move(mismatches));
}

// Property 3.
Verdict offload_and_partitioning_do_not_change_the_update(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run a = run(target, s, o, "scenario");
  if (a.verdict) return *a.verdict;
  sim::Scenario toggled = s;
  toggled.engine.offload = !s.engine.offload;
  Run b = run(target, toggled, o, "offload toggled");
  if (b.verdict && b.verdict->outcome == Outcome::fail) return *b.verdict;
  if (b.result) {
    auto mismatches = compare_runs(s.training.model, s.engine.offload ? *b.result : *a.result,
                                   s.engine.offload ? *a.result : *b.result);
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
    auto mismatches = compare_runs(s.training.model, *c.result, *a.result);
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
  auto mismatches = compare_runs(s.training.model, *a.result, *b.result);
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("rotating the micro-batches of each window by one changes the update (expected: original order)",
                       std::move(mismatches));
}

// Property 5.
Verdict applied_gradient_holds_each_micro_batch_once(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  const MembershipProbe probe = membership_probe(s);
  Run r = run(target, probe.scenario, o, "membership probe");
  if (r.verdict) return *r.verdict;
  MembershipReport report = decode_membership(probe, *r.result);
  if (report.wrong.empty() && report.summary.empty()) return Verdict::pass();
  Verdict v = Verdict::fail(report.summary);
  v.membership = std::move(report);
  return v;
}

// Property 6.
Verdict reported_norm_is_the_norm_of_the_applied_gradient(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run r = run(target, s, o, "scenario");
  if (r.verdict) return *r.verdict;
  std::vector<Mismatch> mismatches;
  for (std::size_t i = 0; i < r.result->steps.size(); ++i) {
    const auto& step = r.result->steps[i];
    if (!step.applied) continue;
    const std::string where = "step " + std::to_string(i);
    if (step.clip_coefficient.is_zero()) {
      mismatches.push_back({where + " / clip_coefficient", Rational(1), step.clip_coefficient});
      continue;
    }
    // The gradient before clipping, from what was applied and the coefficient applied.
    Rational squared(0);
    for (const auto& t : step.gradient.tensors)
      for (Eigen::Index j = 0; j < t.size(); ++j) {
        const Rational g = t(j) / step.clip_coefficient;
        squared += g * g;
      }
    const Rational norm = models::ScalarTraits<Rational>::sqrt(squared);
    compare_value(where + " / grad_norm", norm, step.grad_norm, mismatches);
    Rational expected_coef(1);
    if (s.training.max_grad_norm) {
      const Rational coef = *s.training.max_grad_norm / (step.grad_norm + models::kClipEpsilon);
      if (coef < Rational(1)) expected_coef = coef;
    }
    compare_value(where + " / clip_coefficient", expected_coef, step.clip_coefficient, mismatches);
  }
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("the reported grad norm or clipping factor is not that of the applied gradient", std::move(mismatches));
}

// Property 7.
Verdict automatic_boundary_equals_manual_boundary(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  const auto automatic = with_automatic_boundary(s);
  if (!automatic) return Verdict::cannot_run("windows of different sizes have no automatic boundary");
  const auto manual = with_manual_boundary(*automatic);
  Run a = run(target, *automatic, o, "automatic boundary");
  if (a.verdict) return *a.verdict;
  Run b = run(target, *manual, o, "manual boundary");
  if (b.verdict) return *b.verdict;
  auto mismatches = compare_runs(s.training.model, *a.result, *b.result);
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("setting the boundary by hand on the last of G backwards differs from the automatic boundary "
                       "(expected: automatic)",
                       std::move(mismatches));
}

// Property 8.
Verdict checkpoint_then_resume_equals_running_straight_through(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  if (s.steps.size() < 2) return Verdict::cannot_run("needs two steps to resume between");
  sim::Scenario straight = s, resumed = s;
  straight.checkpoint_after_step.reset();
  resumed.checkpoint_after_step = s.checkpoint_after_step && *s.checkpoint_after_step + 1 < static_cast<int>(s.steps.size())
                                      ? *s.checkpoint_after_step
                                      : 0;
  Run a = run(target, straight, o, "straight through");
  if (a.verdict) return *a.verdict;
  Run b = run(target, resumed, o, "checkpoint and resume");
  if (b.verdict) return *b.verdict;
  auto mismatches = compare_runs(s.training.model, *a.result, *b.result);
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("resuming from a checkpoint after step " + std::to_string(*resumed.checkpoint_after_step) +
                           " differs from running straight through (expected: straight)",
                       std::move(mismatches));
}

// Property 9.
Verdict multi_step_trajectory_equals_full_batch_trajectory(const sim::Target& target, const sim::Scenario& s, const sim::RunOptions& o) {
  Run r = run(target, s, o, "scenario");
  if (r.verdict) return *r.verdict;
  const auto oracle = run_oracle_exact(oracle_training_for(target, s), s);
  std::vector<Mismatch> mismatches;
  compare_tensors("final / parameters", s.training.model, oracle.parameters.tensors, r.result->parameters.tensors, mismatches);
  compare_tensors("final / first_moment", s.training.model, oracle.state.first_moment, r.result->optimizer_state.first_moment, mismatches);
  compare_tensors("final / second_moment", s.training.model, oracle.state.second_moment, r.result->optimizer_state.second_moment, mismatches);
  for (std::size_t p = 0; p < oracle.state.step_count.size(); ++p)
    compare_value("final / step_count / " + models::parameter_names(s.training.model)[p], Rational(oracle.state.step_count[p]),
                  Rational(r.result->optimizer_state.step_count[p]), mismatches);
  if (mismatches.empty()) return Verdict::pass();
  return Verdict::fail("parameters or optimizer state after the run differ from full-batch training", std::move(mismatches));
}

}  // namespace

const std::vector<std::unique_ptr<Property>>& all_properties() {
  static const std::vector<std::unique_ptr<Property>> all = [] {
    std::vector<std::unique_ptr<Property>> v;
    auto add = [&](std::string_view name, std::string_view description, FunctionProperty::Check check) {
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
  return nullptr;
}

}  // namespace accumcheck::properties
