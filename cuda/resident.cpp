#include "cuda/resident.h"

#include <gmpxx.h>

#include <string>

#include "cuda/entry_slots.h"
#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/exact_values.h"
#include "cuda/twin_sums.h"
#include "cuda/float_linear.h"
#include "cuda/float_models.h"
#include "models/model.h"

namespace accumcheck::cuda {

namespace {

using models::Rational;

template <class Batch>
std::size_t per_group_of(const Batch& b) {
  return b.group_count > 0 ? b.sum_count() / static_cast<std::size_t>(b.group_count) : 0;
}

template <class Batch>
ExactWindowPlan plan_window(const Batch& b, std::span<const Rational> c) {
  if (c.size() != static_cast<std::size_t>(b.group_count))
    throw std::invalid_argument("plan_exact_window: " + std::to_string(c.size()) + " coefficients for " +
                                std::to_string(b.group_count) + " groups");
  ExactWindowPlan plan;
  const std::size_t per_group = per_group_of(b);
  plan.device.exponent.resize(per_group);
  bool used[kExponentCount] = {};
  for (std::size_t e = 0; e < per_group; ++e) {
    const int k = entry_slot(b, e).exponent;
    plan.device.exponent[e] = static_cast<std::uint8_t>(k);
    used[k] = true;
  }
  // q[g][k] = c_g / D^k; L_k the lcm of their denominators; M = q L_k.
  const mpz_class d(static_cast<long>(b.denominator));
  plan.device.multipliers.assign(c.size() * kExponentCount, 0);
  for (int k = 0; k < kExponentCount; ++k) {
    if (!used[k]) continue;
    mpz_class power;
    mpz_pow_ui(power.get_mpz_t(), d.get_mpz_t(), static_cast<unsigned long>(k));
    std::vector<mpq_class> q(c.size());
    mpz_class common = 1;
    for (std::size_t g = 0; g < c.size(); ++g) {
      q[g] = c[g].mpq() / power;
      q[g].canonicalize();
      if (q[g] != 0) mpz_lcm(common.get_mpz_t(), common.get_mpz_t(), q[g].get_den_mpz_t());
    }
    plan.denominator[static_cast<std::size_t>(k)] = Rational(common);
    for (std::size_t g = 0; g < c.size(); ++g) {
      const mpz_class m = q[g].get_num() * (common / q[g].get_den());
      if (!m.fits_slong_p())
        throw ExactRangeError(ExactLimit::multiplier, "the coefficient " + c[g].to_string() + " of group " +
                                                          std::to_string(g) + " over the window's denominator " +
                                                          common.get_str() + " needs more than 63 bits");
      plan.device.multipliers[g * kExponentCount + static_cast<std::size_t>(k)] = m.get_si();
    }
  }
  return plan;
}

template <class Batch, class Value, class ToValue>
models::Gradient<Value> place(const char* who, const models::ModelSpec& spec, const Batch& b, std::size_t count,
                              ToValue value_of) {
  if (count != per_group_of(b))
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(count) + " sums for a batch of " +
                                std::to_string(per_group_of(b)) + " per group");
  models::Gradient<Value> grad = models::zero_gradient<Value>(spec);
  for (std::size_t e = 0; e < count; ++e) {
    const EntrySlot at = entry_slot(b, e);
    grad.tensors[at.tensor](at.row, at.col) = value_of(e, at);
  }
  return grad;
}

template <class Batch>
models::Gradient<Rational> exact_gradient(const models::ModelSpec& spec, const Batch& b, std::span<const Int256> sums,
                                          const ExactWindowPlan& plan) {
  return place<Batch, Rational>("window_gradient", spec, b, sums.size(), [&](std::size_t e, const EntrySlot& at) {
    const Int256& a = sums[e];
    if (a == Int256{}) return Rational(0);
    return to_rational(a) / plan.denominator[static_cast<std::size_t>(at.exponent)];
  });
}

template <class Batch>
models::Gradient<float> float_gradient(const models::ModelSpec& spec, const Batch& b, std::span<const float> gradient) {
  return place<Batch, float>("window_gradient", spec, b, gradient.size(),
                             [&](std::size_t e, const EntrySlot&) { return gradient[e]; });
}

template <class Batch>
std::vector<Int256> exact_twin(const Batch& b, const ExactWindowMultipliers& m) {
  const std::size_t per_group = m.exponent.size(), groups = static_cast<std::size_t>(b.group_count);
  if (b.sum_count() != groups * per_group || m.multipliers.size() != groups * kExponentCount)
    throw std::invalid_argument("host_exact_window: the multipliers do not fit the batch");
  const std::vector<Int128> sums = twin_sums(b);
  const ExactWindowView view{sums.data(), m.multipliers.data(), m.exponent.data(), groups, per_group};
  std::vector<Int256> out(per_group);
  for (std::size_t e = 0; e < per_group; ++e) out[e] = exact_window_entry(view, e);
  return out;
}

template <class Batch>
std::vector<Int256> exact_step_twin(const Batch& b, const ExactWindowMultipliers& m, const ExactStepOf& step_of,
                                    ExactSgdResult& result) {
  result = {};
  std::vector<Int256> accumulated = exact_twin(b, m);
  if (!step_of) return accumulated;
  const std::optional<ExactSgdStep> step = step_of(accumulated);
  if (!step || step->param.empty()) return accumulated;
  const std::size_t elements = step->param.size();
  if (step->buffer.size() != elements || step->entry_of.size() != elements || step->terms_of.size() != elements ||
      step->param_terms.size() != step->buffer_terms.size())
    throw std::invalid_argument("host_exact_window_step: the step's arrays do not fit");
  result.param.resize(elements);
  result.buffer.resize(elements);
  result.overflow.resize(elements);
  const ExactSgdStepView view{step->param.data(), accumulated.data(), step->buffer.data(), step->entry_of.data(),
                              step->terms_of.data(), step->param_terms.data(), step->buffer_terms.data(),
                              result.param.data(), result.buffer.data(), result.overflow.data(), elements};
  for (std::size_t i = 0; i < elements; ++i) exact_sgd_step_at(view, i);
  return accumulated;
}

// Where each element of each tensor (column-major, as Eigen stores it) sits among a group's entries, and at which
// exponent each tensor's sums are: what the step kernels read an element's gradient by.
struct EntryIndex {
  std::vector<std::vector<std::int32_t>> entry;  // [tensor][element], -1 for none
  std::vector<int> exponent;                     // [tensor], -1 for none
};
template <class Batch, class S>
EntryIndex entry_index(const Batch& b, const models::Parameters<S>& params) {
  EntryIndex out{std::vector<std::vector<std::int32_t>>(params.size()), std::vector<int>(params.size(), -1)};
  for (std::size_t p = 0; p < params.size(); ++p)
    out.entry[p].assign(static_cast<std::size_t>(params.tensors[p].size()), -1);
  const std::size_t per_group = per_group_of(b);
  for (std::size_t e = 0; e < per_group; ++e) {
    const EntrySlot at = entry_slot(b, e);
    out.exponent[at.tensor] = at.exponent;
    out.entry[at.tensor][static_cast<std::size_t>(at.row + at.col * params.tensors[at.tensor].rows())] =
        static_cast<std::int32_t>(e);
  }
  return out;
}

// `value` as an Int256, or false when it needs more than 255 bits.
bool to_int256(const mpz_class& value, Int256& out) {
  if (mpz_sizeinbase(value.get_mpz_t(), 2) > 255) return false;
  std::uint64_t magnitude[4] = {0, 0, 0, 0};
  std::size_t count = 0;
  mpz_export(magnitude, &count, -1, sizeof(std::uint64_t), 0, 0, value.get_mpz_t());
  out = from_magnitude(magnitude, value < 0);
  return true;
}

template <class Batch>
std::vector<float> float_twin(const Batch& b, const FloatWindow& w, const FloatStepPlan& plan, FloatStepState& state,
                              const ClipOf& clip_of) {
  const std::size_t groups = static_cast<std::size_t>(b.group_count), per_group = per_group_of(b);
  const std::size_t elements = state.theta.size();
  if (w.coefficients.size() != groups ||
      (!w.micro_batch_end.empty() && w.micro_batch_end.back() != static_cast<std::int32_t>(groups)) ||
      plan.constants_of.size() != elements || plan.entry_of.size() != elements || state.first.size() != elements ||
      state.second.size() != elements)
    throw std::invalid_argument("host_float_window_step: the window or the step does not fit the batch");
  const std::vector<float> sums = twin_sums(b);
  const FloatWindowView view{sums.data(), w.coefficients.data(), w.micro_batch_end.data(), w.micro_batch_end.size(),
                             per_group};
  std::vector<float> accumulated(per_group);
  for (std::size_t e = 0; e < per_group; ++e) accumulated[e] = float_window_entry(view, e);
  const std::optional<float> clip = clip_of(accumulated);
  const FloatStepView step{state.theta.data(), state.first.data(), state.second.data(), accumulated.data(),
                           plan.constants.data(), plan.constants_of.data(), plan.entry_of.data(), elements,
                           clip.value_or(1.0f), static_cast<std::uint8_t>(clip.has_value())};
  for (std::size_t i = 0; i < elements; ++i) float_step_at(step, i);
  return accumulated;
}

}  // namespace

