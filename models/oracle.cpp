// TrainingSpec validation.
#include "models/oracle.h"

namespace accumcheck::models {

void validate(const TrainingSpec& spec) {
  validate(spec.model);
  validate(spec.optimizer);
  if (spec.aggregation.mode == LossAggregation::seq_mean_token_sum_norm && spec.aggregation.norm_constant.sign() <= 0)
    throw std::invalid_argument("loss aggregation seq-mean-token-sum-norm: C = " +
                                spec.aggregation.norm_constant.to_string() + " must be positive");
  if (spec.max_grad_norm && spec.max_grad_norm->sign() <= 0)
    throw std::invalid_argument("max_grad_norm = " + spec.max_grad_norm->to_string() + " must be positive");
}

}  // namespace accumcheck::models
