// Loss aggregation coefficients.
#include "models/loss_aggregation.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "models/assert.h"

namespace accumcheck::models {

std::string_view to_string(LossAggregation mode) {
  switch (mode) {
    case LossAggregation::token_mean: return "token-mean";
    case LossAggregation::seq_mean_token_sum: return "seq-mean-token-sum";
    case LossAggregation::seq_mean_token_mean: return "seq-mean-token-mean";
    case LossAggregation::seq_mean_token_sum_norm: return "seq-mean-token-sum-norm";
    case LossAggregation::sum: return "sum";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown LossAggregation");
}

LossAggregation parse_loss_aggregation(std::string_view text) {
  for (LossAggregation mode : kAllLossAggregations)
    if (to_string(mode) == text) return mode;
  throw std::invalid_argument("unknown loss aggregation '" + std::string(text) +
                              "' (expected token-mean, seq-mean-token-sum, seq-mean-token-mean, "
                              "seq-mean-token-sum-norm or sum)");
}

Rational sequence_coefficient(const AggregationSpec& spec, int sequence_valid_token_count,
                              const NormalisationCounts& scope) {
  ACCUMCHECK_ASSERT(sequence_valid_token_count >= 0);
  ACCUMCHECK_ASSERT(scope.valid_token_count >= sequence_valid_token_count);
  switch (spec.mode) {
    case LossAggregation::token_mean:
      if (scope.valid_token_count == 0) return Rational(0);
      return Rational(1LL, static_cast<long long>(scope.valid_token_count));
    case LossAggregation::seq_mean_token_sum:
      if (sequence_valid_token_count == 0) return Rational(0);
      return Rational(1LL, static_cast<long long>(scope.nonempty_sequence_count));
    case LossAggregation::seq_mean_token_mean:
      if (sequence_valid_token_count == 0) return Rational(0);
      return Rational(1LL, static_cast<long long>(scope.nonempty_sequence_count) * sequence_valid_token_count);
    case LossAggregation::seq_mean_token_sum_norm:
      if (spec.norm_constant.sign() <= 0)
        throw std::invalid_argument("seq-mean-token-sum-norm: the constant C = " + spec.norm_constant.to_string() +
                                    " must be positive");
      if (std::int64_t n = 0, d = 1; spec.norm_constant.fits_int64(n, d))
        return Rational::from_canonical(d, n);  // 1 / (n/d) with n > 0 and gcd(n, d) = 1: d/n, in lowest terms
      return Rational(1) / spec.norm_constant;
    case LossAggregation::sum: return Rational(1);
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown LossAggregation");
}

}  // namespace accumcheck::models
