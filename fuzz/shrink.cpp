// Greedy deterministic shrinking.
#include "fuzz/shrink.h"

#include <stdexcept>
#include <tuple>
#include <vector>

#include "models/model.h"

namespace accumcheck::fuzz {

using models::Rational;
using Candidates = std::vector<sim::Scenario>;

namespace {

bool fixed_windows(const sim::Scenario& s) {
  return s.engine.boundary == sim::BoundaryMode::automatic && s.engine.step_after_every_backward;
}

void structural_candidates(const sim::Scenario& s, Candidates& out) {
  // Fewer steps: keep only the first, then drop each.
  if (s.steps.size() > 1) {
    sim::Scenario c = s;
    c.steps.resize(1);
    c.checkpoint_after_step.reset();
    out.push_back(c);
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      sim::Scenario d = s;
      d.steps.erase(d.steps.begin() + static_cast<std::ptrdiff_t>(i));
      if (d.checkpoint_after_step && *d.checkpoint_after_step >= static_cast<int>(d.steps.size()) - 1) d.checkpoint_after_step.reset();
      out.push_back(d);
    }
  }
  // Fewer micro-batches: under an automatic boundary every window loses the same one and G shrinks.
  if (fixed_windows(s)) {
    if (s.engine.accumulation_steps > 1)
      for (int k = 0; k < s.engine.accumulation_steps; ++k) {
        sim::Scenario c = s;
        c.engine.accumulation_steps -= 1;
        for (auto& step : c.steps) step.micro_batches.erase(step.micro_batches.begin() + k);
        out.push_back(c);
      }
  } else {
    for (std::size_t st = 0; st < s.steps.size(); ++st)
      for (std::size_t k = 0; s.steps[st].micro_batches.size() > 1 && k < s.steps[st].micro_batches.size(); ++k) {
        sim::Scenario c = s;
        c.steps[st].micro_batches.erase(c.steps[st].micro_batches.begin() + static_cast<std::ptrdiff_t>(k));
        out.push_back(c);
      }
  }
  // Fewer ranks: drop one rank's data everywhere.
  if (s.engine.rank_count > 1)
    for (int r = 0; r < s.engine.rank_count; ++r) {
      sim::Scenario c = s;
      c.engine.rank_count -= 1;
      for (auto& step : c.steps)
        for (auto& mb : step.micro_batches) mb.rank_sequences.erase(mb.rank_sequences.begin() + r);
      out.push_back(c);
    }
  // Fewer sequences, then fewer tokens.
  for (std::size_t st = 0; st < s.steps.size(); ++st)
    for (std::size_t k = 0; k < s.steps[st].micro_batches.size(); ++k)
      for (std::size_t r = 0; r < s.steps[st].micro_batches[k].rank_sequences.size(); ++r) {
        const auto& seqs = s.steps[st].micro_batches[k].rank_sequences[r];
        // A rank's micro-batch keeps at least one sequence: an empty one would make the reproducer depend on
        // what a framework does with no data at all (often a NaN from 0/0), which is not the bug at hand.
        for (std::size_t i = 0; seqs.size() > 1 && i < seqs.size(); ++i) {
          sim::Scenario c = s;
          auto& cs = c.steps[st].micro_batches[k].rank_sequences[r];
          cs.erase(cs.begin() + static_cast<std::ptrdiff_t>(i));
          out.push_back(c);
        }
        for (std::size_t i = 0; i < seqs.size(); ++i)
          for (int t = 0; t < seqs[i].token_count(); ++t) {
            if (seqs[i].token_count() == 1) break;
            sim::Scenario c = s;
            auto& seq = c.steps[st].micro_batches[k].rank_sequences[r][i];
            auto drop_row = [t](models::Matrix<Rational>& m) {
              models::Matrix<Rational> out(m.rows() - 1, m.cols());
              for (Eigen::Index row = 0, o = 0; row < m.rows(); ++row)
                if (row != t) out.row(o++) = m.row(row);
              m = out;
            };
            drop_row(seq.features);
            drop_row(seq.targets);
            seq.loss_mask.erase(seq.loss_mask.begin() + t);
            if (!seq.token_ids.empty()) seq.token_ids.erase(seq.token_ids.begin() + t);
            if (!seq.expert_index.empty()) seq.expert_index.erase(seq.expert_index.begin() + t);
            out.push_back(c);
          }
      }
}

// The catalogue's world: one scalar parameter w, x = 1, bias frozen; each token keeps its first target.
void scalar_model_candidate(const sim::Scenario& s, Candidates& out) {
  const models::ModelSpec scalar{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1, .frozen = {"bias"}};
  if (s.training.model == scalar) return;
  sim::Scenario c = s;
  c.training.model = scalar;
  c.initial_parameters = models::zero_parameters<Rational>(scalar);
  for (auto& step : c.steps)
    for (auto& mb : step.micro_batches)
      for (auto& rank : mb.rank_sequences)
        for (auto& seq : rank) {
          const Eigen::Index T = seq.token_count();
          models::Matrix<Rational> targets(T, 1);
          for (Eigen::Index t = 0; t < T; ++t) targets(t, 0) = seq.targets.cols() > 0 ? seq.targets(t, 0) : Rational(0);
          seq.features = models::Matrix<Rational>::Constant(T, 1, Rational(1));
          seq.targets = targets;
          seq.token_ids.clear();
          seq.expert_index.clear();
        }
  out.push_back(c);
}

void configuration_candidates(const sim::Scenario& s, Candidates& out) {
  auto push = [&](auto&& edit) {
    sim::Scenario c = s;
    edit(c);
    out.push_back(std::move(c));
  };
  const auto& o = s.training.optimizer;
  if (o.kind != models::OptimizerKind::sgd || o.momentum.sign() != 0 || o.weight_decay.sign() != 0 || o.nesterov)
    push([](sim::Scenario& c) {
      const Rational lr = c.training.optimizer.lr;
      const bool zero_policy = c.training.optimizer.missing_gradient_is_zero;
      c.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = lr};
      c.training.optimizer.missing_gradient_is_zero = zero_policy;
    });
  // Then one optimizer feature at a time, so that a failure that needs weight decay does not keep momentum or Adam.
  if (o.weight_decay.sign() != 0) push([](sim::Scenario& c) { c.training.optimizer.weight_decay = Rational(0); });
  if (o.momentum.sign() != 0 || o.nesterov || o.dampening.sign() != 0)
    push([](sim::Scenario& c) {
      auto& x = c.training.optimizer;
      x.momentum = x.dampening = Rational(0);
      x.nesterov = false;
    });
  if (o.kind != models::OptimizerKind::sgd)
    push([](sim::Scenario& c) {
      const auto& x = c.training.optimizer;
      c.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = x.lr, .weight_decay = x.weight_decay,
                                                   .missing_gradient_is_zero = x.missing_gradient_is_zero};
    });
  if (s.training.max_grad_norm) push([](sim::Scenario& c) { c.training.max_grad_norm.reset(); });
  if (s.checkpoint_after_step) push([](sim::Scenario& c) { c.checkpoint_after_step.reset(); });
  if (s.training.aggregation.mode != models::LossAggregation::sum)
    push([](sim::Scenario& c) { c.training.aggregation.mode = models::LossAggregation::sum; });
  if (s.engine.zero_stage > 0)
    for (int stage = 0; stage < s.engine.zero_stage; ++stage) push([stage](sim::Scenario& c) { c.engine.zero_stage = stage; });
  if (s.engine.offload) push([](sim::Scenario& c) { c.engine.offload = false; });
  if (s.engine.bucket_element_count != 0) push([](sim::Scenario& c) { c.engine.bucket_element_count = 0; });
  if (s.engine.boundary == sim::BoundaryMode::manual) {
    bool uniform = !s.steps.empty();
    for (const auto& step : s.steps) uniform = uniform && step.micro_batches.size() == s.steps[0].micro_batches.size();
    if (uniform)
      push([](sim::Scenario& c) {
        c.engine.boundary = sim::BoundaryMode::automatic;
        c.engine.step_after_every_backward = true;
        c.engine.accumulation_steps = static_cast<int>(c.steps[0].micro_batches.size());
      });
  }
  // A smaller configured G under a manual boundary (the caller's windows stay; only the engine's 1/G and the
  // layer's compensation change).
  if (s.engine.boundary == sim::BoundaryMode::manual)
    for (int g = 1; g < s.engine.accumulation_steps; ++g) push([g](sim::Scenario& c) { c.engine.accumulation_steps = g; });
  if (s.schedule_seed != 0) push([](sim::Scenario& c) { c.schedule_seed = 0; });
  // Model dimensions: drop the last input feature, output, expert; freeze a parameter.
  const auto& m = s.training.model;
  if (m.kind == models::ModelKind::linear && m.expert_count > 1)
    push([](sim::Scenario& c) {
      c.training.model.expert_count = 1;
      c.training.model.frozen.clear();
      c.initial_parameters = models::Parameters<Rational>{{c.initial_parameters.tensors[0], c.initial_parameters.tensors[1]}};
      for (auto& step : c.steps)
        for (auto& mb : step.micro_batches)
          for (auto& rank : mb.rank_sequences)
            for (auto& seq : rank) seq.expert_index.clear();
    });
  // One expert fewer (of three or more): the last expert's weight and bias go, its tokens go to the one before.
  if (m.kind == models::ModelKind::linear && m.expert_count > 2)
    push([](sim::Scenario& c) {
      auto& spec = c.training.model;
      const int last = spec.expert_count - 1;
      spec.expert_count = last;
      const std::string prefix = "expert" + std::to_string(last) + ".";
      std::erase_if(spec.frozen, [&](const std::string& n) { return n.starts_with(prefix); });
      c.initial_parameters.tensors.resize(static_cast<std::size_t>(2 * last));
      for (auto& step : c.steps)
        for (auto& mb : step.micro_batches)
          for (auto& rank : mb.rank_sequences)
            for (auto& seq : rank)
              for (int& x : seq.expert_index)
                if (x == last) x = last - 1;
    });
  // Tied embedding: one embedding dimension fewer (the last column of E), or one token fewer (the last row of E
  // and b and the last target column; the last token's occurrences become the one before).
  if (m.kind == models::ModelKind::tied_embedding && m.embed_size > 1)
    push([](sim::Scenario& c) {
      c.training.model.embed_size -= 1;
      auto& e = c.initial_parameters.tensors[0];
      e = models::Matrix<Rational>(e.leftCols(e.cols() - 1));
    });
  if (m.kind == models::ModelKind::tied_embedding && m.vocab_size > 1)
    push([](sim::Scenario& c) {
      const int last = c.training.model.vocab_size - 1;
      c.training.model.vocab_size = last;
      for (auto& t : c.initial_parameters.tensors) t = models::Matrix<Rational>(t.topRows(t.rows() - 1));
      for (auto& step : c.steps)
        for (auto& mb : step.micro_batches)
          for (auto& rank : mb.rank_sequences)
            for (auto& seq : rank) {
              seq.targets = models::Matrix<Rational>(seq.targets.leftCols(seq.targets.cols() - 1));
              for (int& id : seq.token_ids)
                if (id == last) id = last - 1;
            }
    });
  // One input feature or output fewer (linear, each expert alike, and mlp): the last column of every feature or
  // target matrix and the matching slices of the parameters.
  const bool dense = m.kind == models::ModelKind::linear || m.kind == models::ModelKind::mlp;
  auto drop_last_col = [](models::Matrix<Rational>& x) {
    x = models::Matrix<Rational>(x.leftCols(x.cols() - 1));
  };
  auto drop_last_row = [](models::Matrix<Rational>& x) {
    x = models::Matrix<Rational>(x.topRows(x.rows() - 1));
  };
  auto for_each_sequence = [](sim::Scenario& c, auto&& f) {
    for (auto& step : c.steps)
      for (auto& mb : step.micro_batches)
        for (auto& rank : mb.rank_sequences)
          for (auto& seq : rank) f(seq);
  };
  if (dense && m.input_size > 1)
    push([&](sim::Scenario& c) {
      c.training.model.input_size -= 1;
      // weight [O, I] of each expert (tensors 0, 2, ...) or fc1.weight [H, I]
      const std::size_t weights = m.kind == models::ModelKind::linear ? static_cast<std::size_t>(m.expert_count) : 1;
      for (std::size_t e = 0; e < weights; ++e) drop_last_col(c.initial_parameters.tensors[2 * e]);
      for_each_sequence(c, [&](models::Sequence<Rational>& seq) { drop_last_col(seq.features); });
    });
  if (dense && m.output_size > 1)
    push([&](sim::Scenario& c) {
      c.training.model.output_size -= 1;
      if (m.kind == models::ModelKind::linear) {
        for (auto& t : c.initial_parameters.tensors) drop_last_row(t);  // weight [O, I] and bias [O, 1] of each expert
      } else {
        drop_last_row(c.initial_parameters.tensors[2]);
        drop_last_row(c.initial_parameters.tensors[3]);
      }
      for_each_sequence(c, [&](models::Sequence<Rational>& seq) { drop_last_col(seq.targets); });
    });
  if (m.kind == models::ModelKind::mlp && m.hidden_size > 1)
    push([&](sim::Scenario& c) {
      c.training.model.hidden_size -= 1;
      drop_last_row(c.initial_parameters.tensors[0]);
      drop_last_row(c.initial_parameters.tensors[1]);
      drop_last_col(c.initial_parameters.tensors[2]);
    });
  for (const auto& name : models::parameter_names(m))
    if (std::find(m.frozen.begin(), m.frozen.end(), name) == m.frozen.end())
      push([&name](sim::Scenario& c) { c.training.model.frozen.push_back(name); });
}

