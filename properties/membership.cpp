// Membership probe construction and decoding.
#include "properties/membership.h"

#include <gmpxx.h>

namespace accumcheck::properties {

using models::Rational;

MembershipProbe membership_probe(const sim::Scenario& scenario) {
  MembershipProbe probe;
  sim::Scenario& s = probe.scenario;
  s.engine = scenario.engine;
  s.schedule_seed = scenario.schedule_seed;
  s.checkpoint_after_step = scenario.checkpoint_after_step;
  s.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  s.training.model.frozen = {"bias"};
  s.training.aggregation.mode = models::LossAggregation::sum;
  s.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = Rational(0)};
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  for (std::size_t step = 0; step < scenario.steps.size(); ++step) {
    sim::StepPlan plan;
    for (std::size_t k = 0; k < scenario.steps[step].micro_batches.size(); ++k) {
      sim::MicroBatch mb;
      for (int r = 0; r < scenario.engine.rank_count; ++r) {
        mpz_class power;
        mpz_ui_pow_ui(power.get_mpz_t(), 10, static_cast<unsigned long>(probe.ids.size()));
        probe.ids.push_back({static_cast<int>(step), static_cast<int>(k), r});
        models::Sequence<Rational> seq;
        seq.features = models::Matrix<Rational>::Constant(1, 1, Rational(1));
        seq.targets = models::Matrix<Rational>::Constant(1, 1, -Rational(power));
        seq.loss_mask = {1};
        mb.rank_sequences.push_back({seq});
      }
      plan.micro_batches.push_back(std::move(mb));
    }
    s.steps.push_back(std::move(plan));
  }
  return probe;
}

MembershipReport decode_membership(const MembershipProbe& probe, const sim::RunResult& run) {
  MembershipReport report;
  auto name = [](const MicroBatchId& id) {
    return "micro-batch " + std::to_string(id.micro_batch) + " (rank " + std::to_string(id.rank) + ") of step " +
           std::to_string(id.step);
  };
  for (std::size_t step = 0; step < run.steps.size(); ++step) {
    const Rational g = run.steps[step].gradient.tensors[0](0, 0);
    const std::string where = "step " + std::to_string(step) + ": ";
    if (!run.steps[step].applied) {
      report.summary += where + "no optimizer step was applied; ";
      continue;
    }
    if (!g.is_integer()) {
      report.summary += where + "applied gradient " + g.to_string() +
                        " is not a whole sum of micro-batch gradients (wrong weights); ";
      for (std::size_t id = 0; id < probe.ids.size(); ++id)
        if (probe.ids[id].step == static_cast<int>(step))
          report.wrong.push_back({static_cast<int>(step), probe.ids[id], Rational(0)});
      continue;
    }
    // Base-10 digits, least significant first; a negative total or a digit run past the ids is also wrong.
    mpz_class rest = g.numerator();
    const bool negative = rest < 0;
    if (negative) rest = -rest;
    for (std::size_t id = 0; id < probe.ids.size() || rest != 0; ++id) {
      const mpz_class digit = rest % 10;
      rest /= 10;
      const long multiplicity = (negative ? -1 : 1) * digit.get_si();
      const bool own = id < probe.ids.size() && probe.ids[id].step == static_cast<int>(step);
      const long expected = own ? 1 : 0;
      if (multiplicity == expected) continue;
      if (id >= probe.ids.size()) {
        report.summary += where + "applied gradient " + g.to_string() + " holds more than the run's micro-batches; ";
        break;
      }
      report.wrong.push_back({static_cast<int>(step), probe.ids[id], Rational(multiplicity)});
      if (own && multiplicity == 0) report.summary += where + name(probe.ids[id]) + " dropped; ";
      else if (own) report.summary += where + name(probe.ids[id]) + " applied " + std::to_string(multiplicity) + " times; ";
      else report.summary += where + name(probe.ids[id]) + " leaked in (" + std::to_string(multiplicity) + "x); ";
    }
  }
  if (report.summary.size() >= 2) report.summary.resize(report.summary.size() - 2);
  return report;
}

}  // namespace accumcheck::properties