ExactWindowPlan plan_exact_window(const ExactLinearBatch& b, std::span<const Rational> c) { return plan_window(b, c); }
ExactWindowPlan plan_exact_window(const ExactMlpBatch& b, std::span<const Rational> c) { return plan_window(b, c); }
ExactWindowPlan plan_exact_window(const ExactTiedBatch& b, std::span<const Rational> c) { return plan_window(b, c); }

models::Gradient<Rational> window_gradient(const models::ModelSpec& spec, const ExactLinearBatch& b,
                                           std::span<const Int256> sums, const ExactWindowPlan& plan) {
  return exact_gradient(spec, b, sums, plan);
}
models::Gradient<Rational> window_gradient(const models::ModelSpec& spec, const ExactMlpBatch& b,
                                           std::span<const Int256> sums, const ExactWindowPlan& plan) {
  return exact_gradient(spec, b, sums, plan);
}
models::Gradient<Rational> window_gradient(const models::ModelSpec& spec, const ExactTiedBatch& b,
                                           std::span<const Int256> sums, const ExactWindowPlan& plan) {
  return exact_gradient(spec, b, sums, plan);
}
models::Gradient<float> window_gradient(const models::ModelSpec& spec, const FloatLinearBatch& b,
                                        std::span<const float> gradient) {
  return float_gradient(spec, b, gradient);
}
models::Gradient<float> window_gradient(const models::ModelSpec& spec, const FloatMlpBatch& b,
                                        std::span<const float> gradient) {
  return float_gradient(spec, b, gradient);
}
models::Gradient<float> window_gradient(const models::ModelSpec& spec, const FloatTiedBatch& b,
                                        std::span<const float> gradient) {
  return float_gradient(spec, b, gradient);
}

