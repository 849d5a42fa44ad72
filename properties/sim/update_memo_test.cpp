// sim/update_memo.h: an element's update is answered only from a stored one with equal spec, constants, parameter,
// gradient and moments, with the values models::update_element leaves; anything that differs is computed afresh;
// outside an ExactMemoScope, or in another scalar, nothing is memoised; the memo stops storing at its bound.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "properties/generators/optimizer_corners.h"
#include "sim/exact_memos.h"
#include "sim/update_memo.h"

namespace accumcheck::sim {
namespace {

using models::FastRational;
using models::OptimizerKind;
using models::OptimizerSpec;
using models::Rational;

// A value of one of the forms a run holds: a small dyadic, a token count's fraction, or one past int64 (Adam's 2^-64
// grid, a long sum).
FastRational value(std::mt19937_64& rng) {
  const long long n = static_cast<long long>(rng() % 2001) - 1000;
  switch (rng() % 3) {
    case 0: return FastRational(n, 1LL << (rng() % 10));
    case 1: return FastRational(n, static_cast<long long>(3 + rng() % 40));
    default: return FastRational(n, 7) + FastRational(Rational(n) / models::pow2(70 + static_cast<int>(rng() % 30)));
  }
}

struct Element {
  FastRational theta, g, first, second;
};

Element element(std::mt19937_64& rng, OptimizerKind kind) {
  Element e{value(rng), value(rng), value(rng), value(rng)};
  if (kind != OptimizerKind::sgd) e.second = e.second * e.second;  // Adam's second moment is never negative
  return e;
}

Element direct(const OptimizerSpec& spec, const models::StepConstants<FastRational>& k, Element e) {
  models::update_element(spec, k, e.theta, e.g, e.first, e.second);
  return e;
}

bool same(const Element& a, const Element& b) {
  return a.theta == b.theta && a.g == b.g && a.first == b.first && a.second == b.second;
}

// One update through ElementUpdate, on a copy (other objects, equal values).
Element through(const OptimizerSpec& spec, const models::StepConstants<FastRational>& k, Element e) {
  const ElementUpdate<FastRational> update(spec, k);
  update(e.theta, e.g, e.first, e.second);
  return e;
}

TEST(UpdateMemo, an_equal_element_is_answered_with_what_the_update_leaves) {
  std::mt19937_64 rng(1);
  int checked = 0;
  for (const OptimizerSpec& spec : properties::optimizer_corners())
    for (long step = 1; step <= 3; ++step)
      for (const bool first_momentum : {true, false}) {
        const auto k = models::step_constants<FastRational>(spec, step, first_momentum);
        for (int i = 0; i < 40; ++i) {
          ExactMemos memos;
          const ExactMemoScope scope(&memos);
          const Element e = element(rng, spec.kind);
          const Element expected = direct(spec, k, e);
          EXPECT_TRUE(same(through(spec, k, e), expected)) << to_string(spec.kind) << " step " << step;
          EXPECT_TRUE(same(through(spec, k, e), expected)) << to_string(spec.kind) << " step " << step;
          EXPECT_EQ(memos.update.counts().misses, 1u);
          EXPECT_EQ(memos.update.counts().hits, 1u);
          checked += 1;
        }
      }
  EXPECT_EQ(checked, static_cast<int>(properties::optimizer_corners().size()) * 3 * 2 * 40);
}

TEST(UpdateMemo, an_element_or_constant_that_differs_is_computed_afresh) {
  std::mt19937_64 rng(2);
  const FastRational tiny = FastRational(Rational(1) / models::pow2(80));
  for (const OptimizerSpec& spec : properties::optimizer_corners()) {
    const auto k = models::step_constants<FastRational>(spec, 2, false);
    OptimizerSpec nesterov_flipped = spec;
    nesterov_flipped.nesterov = spec.kind == OptimizerKind::sgd && spec.momentum.sign() != 0 && !spec.nesterov;
    for (int i = 0; i < 40; ++i) {
      const Element e = element(rng, spec.kind);
      std::vector<std::pair<std::string, Element>> changed = {
          {"theta", {e.theta + tiny, e.g, e.first, e.second}},
          {"g", {e.theta, e.g - tiny, e.first, e.second}},
          {"first", {e.theta, e.g, e.first + FastRational(1, 3), e.second}},
          {"second", {e.theta, e.g, e.first, e.second + tiny}},
      };
      // A promoted value changed by 2^64 over its own denominator: the same lowest limbs and denominator, so the
      // same hash, and only the full comparison tells it apart.
      auto high_limb = [](const FastRational& x) {
        return x + FastRational(models::pow2(64) / Rational(x.denominator()));
      };
      if (!e.g.inline_parts()) changed.push_back({"g in a high limb", {e.theta, high_limb(e.g), e.first, e.second}});
      if (!e.theta.inline_parts()) changed.push_back({"theta in a high limb", {high_limb(e.theta), e.g, e.first, e.second}});
      for (const auto& [what, other] : changed) {
        ExactMemos memos;
        const ExactMemoScope scope(&memos);
        through(spec, k, e);
        EXPECT_TRUE(same(through(spec, k, other), direct(spec, k, other))) << what;
        EXPECT_EQ(memos.update.counts().hits, 0u) << what;
      }
      // Other constants (another step, the momentum buffer's first step) and another spec.
      ExactMemos memos;
      const ExactMemoScope scope(&memos);
      through(spec, k, e);
      const auto k3 = models::step_constants<FastRational>(spec, 3, false);
      const auto k_first = models::step_constants<FastRational>(spec, 2, true);
      EXPECT_TRUE(same(through(spec, k3, e), direct(spec, k3, e)));
      EXPECT_TRUE(same(through(spec, k_first, e), direct(spec, k_first, e)));
      if (nesterov_flipped.nesterov != spec.nesterov) {
        EXPECT_TRUE(same(through(nesterov_flipped, k, e), direct(nesterov_flipped, k, e)));
      }
      // Exactly one of the two other constants equals k, and is answered: SGD's do not depend on the step, and
      // Adam's not on the momentum buffer's first step. The flipped spec is another spec.
      EXPECT_EQ(memos.update.counts().hits, 1u) << to_string(spec.kind);
    }
  }
}

TEST(UpdateMemo, nothing_is_memoised_outside_a_scope_or_in_another_scalar) {
  const OptimizerSpec spec = properties::optimizer_corners()[5];  // Adam
  const auto k = models::step_constants<FastRational>(spec, 1, true);
  std::mt19937_64 rng(3);
  const Element e = element(rng, spec.kind);
  ExactMemos memos;
  EXPECT_TRUE(same(through(spec, k, e), direct(spec, k, e)));  // no scope
  EXPECT_EQ(memos.update.counts().misses, 0u);
  {
    const ExactMemoScope scope(&memos);
    const auto kd = models::step_constants<double>(spec, 1, true);
    double theta = 0.5, g = 0.25, first = 0, second = 0;
    const ElementUpdate<double> update(spec, kd);
    update(theta, g, first, second);
    EXPECT_EQ(memos.update.counts().misses + memos.update.counts().hits, 0u);
  }
}

TEST(UpdateMemo, it_stores_nothing_past_its_bound_and_still_answers_what_it_holds) {
  const OptimizerSpec spec = properties::optimizer_corners()[0];  // plain SGD
  const auto k = models::step_constants<FastRational>(spec, 1, true);
  ExactMemos memos;
  const ExactMemoScope scope(&memos);
  const auto n = static_cast<long long>(UpdateMemo::kEntriesMax) + 10;
  auto at = [](long long i) { return Element{FastRational(i, 3), FastRational(1, 2), FastRational(0), FastRational(0)}; };
  for (long long i = 0; i < n; ++i) through(spec, k, at(i));
  ASSERT_EQ(memos.update.counts().misses, static_cast<std::uint64_t>(n));
  EXPECT_TRUE(same(through(spec, k, at(0)), direct(spec, k, at(0))));  // stored
  EXPECT_EQ(memos.update.counts().hits, 1u);
  EXPECT_TRUE(same(through(spec, k, at(n - 1)), direct(spec, k, at(n - 1))));  // past the bound
  EXPECT_EQ(memos.update.counts().hits, 1u);
}

}  // namespace
}  // namespace accumcheck::sim
