// Comparison of results: the places a mismatch names, which are written only where values differ (Where).
#include "properties/comparison.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "models/fast_rational.h"
#include "models/model.h"

namespace accumcheck::properties {
namespace {

using models::Rational;

const models::ModelSpec kSpec{.kind = models::ModelKind::linear, .input_size = 2, .output_size = 1};

// A two-step result of the linear model, every value distinct.
sim::RunResult result() {
  sim::RunResult r;
  for (int s = 0; s < 2; ++s) {
    sim::StepOutcome step;
    step.applied = true;
    step.gradient = models::zero_gradient<Rational>(kSpec);
    step.gradient.tensors[0](0, 1) = Rational(s + 1LL, 4LL);
    step.grad_norm = Rational(s + 3LL);
    r.steps.push_back(step);
  }
  r.parameters = models::zero_parameters<Rational>(kSpec);
  r.parameters.tensors[1](0, 0) = Rational(5);
  r.optimizer_state = models::initial_optimizer_state<Rational>(kSpec);
  r.optimizer_state.second_moment[0](0, 0) = Rational(1LL, 8LL);
  return r;
}

std::vector<std::string> places(const std::vector<Mismatch>& mismatches) {
  std::vector<std::string> out;
  for (const auto& m : mismatches) out.push_back(m.where);
  return out;
}

TEST(Comparison, equal_runs_have_no_mismatch) {
  EXPECT_TRUE(compare_runs(kSpec, result(), result()).empty());
}

TEST(Comparison, each_difference_is_named_by_its_step_or_final_part_and_element) {
  const sim::RunResult expected = result();
  sim::RunResult actual = result();
  actual.steps[0].applied = false;
  actual.steps[1].gradient.tensors[0](0, 1) = Rational(7);
  actual.steps[1].grad_norm = Rational(9);
  actual.parameters.tensors[1](0, 0) = Rational(6);
  actual.optimizer_state.first_moment[0](0, 0) = Rational(1);
  actual.optimizer_state.second_moment[0](0, 0) = Rational(0);
  const auto mismatches = compare_runs(kSpec, expected, actual);
  EXPECT_EQ(places(mismatches), (std::vector<std::string>{"step 0 / applied", "step 1 / gradient / weight[0,1]",
                                                          "step 1 / grad_norm", "final / parameters / bias[0,0]",
                                                          "final / first_moment / weight[0,0]",
                                                          "final / second_moment / weight[0,0]"}));
  EXPECT_EQ(mismatches[1].expected, Rational(1LL, 2LL));
  EXPECT_EQ(mismatches[1].actual, Rational(7));
}

TEST(Comparison, a_tolerated_difference_goes_to_the_gap_under_its_name) {
  std::vector<Mismatch> out;
  RoundingGap gap;
  compare_value(Where(3, "grad_norm"), Rational(1), Rational(1) + models::pow2(-40), out, models::pow2(-30), &gap);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(gap.where, "step 3 / grad_norm");
  EXPECT_EQ(gap.gap, models::pow2(-40));
  compare_value("final / step_count / bias", Rational(2), Rational(3), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].where, "final / step_count / bias");
  EXPECT_EQ(Where(12, "clip_coefficient").str(), "step 12 / clip_coefficient");
  EXPECT_EQ(Where("final / parameters").str(), "final / parameters");
}

// The oracle's values in FastRational against a result's in Rational: the same verdicts as Rational against
// Rational, inline and promoted values alike, with the expected value converted only for a mismatch.
TEST(Comparison, the_oracles_fast_rational_values_compare_as_their_rational_values) {
  const Rational promoted = Rational::parse("123456789012345678901234567890/7");  // beyond two int64 words
  std::vector<models::Matrix<Rational>> exact = models::zero_parameters<Rational>(kSpec).tensors;
  exact[0](0, 0) = Rational(3LL, 4LL);
  exact[0](0, 1) = promoted;
  exact[1](0, 0) = Rational(-5);
  std::vector<models::Matrix<models::FastRational>> fast;
  for (const auto& t : exact) fast.push_back(t.unaryExpr([](const Rational& q) { return models::FastRational(q); }));
  ASSERT_FALSE(fast[0](0, 1).inline_parts());

  std::vector<Mismatch> out;
  compare_tensors("final / parameters", kSpec, fast, exact, out);
  EXPECT_TRUE(out.empty());

  std::vector<models::Matrix<Rational>> actual = exact;
  actual[0](0, 0) = Rational(1LL, 4LL);          // inline against inline
  actual[0](0, 1) = promoted + Rational(1);      // promoted against promoted
  actual[1](0, 0) = promoted;                    // inline against promoted
  std::vector<Mismatch> from_fast, from_exact;
  compare_tensors(Where(1, "gradient"), kSpec, fast, actual, from_fast);
  compare_tensors(Where(1, "gradient"), kSpec, exact, actual, from_exact);
  EXPECT_EQ(places(from_fast), (std::vector<std::string>{"step 1 / gradient / weight[0,0]", "step 1 / gradient / weight[0,1]",
                                                         "step 1 / gradient / bias[0,0]"}));
  ASSERT_EQ(from_fast.size(), from_exact.size());
  for (std::size_t i = 0; i < from_fast.size(); ++i) {
    EXPECT_EQ(from_fast[i].where, from_exact[i].where);
    EXPECT_EQ(from_fast[i].expected, from_exact[i].expected);
    EXPECT_EQ(from_fast[i].actual, from_exact[i].actual);
  }
  EXPECT_EQ(from_fast[1].expected, promoted);

  // Within a tolerance: no mismatch, the difference in the gap.
  std::vector<models::Matrix<Rational>> near = exact, tolerance = models::zero_parameters<Rational>(kSpec).tensors;
  near[1](0, 0) = Rational(-5) + models::pow2(-40);
  tolerance[1](0, 0) = models::pow2(-30);
  RoundingGap gap;
  out.clear();
  compare_tensors("final / parameters", kSpec, fast, near, out, &tolerance, &gap);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(gap.where, "final / parameters / bias[0,0]");
  EXPECT_EQ(gap.gap, models::pow2(-40));
}

}  // namespace
}  // namespace accumcheck::properties