// Every value of the scenario, for the value passes.
std::vector<Rational*> values_of(sim::Scenario& s) {
  std::vector<Rational*> out;
  for (auto& t : s.initial_parameters.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) out.push_back(&t(i));
  for (auto& step : s.steps)
    for (auto& mb : step.micro_batches)
      for (auto& rank : mb.rank_sequences)
        for (auto& seq : rank) {
          for (Eigen::Index i = 0; i < seq.features.size(); ++i) out.push_back(&seq.features(i));
          for (Eigen::Index i = 0; i < seq.targets.size(); ++i) out.push_back(&seq.targets(i));
        }
  return out;
}

bool valid(const sim::Scenario& s) {
  try {
    sim::validate(s);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

// Secondary measures, so that every accepted candidate makes strict progress and shrinking terminates:
// trainable values, then configuration complexity, then value complexity.
std::size_t configuration_complexity(const sim::Scenario& s) {
  const auto& o = s.training.optimizer;
  return static_cast<std::size_t>(s.engine.zero_stage) + s.engine.offload + (s.engine.bucket_element_count != 0) +
         (s.engine.boundary == sim::BoundaryMode::manual) + (s.schedule_seed != 0) +
         (s.training.aggregation.mode != models::LossAggregation::sum) + s.training.max_grad_norm.has_value() +
         s.checkpoint_after_step.has_value() + (o.kind != models::OptimizerKind::sgd) + (o.momentum.sign() != 0) +
         (o.weight_decay.sign() != 0) + o.nesterov;
}

std::size_t value_complexity(sim::Scenario& s) {
  std::size_t n = 0;
  for (const Rational* v : values_of(s)) n += v->is_zero() ? 0 : (*v == Rational(1) || *v == Rational(-1)) ? 1 : v->is_integer() ? 2 : 3;
  return n;
}

// G comes last: a smaller G under a manual boundary is progress only when nothing else changed.
std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, int> measure(const sim::Scenario& s) {
  sim::Scenario copy = s;
  return {scenario_size(s), models::trainable_value_count(s.training.model), configuration_complexity(s), value_complexity(copy),
          s.engine.accumulation_steps};
}

}  // namespace

std::size_t scenario_size(const sim::Scenario& s) {
  std::size_t size = s.steps.size() * 1000000 + static_cast<std::size_t>(s.engine.rank_count) * 100000;
  for (const auto& step : s.steps)
    for (const auto& mb : step.micro_batches) {
      size += 10000;
      for (const auto& rank : mb.rank_sequences)
        for (const auto& seq : rank) size += 1000 + 100 * static_cast<std::size_t>(seq.token_count());
    }
  for (const auto& t : s.initial_parameters.tensors) size += 10 * static_cast<std::size_t>(t.size());
  return size;
}

ShrinkResult shrink(const sim::Scenario& failing, const std::function<bool(const sim::Scenario&)>& still_fails,
                    std::size_t attempt_budget) {
  ShrinkResult result{failing, 0, 0, false};
  auto try_candidate = [&](const sim::Scenario& c) {
    if (result.attempts >= attempt_budget) {
      result.budget_exhausted = true;
      return false;
    }
    if (!valid(c) || !(measure(c) < measure(result.scenario))) return false;
    ++result.attempts;
    if (!still_fails(c)) return false;
    result.scenario = c;
    ++result.accepted;
    return true;
  };
  bool progress = true;
  while (progress && !result.budget_exhausted) {
    progress = false;
    Candidates candidates;
    structural_candidates(result.scenario, candidates);
    scalar_model_candidate(result.scenario, candidates);
    configuration_candidates(result.scenario, candidates);
    for (const auto& c : candidates)
      if (try_candidate(c)) {
        progress = true;
        break;
      }
    if (progress) continue;
    // Values toward 0, then 1, then their integer part.
    sim::Scenario probe = result.scenario;
    const std::size_t count = values_of(probe).size();
    for (std::size_t i = 0; i < count && !progress && !result.budget_exhausted; ++i)
      for (const Rational& simpler : {Rational(0), Rational(1)}) {
        sim::Scenario c = result.scenario;
        Rational* v = values_of(c)[i];
        if (*v == simpler || (simpler == Rational(1) && (v->is_zero() || *v == Rational(-1)))) continue;
        *v = simpler;
        if (try_candidate(c)) {
          progress = true;
          break;
        }
      }
    for (std::size_t i = 0; i < count && !progress && !result.budget_exhausted; ++i) {
      sim::Scenario c = result.scenario;
      Rational* v = values_of(c)[i];
      if (v->is_integer()) continue;
      mpz_class whole;
      mpz_tdiv_q(whole.get_mpz_t(), v->numerator().get_mpz_t(), v->denominator().get_mpz_t());
      *v = Rational(whole);
      if (try_candidate(c)) progress = true;
    }
  }
  return result;
}

}  // namespace accumcheck::fuzz