Rational to_rational(const Int256& value) {
  std::uint64_t magnitude[4];
  const bool negative = magnitude_of(value, magnitude);
  mpz_class z;
  mpz_import(z.get_mpz_t(), 4, -1, sizeof(std::uint64_t), 0, 0, magnitude);
  if (negative) z = -z;
  return Rational(z);
}

std::vector<Int256> host_exact_window(const ExactLinearBatch& b, const ExactWindowMultipliers& m) { return exact_twin(b, m); }
std::vector<Int256> host_exact_window(const ExactMlpBatch& b, const ExactWindowMultipliers& m) { return exact_twin(b, m); }
std::vector<Int256> host_exact_window(const ExactTiedBatch& b, const ExactWindowMultipliers& m) { return exact_twin(b, m); }

std::vector<float> host_float_window_step(const FloatLinearBatch& b, const FloatWindow& w, const FloatStepPlan& plan,
                                          FloatStepState& state, const ClipOf& clip_of) {
  return float_twin(b, w, plan, state, clip_of);
}
std::vector<float> host_float_window_step(const FloatMlpBatch& b, const FloatWindow& w, const FloatStepPlan& plan,
                                          FloatStepState& state, const ClipOf& clip_of) {
  return float_twin(b, w, plan, state, clip_of);
}
std::vector<float> host_float_window_step(const FloatTiedBatch& b, const FloatWindow& w, const FloatStepPlan& plan,
                                          FloatStepState& state, const ClipOf& clip_of) {
  return float_twin(b, w, plan, state, clip_of);
}

