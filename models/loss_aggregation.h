// Loss aggregation modes (verl's loss_agg_mode vocabulary; catalogue section 4), as sequence coefficients.
//
// Every mode is J = sum_i c_i sum_t M_it l_it with a coefficient c_i per sequence that depends only on the
// sequence's valid-token count T_i and on counts over a normalisation scope:
//   token-mean               c_i = 1 / N_tokens                         (N_tokens = sum_i T_i over the scope)
//   seq-mean-token-sum       c_i = 1 / N_seqs        if T_i > 0, else 0 (N_seqs = sequences with T_i > 0)
//   seq-mean-token-mean      c_i = 1 / (N_seqs T_i)  if T_i > 0, else 0
//   seq-mean-token-sum-norm  c_i = 1 / C                                (C a fixed constant, no count)
//   sum                      c_i = 1
// The correct scope is the whole optimizer-step batch: every micro-batch on every rank. A framework that
// normalises per micro-batch or per rank is this same formula with a smaller scope, which is how sim/ models
// that family of bugs.
//
// Empty input: a sequence with no valid tokens contributes nothing and is not counted as a sequence. When the
// scope has no valid tokens (token-mean) or no non-empty sequence (seq-mean-*), the objective is defined as 0
// with a zero gradient (c_i = 0), the limit of the usual masked mean with a clamped denominator, instead of 0/0.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::models {

enum class LossAggregation {
  token_mean,
  seq_mean_token_sum,
  seq_mean_token_mean,
  seq_mean_token_sum_norm,
  sum,
};

inline constexpr LossAggregation kAllLossAggregations[] = {
    LossAggregation::token_mean, LossAggregation::seq_mean_token_sum, LossAggregation::seq_mean_token_mean,
    LossAggregation::seq_mean_token_sum_norm, LossAggregation::sum};

// "token-mean", "seq-mean-token-sum", ... as verl spells them.
std::string_view to_string(LossAggregation mode);
// Throws std::invalid_argument naming the text and the accepted names.
LossAggregation parse_loss_aggregation(std::string_view text);

struct AggregationSpec {
  LossAggregation mode = LossAggregation::token_mean;
  // C of seq-mean-token-sum-norm (Dr. GRPO); must be positive. Unused by the other modes.
  Rational norm_constant = Rational(1);

  friend bool operator==(const AggregationSpec&, const AggregationSpec&) = default;
};

// Counts over a normalisation scope.
struct NormalisationCounts {
  long valid_token_count = 0;
  long nonempty_sequence_count = 0;

  NormalisationCounts& operator+=(const NormalisationCounts& other) {
    valid_token_count += other.valid_token_count;
    nonempty_sequence_count += other.nonempty_sequence_count;
    return *this;
  }
  friend bool operator==(const NormalisationCounts&, const NormalisationCounts&) = default;
};

template <class S>
NormalisationCounts count_scope(std::span<const Sequence<S>> sequences) {
  NormalisationCounts counts;
  for (const auto& seq : sequences) {
    const int valid = seq.valid_token_count();
    counts.valid_token_count += valid;
    counts.nonempty_sequence_count += (valid > 0);
  }
  return counts;
}

// c_i, exactly. Throws std::invalid_argument if norm_constant is not positive.
Rational sequence_coefficient(const AggregationSpec& spec, int sequence_valid_token_count,
                              const NormalisationCounts& scope);

// c_i for each sequence, converted once from the exact value into S (for float types: the correctly rounded
// coefficient, as a framework computing 1/N in that type would get).
template <class S>
std::vector<S> sequence_coefficients(const AggregationSpec& spec, std::span<const Sequence<S>> sequences,
                                     const NormalisationCounts& scope) {
  std::vector<S> out;
  out.reserve(sequences.size());
  for (const auto& seq : sequences)
    out.push_back(from_rational<S>(sequence_coefficient(spec, seq.valid_token_count(), scope)));
  return out;
}

}  // namespace accumcheck::models
