// Optimizer names and validation.
#include "models/optimizer.h"

#include <stdexcept>
#include <string>
#include <string_view>

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

namespace {

// "optimizer: <field> = <value><what>", built out of line on the cold path so that validate's checks inline (it
// runs twice a trial).
[[noreturn, gnu::cold]] void throw_optimizer(std::string_view field, const Rational& value, std::string_view what) {
  throw std::invalid_argument("optimizer: " + std::string(field) + " = " + value.to_string() + std::string(what));
}

[[noreturn, gnu::cold]] void throw_nesterov() {
  throw std::invalid_argument("optimizer: nesterov needs a positive momentum and zero dampening");
}

}  // namespace

void validate(const OptimizerSpec& spec) {
  if (spec.lr.sign() < 0) throw_optimizer("lr", spec.lr, " is negative");
  if (spec.weight_decay.sign() < 0) throw_optimizer("weight_decay", spec.weight_decay, " is negative");
  if (spec.kind == OptimizerKind::sgd) {
    if (spec.momentum.sign() < 0) throw_optimizer("momentum", spec.momentum, " is negative");
    if (spec.nesterov && (spec.momentum.sign() <= 0 || spec.dampening.sign() != 0)) throw_nesterov();
    return;
  }
  if (spec.beta1.sign() < 0 || spec.beta1 >= Rational(1)) throw_optimizer("beta1", spec.beta1, " is outside [0, 1)");
  if (spec.beta2.sign() < 0 || spec.beta2 >= Rational(1)) throw_optimizer("beta2", spec.beta2, " is outside [0, 1)");
  if (spec.eps.sign() <= 0) throw_optimizer("eps", spec.eps, " must be positive");
}

}  // namespace accumcheck::models
