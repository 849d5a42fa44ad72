// Optimizers as PyTorch defines them (torch/optim/sgd.py, adam.py, adamw.py, single-tensor path), in any
// scalar type: exact in Rational except for the documented square root (ScalarTraits<S>::sqrt) and the documented
// rounding of Adam's update (ScalarTraits<S>::round_update, truncation to 2^-64).
//
// For each parameter p whose gradient is present (absent gradients are skipped entirely, as PyTorch skips
// p.grad is None: no decay, no state, no step count):
//   SGD:   d = g + wd p;  if momentum: buf = d on the first step, else buf = mu buf + (1 - dampening) d;
//          d = nesterov ? d + mu buf : buf;  p -= lr d
//   Adam:  t += 1 (per parameter, counted in optimizer steps, never in micro-steps);
//          g = g + wd p (Adam, coupled L2)   or   p = p (1 - lr wd) (AdamW, decoupled);
//          m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//          denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p -= round_update((lr / (1 - b1^t)) m / denom)
// The bias corrections 1 - b^t are computed exactly, then converted to S once.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "models/model_spec.h"
#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::models {

enum class OptimizerKind { sgd, adam, adamw };

std::string_view to_string(OptimizerKind kind);
OptimizerKind parse_optimizer_kind(std::string_view text);  // throws std::invalid_argument

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::sgd;
  Rational lr = Rational::from_canonical(1, 10);
  Rational weight_decay = Rational(0);
  // SGD only.
  Rational momentum = Rational(0);
  Rational dampening = Rational(0);
  bool nesterov = false;
  // Adam and AdamW only.
  Rational beta1 = Rational::from_canonical(9, 10);
  Rational beta2 = Rational::from_canonical(999, 1000);
  Rational eps = Rational::from_canonical(1, 100000000);
  // PyTorch skips a parameter whose gradient is None. Optimizers that run on a flat partition (DeepSpeed's
  // ZeRO, FSDP's flat parameters) see zeros there instead: decay, momentum and the step counter still move.
  // When true, every trainable parameter is stepped every step, a missing gradient counting as zeros.
  bool missing_gradient_is_zero = false;

  friend bool operator==(const OptimizerSpec&, const OptimizerSpec&) = default;
};

// Throws std::invalid_argument naming the field (negative lr, betas outside [0, 1), nesterov without
// momentum, ...): the same checks PyTorch's constructors make.
void validate(const OptimizerSpec& spec);

// Per-parameter optimizer state, in parameter order.
template <class S>
struct OptimizerState {
  std::vector<Matrix<S>> first_moment;   // SGD momentum buffer, Adam exp_avg
  std::vector<Matrix<S>> second_moment;  // Adam exp_avg_sq
  std::vector<long> step_count;          // PyTorch's state['step']: optimizer steps that updated p
  std::vector<bool> has_momentum_buffer;
};

template <class S>
bool operator==(const OptimizerState<S>& a, const OptimizerState<S>& b) {
  return a.step_count == b.step_count && a.has_momentum_buffer == b.has_momentum_buffer &&
         tensor_lists_equal(a.first_moment, b.first_moment) && tensor_lists_equal(a.second_moment, b.second_moment);
}

template <class S>
OptimizerState<S> initial_optimizer_state(const ModelSpec& spec);

// The per-parameter constants of one step, converted to S once: what update_element needs beside the element.
template <class S>
struct StepConstants {
  S lr, weight_decay;
  bool has_decay = false;
  // SGD
  S momentum = S(0), one_minus_dampening = S(1);
  bool has_momentum = false, first_momentum_step = false;
  // Adam, AdamW
  S beta1 = S(0), beta2 = S(0), one_minus_beta1 = S(0), one_minus_beta2 = S(0);
  S bias_correction2_sqrt = S(1), step_size = S(0), eps = S(0), decay_factor = S(1);
  // Exact types: step_size and eps times bias_correction2_sqrt, for the update in one quotient (update_element).
  S step_size_times_root = S(0), eps_times_root = S(0);
};

// Constants for a parameter's step number `step_count` (already incremented: 1 on its first step).
// first_momentum_step: SGD's momentum buffer does not exist yet (it is initialised to d, not decayed).
template <class S>
StepConstants<S> step_constants(const OptimizerSpec& spec, long step_count, bool first_momentum_step);

// step_constants across the tensors of one step: those stepped together share their step count, so their
// constants (powers of the betas, a square root) are computed once, not once a tensor.
template <class S>
class StepConstantsMemo {
 public:
  const StepConstants<S>& get(const OptimizerSpec& spec, long step_count, bool first_momentum_step) {
    if (!value_ || step_count_ != step_count || first_momentum_step_ != first_momentum_step) {
      value_ = step_constants<S>(spec, step_count, first_momentum_step);
      step_count_ = step_count;
      first_momentum_step_ = first_momentum_step;
    }
    return *value_;
  }

 private:
  std::optional<StepConstants<S>> value_;
  long step_count_ = 0;
  bool first_momentum_step_ = false;
};

// The update of one element: theta, and its first and second moment slots, in place. Elementwise by
// construction, so a partitioned optimizer (each rank a slice) equals the whole-tensor step exactly.
template <class S>
void update_element(const OptimizerSpec& spec, const StepConstants<S>& k, S& theta, const S& g, S& first, S& second);

// One optimizer step: params and state updated in place from grad (already unscaled and clipped).
// frozen (parameter_frozen_mask of the spec, or empty for none) matters only under missing_gradient_is_zero:
// frozen parameters are never in the optimizer, whatever the policy.
template <class S>
void optimizer_step(const OptimizerSpec& spec, Parameters<S>& params, const Gradient<S>& grad,
                    OptimizerState<S>& state, const std::vector<bool>& frozen = {});

}  // namespace accumcheck::models

#include "models/optimizer-inl.h"
