// Template bodies for optimizer.h. The update is written once, per element (update_element), so that the
// oracle's whole-tensor step and the engine's partitioned steps (each rank owning a slice of the flattened
// parameters, as ZeRO does) run the very same arithmetic.
#pragma once

namespace accumcheck::models {

namespace detail {
inline Rational rational_power(const Rational& base, long exponent) {
  Rational out(1);
  for (long i = 0; i < exponent; ++i) out *= base;
  return out;
}

// 1 - base^exponent in S, rounded once where S rounds. An exact S gets the same value in its own arithmetic, which
// for FastRational keeps a small value in two words where Rational's goes through GMP (2% of a default trial).
template <class S>
S one_minus_power(const Rational& base, long exponent) {
  if constexpr (ScalarTraits<S>::exact) {
    const S b = from_rational<S>(base);
    S power(1);
    for (long i = 0; i < exponent; ++i) power *= b;
    return S(1) - power;
  } else {
    return from_rational<S>(Rational(1) - rational_power(base, exponent));
  }
}
}  // namespace detail

template <class S>
StepConstants<S> step_constants(const OptimizerSpec& spec, long step_count, bool first_momentum_step) {
  ACCUMCHECK_ASSERT(step_count >= 1);
  StepConstants<S> k{from_rational<S>(spec.lr), from_rational<S>(spec.weight_decay), spec.weight_decay.sign() != 0};
  if (spec.kind == OptimizerKind::sgd) {
    k.momentum = from_rational<S>(spec.momentum);
    k.one_minus_dampening = detail::one_minus_power<S>(spec.dampening, 1);
    k.has_momentum = spec.momentum.sign() != 0;
    k.first_momentum_step = first_momentum_step;
    return k;
  }
  k.beta1 = from_rational<S>(spec.beta1);
  k.beta2 = from_rational<S>(spec.beta2);
  k.one_minus_beta1 = detail::one_minus_power<S>(spec.beta1, 1);
  k.one_minus_beta2 = detail::one_minus_power<S>(spec.beta2, 1);
  const S bias_correction1 = detail::one_minus_power<S>(spec.beta1, step_count);
  const S bias_correction2 = detail::one_minus_power<S>(spec.beta2, step_count);
  k.bias_correction2_sqrt = ScalarTraits<S>::sqrt(bias_correction2);
  k.step_size = k.lr / bias_correction1;
  k.eps = from_rational<S>(spec.eps);
  k.decay_factor = S(1) - k.lr * k.weight_decay;
  if constexpr (ScalarTraits<S>::exact) {
    k.step_size_times_root = k.step_size * k.bias_correction2_sqrt;
    k.eps_times_root = k.eps * k.bias_correction2_sqrt;
  }
  return k;
}

template <class S>
void update_element(const OptimizerSpec& spec, const StepConstants<S>& k, S& theta, const S& g, S& first, S& second) {
  if (spec.kind == OptimizerKind::sgd) {
    S d = g;
    if (k.has_decay) d += k.weight_decay * theta;
    if (k.has_momentum) {
      first = k.first_momentum_step ? d : k.momentum * first + k.one_minus_dampening * d;
      d = spec.nesterov ? d + k.momentum * first : first;
    }
    theta -= k.lr * d;
    return;
  }
  S g_eff = g;
  if (k.has_decay) {
    if (spec.kind == OptimizerKind::adam) g_eff += k.weight_decay * theta;
    else theta *= k.decay_factor;
  }
  first = k.beta1 * first + k.one_minus_beta1 * g_eff;
  second = k.beta2 * second + k.one_minus_beta2 * g_eff * g_eff;
  if constexpr (ScalarTraits<S>::exact) {
    // The same value with the root's divisor multiplied through, c = bias_correction2_sqrt:
    // step_size m / (sqrt(v) / c + eps) = (step_size c) m / (sqrt(v) + eps c), the quotient in one division.
    theta -= round_update_quotient(S(k.step_size_times_root * first), ScalarTraits<S>::sqrt(second), k.eps_times_root);
  } else {
    // Rounded as PyTorch's float kernels round, in their order.
    const S denom = ScalarTraits<S>::sqrt(second) / k.bias_correction2_sqrt + k.eps;
    theta -= ScalarTraits<S>::round_update(k.step_size * first / denom);
  }
}

template <class S>
OptimizerState<S> initial_optimizer_state(const ModelSpec& spec) {
  OptimizerState<S> state;
  for (const auto& [rows, cols] : parameter_shapes(spec)) {
    state.first_moment.push_back(Matrix<S>::Zero(rows, cols));
    state.second_moment.push_back(Matrix<S>::Zero(rows, cols));
  }
  state.step_count.assign(state.first_moment.size(), 0);
  reset_flags(state.has_momentum_buffer, state.first_moment.size());
  return state;
}

template <class S>
void optimizer_step(const OptimizerSpec& spec, Parameters<S>& params, const Gradient<S>& grad,
                    OptimizerState<S>& state, const std::vector<bool>& frozen) {
  ACCUMCHECK_ASSERT(params.size() == grad.size());
  ACCUMCHECK_ASSERT(params.size() == state.step_count.size());
  ACCUMCHECK_ASSERT(frozen.empty() || frozen.size() == params.size());
  StepConstantsMemo<S> constants;
  for (std::size_t p = 0; p < params.size(); ++p) {
    // An absent gradient is zeros under missing_gradient_is_zero (it is kept at zero, see tensor.h).
    const bool trainable = frozen.empty() || !frozen[p];
    if (!grad.present[p] && !(spec.missing_gradient_is_zero && trainable)) continue;
    state.step_count[p] += 1;
    const StepConstants<S>& k = constants.get(spec, state.step_count[p], !state.has_momentum_buffer[p]);
    if (spec.kind == OptimizerKind::sgd && spec.momentum.sign() != 0) state.has_momentum_buffer[p] = true;
    Matrix<S>& theta = params.tensors[p];
    for (Eigen::Index i = 0; i < theta.size(); ++i)
      update_element(spec, k, theta(i), grad.tensors[p](i), state.first_moment[p](i), state.second_moment[p](i));
  }
}

}  // namespace accumcheck::models
