// Optimizer names and validation.
#include "models/optimizer.h"

#include <stdexcept>
#include <string>

#include "models/assert.h"

namespace accumcheck::models {

std::string_view to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown OptimizerKind");
}

OptimizerKind parse_optimizer_kind(std::string_view text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "adam") return OptimizerKind::adam;
  if (text == "adamw") return OptimizerKind::adamw;
  throw std::invalid_argument("unknown optimizer '" + std::string(text) + "' (expected sgd, adam or adamw)");
}

void validate(const OptimizerSpec& spec) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("optimizer: " + what); };
  if (spec.lr.sign() < 0) fail("lr = " + spec.lr.to_string() + " is negative");
  if (spec.weight_decay.sign() < 0) fail("weight_decay = " + spec.weight_decay.to_string() + " is negative");
  if (spec.kind == OptimizerKind::sgd) {
    if (spec.momentum.sign() < 0) fail("momentum = " + spec.momentum.to_string() + " is negative");
    if (spec.nesterov && (spec.momentum.sign() <= 0 || spec.dampening.sign() != 0))
      fail("nesterov needs a positive momentum and zero dampening");
    return;
  }
  if (spec.beta1.sign() < 0 || spec.beta1 >= Rational(1)) fail("beta1 = " + spec.beta1.to_string() + " is outside [0, 1)");
  if (spec.beta2.sign() < 0 || spec.beta2 >= Rational(1)) fail("beta2 = " + spec.beta2.to_string() + " is outside [0, 1)");
  if (spec.eps.sign() <= 0) fail("eps = " + spec.eps.to_string() + " must be positive");
}

}  // namespace accumcheck::models
