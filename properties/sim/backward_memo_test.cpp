// sim/backward_memo.h: a stored call answers only a call whose every input is equal, with the gradient that call
// computes; an input that differs anywhere is computed afresh; the memo is read only inside a scope, scopes nest,
// and it stops storing at its bound.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/generator.h"
#include "sim/backward_memo.h"
#include "sim/exact_memos.h"
#include "sim/convert.h"
#include "sim/rank_gradients.h"

namespace accumcheck::sim {
namespace {

using models::FastRational;

struct Inputs {
  models::ModelSpec spec;
  models::Parameters<FastRational> params;
  std::vector<models::Sequence<FastRational>> sequences;
  std::vector<FastRational> coefficients;
};

// A generated scenario's model and parameters, and the sequences of its first step's micro-batches on every rank,
// each with a coefficient that is not a power of two. Every model dimension up to 8 on odd seeds, so that tensors
// and sequences larger than a hash's sample are common.
Inputs inputs_of(std::uint64_t seed) {
  fuzz::GeneratorOptions options;
  if (seed % 2 == 1)
    options.linear_input_size_max = options.mlp_input_size_max = options.hidden_size_max = options.output_size_max =
        options.vocab_size_max = options.embed_size_max = 8;
  const Scenario s = fuzz::generate_scenario(seed, options);
  Inputs in{s.training.model, to_scalar<FastRational>(s.initial_parameters), {}, {}};
  for (const auto& mb : s.steps.front().micro_batches)
    for (const auto& rank : mb.rank_sequences)
      for (const auto& seq : rank) {
        in.sequences.push_back(to_scalar<FastRational>(seq));
        in.coefficients.push_back(FastRational(1, static_cast<long long>(3 + in.sequences.size())));
      }
  return in;
}

models::Gradient<FastRational> direct(const Inputs& in) {
  models::Gradient<FastRational> grad = models::zero_gradient<FastRational>(in.spec);
  models::accumulate_gradient(in.spec, in.params, std::span<const models::Sequence<FastRational>>(in.sequences),
                              std::span<const FastRational>(in.coefficients), grad);
  return grad;
}

// Asks the memo for `in`, counting the calls that compute; the gradient starts with a value the answer must overwrite.
models::Gradient<FastRational> ask(BackwardMemo& memo, const Inputs& in, int& computed) {
  models::Gradient<FastRational> grad = models::zero_gradient<FastRational>(in.spec);
  for (auto& t : grad.tensors) t.setConstant(FastRational(7, 5));
  memo.reuse_or_compute(in.spec, in.params, in.sequences, in.coefficients, grad, [&](models::Gradient<FastRational>& out) {
    computed += 1;
    out = direct(in);
  });
  return grad;
}

TEST(BackwardMemo, an_equal_call_is_answered_with_the_gradient_it_would_compute) {
  int answered = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    BackwardMemo memo;
    const Inputs first = inputs_of(seed);
    const Inputs copy = first;  // equal values in other objects, as a variant's run has
    int computed = 0;
    const auto expected = direct(first);
    EXPECT_TRUE(ask(memo, first, computed) == expected) << "seed " << seed;
    EXPECT_TRUE(ask(memo, copy, computed) == expected) << "seed " << seed;
    EXPECT_EQ(computed, 1) << "seed " << seed;
    EXPECT_EQ(memo.counts().hits, 1u);
    EXPECT_EQ(memo.counts().misses, 1u);
    answered += 1;
  }
  EXPECT_EQ(answered, 200);
}

// One input changed in one place; false where the scenario has nothing of that kind to change.
using Mutation = std::function<bool(Inputs&)>;

const std::vector<std::pair<std::string, Mutation>>& mutations() {
  static const std::vector<std::pair<std::string, Mutation>> all = {
      {"a parameter value", [](Inputs& in) {
         auto& t = in.params.tensors.back();
         t(t.size() - 1) = t(t.size() - 1) + FastRational(1, 3);
         return true;
       }},
      {"the first parameter value", [](Inputs& in) {
         in.params.tensors.front()(0) = in.params.tensors.front()(0) - FastRational(1, 5);
         return true;
       }},
      // Values next to the last, in a large tensor or sequence: where a hash that reads only some values would not
      // look, so only the full comparison tells these apart.
      {"the parameter value before the last of a large tensor", [](Inputs& in) {
         for (auto& t : in.params.tensors)
           if (t.size() > 8) {
             t(t.size() - 2) = t(t.size() - 2) + FastRational(1, 3);
             return true;
           }
         return false;
       }},
      {"the feature before the last of a long sequence", [](Inputs& in) {
         for (auto& seq : in.sequences)
           if (seq.features.size() > 16) {
             seq.features(seq.features.size() - 2) = seq.features(seq.features.size() - 2) + FastRational(1);
             return true;
           }
         return false;
       }},
      {"a coefficient", [](Inputs& in) {
         if (in.coefficients.empty()) return false;
         in.coefficients.back() = in.coefficients.back() * FastRational(2);
         return true;
       }},
      {"a feature in the middle", [](Inputs& in) {
         for (auto& seq : in.sequences)
           if (seq.features.size() > 2) {
             seq.features(seq.features.size() / 2) = seq.features(seq.features.size() / 2) + FastRational(1);
             return true;
           }
         return false;
       }},
      {"a target in the middle", [](Inputs& in) {
         for (auto& seq : in.sequences)
           if (seq.targets.size() > 2) {
             seq.targets(seq.targets.size() / 2) = seq.targets(seq.targets.size() / 2) - FastRational(1, 2);
             return true;
           }
         return false;
       }},
      {"the last token's loss mask", [](Inputs& in) {
         for (auto& seq : in.sequences)
           if (!seq.loss_mask.empty()) {
             seq.loss_mask.back() = seq.loss_mask.back() ? 0 : 1;
             return true;
           }
         return false;
       }},
      {"the last token's id", [](Inputs& in) {
         if (in.spec.kind != models::ModelKind::tied_embedding || in.spec.vocab_size < 2) return false;
         for (auto& seq : in.sequences)
           if (!seq.token_ids.empty()) {
             seq.token_ids.back() = (seq.token_ids.back() + 1) % in.spec.vocab_size;
             return true;
           }
         return false;
       }},
      {"the last token's expert", [](Inputs& in) {
         if (in.spec.expert_count < 2) return false;
         for (auto& seq : in.sequences)
           if (!seq.expert_index.empty()) {
             seq.expert_index.back() = (seq.expert_index.back() + 1) % in.spec.expert_count;
             return true;
           }
         return false;
       }},
      {"a frozen parameter", [](Inputs& in) {
         const auto names = models::parameter_names(in.spec);
         for (const auto& name : names)
           if (std::find(in.spec.frozen.begin(), in.spec.frozen.end(), name) == in.spec.frozen.end()) {
             in.spec.frozen.push_back(name);
             return true;
           }
         return false;
       }},
      {"a sequence dropped", [](Inputs& in) {
         if (in.sequences.empty()) return false;
         in.sequences.pop_back();
         in.coefficients.pop_back();
         return true;
       }},
  };
  return all;
}

TEST(BackwardMemo, an_input_that_differs_anywhere_is_computed_afresh) {
  for (const auto& [what, mutate] : mutations()) {
    int applied = 0;
    for (std::uint64_t seed = 0; seed < 120; ++seed) {
      BackwardMemo memo;
      const Inputs original = inputs_of(seed);
      Inputs changed = original;
      if (!mutate(changed)) continue;
      int computed = 0;
      ask(memo, original, computed);
      EXPECT_TRUE(ask(memo, changed, computed) == direct(changed)) << what << ", seed " << seed;
      EXPECT_EQ(computed, 2) << what << ", seed " << seed;
      EXPECT_EQ(memo.counts().hits, 0u) << what << ", seed " << seed;
      applied += 1;
    }
    EXPECT_GE(applied, 10) << what;
  }
}

TEST(BackwardMemo, rank_gradient_reads_the_memo_of_the_innermost_scope_only) {
  const Inputs in = inputs_of(3);
  const FastRational one(1);
  auto call = [&] {
    models::Gradient<FastRational> grad = models::zero_gradient<FastRational>(in.spec);
    rank_gradient_into(in.spec, in.params, in.sequences, in.coefficients, one, grad);
    EXPECT_TRUE(grad == direct(in));
  };
  ExactMemos outer, inner;
  EXPECT_EQ(ExactMemoScope::current(), nullptr);
  call();  // no scope: nothing memoised
  {
    const ExactMemoScope a(&outer);
    call();
    {
      const ExactMemoScope b(&inner);
      EXPECT_EQ(ExactMemoScope::current(), &inner);
      call();
      call();
    }
    EXPECT_EQ(ExactMemoScope::current(), &outer);
    call();
  }
  EXPECT_EQ(ExactMemoScope::current(), nullptr);
  EXPECT_EQ(outer.backward.counts().misses, 1u);
  EXPECT_EQ(outer.backward.counts().hits, 1u);
  EXPECT_EQ(inner.backward.counts().misses, 1u);
  EXPECT_EQ(inner.backward.counts().hits, 1u);
}

TEST(BackwardMemo, it_stores_nothing_past_its_bound_and_still_answers_what_it_holds) {
  // A 64 x 64 linear model and one token: every call stores about 8,400 values, so the bound ends storing after
  // about 62 distinct calls.
  Inputs in;
  in.spec = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = 64, .output_size = 64};
  in.params = models::zero_parameters<FastRational>(in.spec);
  for (auto& t : in.params.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = FastRational(static_cast<long long>(i % 7) - 3, 4);
  models::Sequence<FastRational> seq;
  seq.features = models::Matrix<FastRational>::Constant(1, 64, FastRational(1, 2));
  seq.targets = models::Matrix<FastRational>::Constant(1, 64, FastRational(1));
  seq.loss_mask = {1};
  in.sequences = {seq};
  BackwardMemo memo;
  int computed = 0;
  const int calls = 100;
  for (int k = 0; k < calls; ++k) {
    in.coefficients = {FastRational(1, 2 + k)};
    ask(memo, in, computed);
  }
  ASSERT_EQ(computed, calls);
  in.coefficients = {FastRational(1, 2)};  // the first call: stored
  EXPECT_TRUE(ask(memo, in, computed) == direct(in));
  EXPECT_EQ(computed, calls);
  in.coefficients = {FastRational(1, 2 + calls - 1)};  // the last: past the bound, not stored
  EXPECT_TRUE(ask(memo, in, computed) == direct(in));
  EXPECT_EQ(computed, calls + 1);
}

}  // namespace
}  // namespace accumcheck::sim