std::vector<Int256> host_exact_window_step(const ExactLinearBatch& b, const ExactWindowMultipliers& m,
                                           const ExactStepOf& step_of, ExactSgdResult& result) {
  return exact_step_twin(b, m, step_of, result);
}
std::vector<Int256> host_exact_window_step(const ExactMlpBatch& b, const ExactWindowMultipliers& m,
                                           const ExactStepOf& step_of, ExactSgdResult& result) {
  return exact_step_twin(b, m, step_of, result);
}
std::vector<Int256> host_exact_window_step(const ExactTiedBatch& b, const ExactWindowMultipliers& m,
                                           const ExactStepOf& step_of, ExactSgdResult& result) {
  return exact_step_twin(b, m, step_of, result);
}

template <class S, class Batch>
ExactSgdPlan plan_exact_sgd_step(const models::OptimizerSpec& spec, const OptimizerPlan<S>& plan, const Batch& b,
                                 const ExactWindowPlan& window, const models::Parameters<S>& params,
                                 const models::OptimizerState<S>& state, const Rational& clip) {
  if (spec.kind != models::OptimizerKind::sgd)
    throw std::invalid_argument("plan_exact_sgd_step: only SGD steps in integers (Adam's root is not exact)");
  using T = models::ScalarTraits<S>;
  const auto [entry, exponent] = entry_index(b, params);
  const mpz_class d(static_cast<long>(b.denominator));
  ExactSgdPlan out;
  const auto multiplier = [&](const mpq_class& coefficient, const mpz_class& q, std::size_t p) {
    Int256 m;
    if (!to_int256(coefficient.get_num() * (q / coefficient.get_den()), m))
      throw ExactRangeError(ExactLimit::step, "an SGD step's multiplier for parameter " + std::to_string(p) +
                                                  " needs more than 255 bits");
    return m;
  };
  // (P, A, B) coefficients -> terms over their least common denominator, which `q` receives.
  const auto terms = [&](const mpq_class (&c)[3], const mpz_class (&denominator)[3], std::size_t p, mpz_class& q) {
    mpq_class scaled[3];
    q = 1;
    for (int j = 0; j < 3; ++j) {
      scaled[j] = c[j] / mpq_class(denominator[j]);
      scaled[j].canonicalize();
      if (scaled[j] != 0) mpz_lcm(q.get_mpz_t(), q.get_mpz_t(), scaled[j].get_den_mpz_t());
    }
    return ExactStepTerms{multiplier(scaled[0], q, p), multiplier(scaled[1], q, p), multiplier(scaled[2], q, p)};
  };
  for (const auto& s : plan.stepped) {
    const std::size_t p = s.parameter;
    const auto& k = plan.constants[s.constants];
    const mpq_class lr = T::to_rational(k.lr).mpq(), wd = k.has_decay ? T::to_rational(k.weight_decay).mpq() : mpq_class(0);
    const mpq_class mu = T::to_rational(k.momentum).mpq(), omd = T::to_rational(k.one_minus_dampening).mpq();
    const mpq_class g = clip.mpq();
    // In (p, g, b): d = wd p + g; the buffer d on its first step, else mu b + (1 - dampening) d; the direction the
    // buffer, or with Nesterov d + mu b'; p' = p - lr direction.
    mpq_class buffer[3] = {0, 0, 0}, direction[3] = {wd, g, 0};
    if (k.has_momentum) {
      if (k.first_momentum_step) buffer[0] = wd, buffer[1] = g;
      else buffer[0] = omd * wd, buffer[1] = omd * g, buffer[2] = mu;
      for (int j = 0; j < 3; ++j) direction[j] = spec.nesterov ? direction[j] + mu * buffer[j] : buffer[j];
    }
    mpq_class param[3] = {1 - lr * direction[0], -lr * direction[1], -lr * direction[2]};
    // The buffer's numerators over its least common denominator.
    mpz_class buffer_denominator = 1;
    std::vector<mpq_class> b_values;
    if (k.has_momentum && !k.first_momentum_step) {
      for (Eigen::Index i = 0; i < state.first_moment[p].size(); ++i) {
        b_values.push_back(T::to_rational(state.first_moment[p](i)).mpq());
        mpz_lcm(buffer_denominator.get_mpz_t(), buffer_denominator.get_mpz_t(), b_values.back().get_den_mpz_t());
      }
    }
    ACCUMCHECK_ASSERT(exponent[p] >= 0);
    // P is over D, A over L_k (the window's denominator of this tensor's exponent), B over the buffer's.
    const mpz_class denominators[3] = {d, window.denominator[static_cast<std::size_t>(exponent[p])].numerator(),
                                       buffer_denominator};
    mpz_class q_param, q_buffer;
    out.device.param_terms.push_back(terms(param, denominators, p, q_param));
    out.device.buffer_terms.push_back(k.has_momentum ? terms(buffer, denominators, p, q_buffer) : ExactStepTerms{});
    out.param_denominator.push_back(Rational(q_param));
    out.buffer_denominator.push_back(Rational(k.has_momentum ? q_buffer : mpz_class(1)));
    const auto terms_index = static_cast<std::int32_t>(out.device.param_terms.size() - 1);
    for (Eigen::Index i = 0; i < params.tensors[p].size(); ++i) {
      const mpq_class value = T::to_rational(params.tensors[p](i)).mpq() * d;
      ACCUMCHECK_ASSERT(value.get_den() == 1 && value.get_num().fits_slong_p());
      out.device.param.push_back(value.get_num().get_si());
      Int256 numerator;
      if (!b_values.empty()) {
        const mpq_class scaled = b_values[static_cast<std::size_t>(i)] * buffer_denominator;
        if (!to_int256(scaled.get_num(), numerator))
          throw ExactRangeError(ExactLimit::step, "the momentum buffer of parameter " + std::to_string(p) +
                                                     " needs more than 255 bits over its common denominator");
      }
      out.device.buffer.push_back(numerator);
      ACCUMCHECK_ASSERT(entry[p][static_cast<std::size_t>(i)] >= 0);
      out.device.entry_of.push_back(entry[p][static_cast<std::size_t>(i)]);
      out.device.terms_of.push_back(terms_index);
    }
  }
  return out;
}

