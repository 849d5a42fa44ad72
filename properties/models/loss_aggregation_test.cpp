// models/loss_aggregation.h: the five modes on hand-computed cases, the empty-input conventions, and the
// property that window-global coefficients make micro-batching invisible.
#include <span>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/loss_aggregation.h"
#include "models/model.h"
#include "properties/generators/model_generators.h"

namespace accumcheck::models {
namespace {

// The scalar model of the catalogue: w with features 1, no bias; at w = 0 a token with target y has loss y^2/2.
ModelSpec scalar_model() {
  ModelSpec spec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
  spec.frozen = {"bias"};
  return spec;
}

Sequence<Rational> tokens(std::vector<Rational> targets, std::vector<std::uint8_t> mask = {}) {
  Sequence<Rational> seq;
  const auto T = static_cast<Eigen::Index>(targets.size());
  seq.features = Matrix<Rational>::Constant(T, 1, Rational(1));
  seq.targets = Matrix<Rational>(T, 1);
  for (Eigen::Index t = 0; t < T; ++t) seq.targets(t, 0) = targets[static_cast<std::size_t>(t)];
  seq.loss_mask = mask.empty() ? std::vector<std::uint8_t>(targets.size(), 1) : mask;
  return seq;
}

Rational loss_of(const AggregationSpec& agg, const std::vector<Sequence<Rational>>& batch,
                 const NormalisationCounts& scope) {
  const std::span<const Sequence<Rational>> view(batch);
  const auto coef = sequence_coefficients(agg, view, scope);
  return weighted_loss(scalar_model(), zero_parameters<Rational>(scalar_model()), view, std::span<const Rational>(coef));
}

// Catalogue section 2: sequences with 1 token (loss a) and 3 tokens (loss b each).
// a = 2 (y = -2), b = 8 (y = -4).
TEST(LossAggregation, token_mean_of_one_and_three_tokens_is_a_plus_3b_over_4) {
  const std::vector<Sequence<Rational>> batch = {tokens({Rational(-2)}),
                                                 tokens({Rational(-4), Rational(-4), Rational(-4)})};
  const Rational a(2), b(8);
  const std::span<const Sequence<Rational>> view(batch);
  EXPECT_EQ(loss_of({LossAggregation::token_mean}, batch, count_scope(view)), (a + Rational(3) * b) / Rational(4));
  // Per-micro-batch means averaged over G = 2 (the bug of entries 2 and 3): (a + b)/2.
  Rational mean_of_means(0);
  for (const auto& seq : batch) {
    const std::vector<Sequence<Rational>> one = {seq};
    mean_of_means += loss_of({LossAggregation::token_mean}, one, count_scope(std::span<const Sequence<Rational>>(one)));
  }
  EXPECT_EQ(mean_of_means / Rational(2), (a + b) / Rational(2));
}

TEST(LossAggregation, every_mode_matches_its_hand_value) {
  // Token losses: sequence 0 = (2), sequence 1 = (8, 8, 8), sequence 2 = (), sequence 3 = two masked tokens.
  const std::vector<Sequence<Rational>> batch = {
      tokens({Rational(-2)}), tokens({Rational(-4), Rational(-4), Rational(-4)}), tokens({}),
      tokens({Rational(-6), Rational(-6)}, {0, 0})};
  const auto scope = count_scope(std::span<const Sequence<Rational>>(batch));
  EXPECT_EQ(scope, (NormalisationCounts{.valid_token_count = 4, .nonempty_sequence_count = 2}));
  EXPECT_EQ(loss_of({LossAggregation::token_mean}, batch, scope), Rational(26LL, 4LL));          // (2 + 24) / 4
  EXPECT_EQ(loss_of({LossAggregation::seq_mean_token_sum}, batch, scope), Rational(13));         // (2 + 24) / 2
  EXPECT_EQ(loss_of({LossAggregation::seq_mean_token_mean}, batch, scope), Rational(5));         // (2 + 8) / 2
  EXPECT_EQ(loss_of({LossAggregation::seq_mean_token_sum_norm, Rational(8)}, batch, scope),      // 26 / 8
            Rational(13LL, 4LL));
  EXPECT_EQ(loss_of({LossAggregation::sum}, batch, scope), Rational(26));
}

TEST(LossAggregation, a_window_without_valid_tokens_has_zero_objective) {
  const std::vector<Sequence<Rational>> batch = {tokens({}), tokens({Rational(3)}, {0})};
  const auto scope = count_scope(std::span<const Sequence<Rational>>(batch));
  for (LossAggregation mode : kAllLossAggregations)
    for (const auto& seq : batch)
      EXPECT_EQ(sequence_coefficient({mode, Rational(4)}, seq.valid_token_count(), scope) *
                    Rational(seq.valid_token_count()),
                Rational(0))
          << to_string(mode);
  for (LossAggregation mode : {LossAggregation::token_mean, LossAggregation::seq_mean_token_sum,
                               LossAggregation::seq_mean_token_mean})
    EXPECT_EQ(sequence_coefficient({mode}, 0, scope), Rational(0)) << to_string(mode);
}

TEST(LossAggregation, names_round_trip_and_unknown_names_are_rejected) {
  for (LossAggregation mode : kAllLossAggregations) EXPECT_EQ(parse_loss_aggregation(to_string(mode)), mode);
  EXPECT_THROW(parse_loss_aggregation("token_mean"), std::invalid_argument);
  EXPECT_THROW(sequence_coefficient({LossAggregation::seq_mean_token_sum_norm, Rational(0)}, 1,
                                    NormalisationCounts{1, 1}),
               std::invalid_argument);
}

// Splitting a window into micro-batches and summing their gradients, each computed with the window-global
// counts, gives the full-batch gradient exactly: the identity a correct accumulation implementation relies on.
RC_GTEST_PROP(LossAggregation, micro_batches_with_window_global_counts_sum_to_the_full_batch_gradient, ()) {
  const ModelSpec spec = *properties::gen_model_spec();
  const auto params = *properties::gen_parameters(spec);
  const auto batch = *properties::gen_batch(spec);
  const AggregationSpec agg = *properties::gen_aggregation();
  const std::span<const Sequence<Rational>> view(batch);
  const NormalisationCounts scope = count_scope(view);

  Gradient<Rational> full = zero_gradient<Rational>(spec);
  const auto coef = sequence_coefficients(agg, view, scope);
  accumulate_gradient(spec, params, view, std::span<const Rational>(coef), full);

  const auto micro_batch_size = static_cast<std::size_t>(*rc::gen::inRange(1, 4));
  Gradient<Rational> accumulated = zero_gradient<Rational>(spec);
  // At least one micro-batch, as an engine always runs one (an empty one included).
  for (std::size_t start = 0; start < std::max<std::size_t>(batch.size(), 1); start += micro_batch_size) {
    const auto micro = batch.empty() ? view : view.subspan(start, std::min(micro_batch_size, batch.size() - start));
    const auto micro_coef = sequence_coefficients(agg, micro, scope);
    accumulate_gradient(spec, params, micro, std::span<const Rational>(micro_coef), accumulated);
  }
  RC_ASSERT(accumulated == full);
}

}  // namespace
}  // namespace accumcheck::models
