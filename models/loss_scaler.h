// Loss scaling for low-precision float training: static, or dynamic with overflow skip, following
// torch.cuda.amp.GradScaler (growth_factor 2, backoff_factor 1/2, growth_interval 2000) and the same rule in
// DeepSpeed's DynamicLossScaler.
//
// Use: multiply the loss by scale() before backward (equivalently each sequence coefficient); before the
// optimizer step call unscale_or_skip(grad): if any gradient element is inf or NaN the step must be skipped
// (returns false, grads untouched) and, when dynamic, the scale halves; otherwise grads are divided by the
// scale and after growth_interval consecutive good steps the scale doubles. Exact types never overflow, so
// for them this is an exact multiply and divide.
#pragma once

#include <stdexcept>

#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::models {

struct LossScalerSpec {
  Rational initial_scale = Rational(65536);
  bool dynamic = true;
  int growth_interval = 2000;
  Rational growth_factor = Rational(2);
  Rational backoff_factor = Rational(1LL, 2LL);
  Rational min_scale = Rational(1);

  friend bool operator==(const LossScalerSpec&, const LossScalerSpec&) = default;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerSpec& spec) : spec_(spec), scale_(spec.initial_scale) {
    if (spec.initial_scale.sign() <= 0) throw std::invalid_argument("loss scaler: initial_scale must be positive");
    if (spec.growth_interval < 1) throw std::invalid_argument("loss scaler: growth_interval must be >= 1");
  }

  const Rational& scale() const { return scale_; }
  int good_step_count() const { return good_steps_; }
  long skipped_step_count() const { return skipped_steps_; }

  // An overflow seen elsewhere (e.g. in a 16-bit copy of the gradient): the step is skipped, the scale backs off.
  void record_overflow() {
    ++skipped_steps_;
    good_steps_ = 0;
    if (spec_.dynamic) {
      Rational next = scale_ * spec_.backoff_factor;
      scale_ = next < spec_.min_scale ? spec_.min_scale : next;
    }
  }

  // True when the step may proceed (grads now unscaled); false when it must be skipped.
  template <class S>
  bool unscale_or_skip(Gradient<S>& grad) {
    bool finite = true;
    for (std::size_t p = 0; p < grad.size() && finite; ++p) {
      if (!grad.present[p]) continue;
      for (Eigen::Index i = 0; i < grad.tensors[p].size(); ++i)
        if (!ScalarTraits<S>::is_finite(grad.tensors[p](i))) {
          finite = false;
          break;
        }
    }
    if (!finite) {
      record_overflow();
      return false;
    }
    const S inverse = from_rational<S>(Rational(1) / scale_);
    for (std::size_t p = 0; p < grad.size(); ++p)
      if (grad.present[p]) grad.tensors[p] *= inverse;
    if (spec_.dynamic && ++good_steps_ == spec_.growth_interval) {
      scale_ *= spec_.growth_factor;
      good_steps_ = 0;
    }
    return true;
  }

 private:
  LossScalerSpec spec_;
  Rational scale_;
  int good_steps_ = 0;
  long skipped_steps_ = 0;
};

}  // namespace accumcheck::models
