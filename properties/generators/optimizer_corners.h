// The optimizer specs tests step element by element: the generator's two (SGD with momentum and decay, Adam with its
// dyadic betas) and the corners around them (plain SGD, dampening, Nesterov, AdamW, missing gradients as zeros).
#pragma once

#include <vector>

#include "models/optimizer.h"

namespace accumcheck::properties {

inline std::vector<models::OptimizerSpec> optimizer_corners() {
  using models::OptimizerKind;
  using models::OptimizerSpec;
  using models::Rational;
  return {
      OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1, 8)},
      OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1, 2), .weight_decay = Rational(1, 4), .momentum = Rational(1, 2)},
      OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1, 4), .weight_decay = Rational(1, 16),
                    .momentum = Rational(1, 2), .dampening = Rational(1, 4)},
      OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1, 10), .momentum = Rational(9, 10), .dampening = Rational(1, 3)},
      OptimizerSpec{.kind = OptimizerKind::sgd, .lr = Rational(1, 10), .momentum = Rational(9, 10), .nesterov = true},
      OptimizerSpec{.kind = OptimizerKind::adam, .lr = Rational(1, 2), .weight_decay = Rational(1, 4),
                    .beta1 = Rational(1, 2), .beta2 = Rational(3, 4), .eps = Rational(1, 8)},
      OptimizerSpec{.kind = OptimizerKind::adam, .lr = Rational(1, 4), .weight_decay = Rational(1, 32)},
      OptimizerSpec{.kind = OptimizerKind::adamw, .lr = Rational(1, 8), .weight_decay = Rational(1, 4)},
      OptimizerSpec{.kind = OptimizerKind::adamw, .lr = Rational(1, 8), .weight_decay = Rational(1, 10),
                    .missing_gradient_is_zero = true},
  };
}

}  // namespace accumcheck::properties