template <class S>
void store_exact_sgd_step(const OptimizerPlan<S>& plan, const ExactSgdPlan& sgd,
                          const ExactSgdResult& result, models::Parameters<S>& params, models::OptimizerState<S>& state) {
  ACCUMCHECK_ASSERT(result.param.size() == plan.total && result.overflow.size() == plan.total);
  for (std::size_t i = 0; i < plan.total; ++i)
    if (result.overflow[i])
      throw ExactRangeError(ExactLimit::step, "element " + std::to_string(i) + " of the SGD step left 256 bits");
  for (std::size_t t = 0; t < plan.stepped.size(); ++t) {
    const auto& s = plan.stepped[t];
    const std::size_t p = s.parameter;
    const bool momentum = plan.constants[s.constants].has_momentum;
    for (Eigen::Index i = 0; i < params.tensors[p].size(); ++i) {
      const std::size_t flat = s.begin + static_cast<std::size_t>(i);
      params.tensors[p](i) = models::from_rational<S>(to_rational(result.param[flat]) / sgd.param_denominator[t]);
      if (momentum)
        state.first_moment[p](i) = models::from_rational<S>(to_rational(result.buffer[flat]) / sgd.buffer_denominator[t]);
    }
  }
}

#define ACCUMCHECK_EXACT_SGD(S, Batch)                                                                               \
  template ExactSgdPlan plan_exact_sgd_step(const models::OptimizerSpec&, const OptimizerPlan<S>&, const Batch&,     \
                                            const ExactWindowPlan&, const models::Parameters<S>&,                    \
                                            const models::OptimizerState<S>&, const Rational&);
ACCUMCHECK_EXACT_SGD(Rational, ExactLinearBatch)
ACCUMCHECK_EXACT_SGD(Rational, ExactMlpBatch)
ACCUMCHECK_EXACT_SGD(Rational, ExactTiedBatch)
ACCUMCHECK_EXACT_SGD(models::FastRational, ExactLinearBatch)
ACCUMCHECK_EXACT_SGD(models::FastRational, ExactMlpBatch)
ACCUMCHECK_EXACT_SGD(models::FastRational, ExactTiedBatch)
#undef ACCUMCHECK_EXACT_SGD
template void store_exact_sgd_step(const OptimizerPlan<Rational>&, const ExactSgdPlan&,
                                   const ExactSgdResult&, models::Parameters<Rational>&, models::OptimizerState<Rational>&);
template void store_exact_sgd_step(const OptimizerPlan<models::FastRational>&,
                                   const ExactSgdPlan&, const ExactSgdResult&, models::Parameters<models::FastRational>&,
                                   models::OptimizerState<models::FastRational>&);

FloatStepConstants to_float_step_constants(const models::OptimizerSpec& spec, const models::StepConstants<float>& k) {
  FloatStepConstants out;
  out.kind = spec.kind == models::OptimizerKind::sgd    ? float_sgd
             : spec.kind == models::OptimizerKind::adam ? float_adam
                                                        : float_adamw;
  out.nesterov = spec.nesterov;
  out.has_decay = k.has_decay;
  out.has_momentum = k.has_momentum;
  out.first_momentum_step = k.first_momentum_step;
  out.lr = k.lr, out.weight_decay = k.weight_decay, out.momentum = k.momentum;
  out.one_minus_dampening = k.one_minus_dampening;
  out.beta1 = k.beta1, out.beta2 = k.beta2, out.one_minus_beta1 = k.one_minus_beta1;
  out.one_minus_beta2 = k.one_minus_beta2;
  out.bias_correction2_sqrt = k.bias_correction2_sqrt, out.step_size = k.step_size, out.eps = k.eps;
  out.decay_factor = k.decay_factor;
  return out;
}

template <class Batch>
FloatStepPlan float_step_plan(const models::OptimizerSpec& spec, const OptimizerPlan<float>& plan, const Batch& b,
                              const models::Parameters<float>& params) {
  const std::vector<std::vector<std::int32_t>> entry = entry_index(b, params).entry;
  FloatStepPlan out;
  for (const auto& k : plan.constants) out.constants.push_back(to_float_step_constants(spec, k));
  out.constants_of.reserve(plan.total);
  out.entry_of.reserve(plan.total);
  for (const auto& s : plan.stepped)
    for (std::size_t i = 0; i < entry[s.parameter].size(); ++i) {
      ACCUMCHECK_ASSERT(entry[s.parameter][i] >= 0);
      out.constants_of.push_back(static_cast<std::int32_t>(s.constants));
      out.entry_of.push_back(entry[s.parameter][i]);
    }
  return out;
}
template FloatStepPlan float_step_plan(const models::OptimizerSpec&, const OptimizerPlan<float>&, const FloatLinearBatch&,
                                       const models::Parameters<float>&);
template FloatStepPlan float_step_plan(const models::OptimizerSpec&, const OptimizerPlan<float>&, const FloatMlpBatch&,
                                       const models::Parameters<float>&);
template FloatStepPlan float_step_plan(const models::OptimizerSpec&, const OptimizerPlan<float>&, const FloatTiedBatch&,
                                       const models::Parameters<float>&);

FloatStepState load_float_step(const OptimizerPlan<float>& plan, const models::Parameters<float>& params,
                               const models::OptimizerState<float>& state) {
  FloatStepState out;
  for (auto* v : {&out.theta, &out.first, &out.second}) v->reserve(plan.total);
  for (const auto& s : plan.stepped) {
    const std::size_t p = s.parameter;
    for (Eigen::Index i = 0; i < params.tensors[p].size(); ++i) {
      out.theta.push_back(params.tensors[p](i));
      out.first.push_back(state.first_moment[p](i));
      out.second.push_back(state.second_moment[p](i));
    }
  }
  return out;
}

void store_float_step(const OptimizerPlan<float>& plan, const FloatStepState& stepped, models::Parameters<float>& params,
                      models::OptimizerState<float>& state) {
  ACCUMCHECK_ASSERT(stepped.theta.size() == plan.total);
  for (const auto& s : plan.stepped) {
    const std::size_t p = s.parameter;
    for (Eigen::Index i = 0; i < params.tensors[p].size(); ++i) {
      const std::size_t flat = s.begin + static_cast<std::size_t>(i);
      params.tensors[p](i) = stepped.theta[flat];
      state.first_moment[p](i) = stepped.first[flat];
      state.second_moment[p](i) = stepped.second[flat];
    }
  }
}

}  // namespace accumcheck::cuda
