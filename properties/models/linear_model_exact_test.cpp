// models/linear_model_exact.h: the linear model's gradient in integers equals the generic loop's in Rational,
// value for value and presence for presence, and it declines (touching nothing) whatever it cannot sum exactly.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/linear_model.h"
#include "models/linear_model_exact.h"
#include "models/model.h"

namespace accumcheck::models {
namespace {

// Values as the generator and a step leave them: mostly small dyadics, and sometimes what the integer path
// must decline or take to its bounds: a denominator of 3 (a token count), numerators of up to 62 bits,
// exponents of up to 62, and values too big to be inline.
rc::Gen<Rational> gen_value() {
  return rc::gen::weightedOneOf<Rational>({
      {8, rc::gen::apply([](int n, int e) { return Rational(static_cast<long long>(n)) * pow2(-e); },
                         rc::gen::inRange(-4096, 4097), rc::gen::inRange(0, 13))},
      {2, rc::gen::element(Rational(0), Rational(1), Rational(-1))},
      {1, rc::gen::map(rc::gen::inRange(-20, 21), [](int n) { return Rational(static_cast<long long>(n), 3LL); })},
      {1, rc::gen::apply([](std::int64_t n, int e) { return Rational(static_cast<long long>(n)) * pow2(-e); },
                         rc::gen::arbitrary<std::int64_t>(), rc::gen::inRange(0, 63))},
      {1, rc::gen::map(rc::gen::inRange(1, 5), [](int n) { return pow2(64 * n) + Rational(1); })},
  });
}

// One of a few coefficients, so that consecutive sequences often share one: token means (1/N), powers of two,
// and one too big to be inline.
rc::Gen<Rational> gen_coefficient() {
  return rc::gen::weightedOneOf<Rational>({
      {6, rc::gen::element(Rational(1LL, 3LL), Rational(1LL, 7LL), Rational(1LL, 4LL), Rational(1), Rational(-2LL, 5LL))},
      {1, rc::gen::just(pow2(100) / Rational(3))},
  });
}

rc::Gen<Matrix<Rational>> gen_values(int rows, int cols, bool dyadic_only) {
  const auto value = dyadic_only ? rc::gen::map(rc::gen::pair(rc::gen::inRange(-4096, 4097), rc::gen::inRange(0, 13)),
                                                [](std::pair<int, int> p) { return Rational(static_cast<long long>(p.first)) * pow2(-p.second); })
                                 : gen_value();
  return rc::gen::map(rc::gen::container<std::vector<Rational>>(static_cast<std::size_t>(rows * cols), value),
                      [rows, cols](const std::vector<Rational>& values) {
                        Matrix<Rational> m(rows, cols);
                        for (int i = 0; i < rows * cols; ++i) m(i % rows, i / rows) = values[static_cast<std::size_t>(i)];
                        return m;
                      });
}

struct Case {
  ModelSpec spec;
  Parameters<Rational> params;
  std::vector<Sequence<Rational>> batch;
  std::vector<Rational> coefficients;
  Gradient<Rational> grad;  // what the call accumulates into
};

// dyadic_only: every value a small dyadic; dyadic_data: the features and targets are, the parameters anything.
rc::Gen<Case> gen_case(bool dyadic_only, bool dyadic_data = false) {
  return rc::gen::exec([dyadic_only, dyadic_data] {
    Case c;
    c.spec.kind = ModelKind::linear;
    c.spec.input_size = *rc::gen::inRange(1, 6);
    c.spec.output_size = *rc::gen::inRange(1, 4);
    c.spec.expert_count = *rc::gen::weightedOneOf<int>({{2, rc::gen::just(1)}, {1, rc::gen::inRange(2, 4)}});
    for (const auto& [rows, cols] : parameter_shapes(c.spec)) c.params.tensors.push_back(*gen_values(rows, cols, dyadic_only));
    const bool small_data = dyadic_only || dyadic_data;
    const int count = *rc::gen::inRange(0, 6);
    for (int i = 0; i < count; ++i) {
      Sequence<Rational> seq;
      const int T = *rc::gen::inRange(0, 7);
      seq.features = *gen_values(T, c.spec.input_size, small_data);
      seq.targets = *gen_values(T, c.spec.output_size, small_data);
      for (int t = 0; t < T; ++t) {
        seq.loss_mask.push_back(*rc::gen::weightedOneOf<std::uint8_t>({{4, rc::gen::just<std::uint8_t>(1)}, {1, rc::gen::just<std::uint8_t>(0)}}));
        if (c.spec.expert_count > 1) seq.expert_index.push_back(*rc::gen::inRange(0, c.spec.expert_count));
      }
      c.batch.push_back(std::move(seq));
      c.coefficients.push_back(small_data ? *rc::gen::element(Rational(1LL, 3LL), Rational(1LL, 4LL)) : *gen_coefficient());
    }
    // Accumulated into a gradient that already holds something, present or not, as a second micro-batch's is.
    c.grad = zero_gradient<Rational>(c.spec);
    for (std::size_t p = 0; p < c.grad.size(); ++p)
      if (*rc::gen::inRange(0, 2) == 0) {
        c.grad.tensors[p] = *gen_values(static_cast<int>(c.grad.tensors[p].rows()), static_cast<int>(c.grad.tensors[p].cols()), dyadic_only);
        c.grad.present[p] = true;
      }
    return c;
  });
}

FastRational fast(const Rational& q) { return FastRational(q); }

template <class S>
std::vector<Sequence<S>> convert(const std::vector<Sequence<Rational>>& batch) {
  std::vector<Sequence<S>> out;
  for (const auto& seq : batch)
    out.push_back({convert_matrix<S>(seq.features, fast), seq.token_ids, seq.expert_index,
                   convert_matrix<S>(seq.targets, fast), seq.loss_mask});
  return out;
}

Gradient<FastRational> convert(const Gradient<Rational>& g) {
  Gradient<FastRational> out{{}, g.present};
  for (const auto& t : g.tensors) out.tensors.push_back(convert_matrix<FastRational>(t, fast));
  return out;
}

// The generic loop in Rational: the reference.
Gradient<Rational> expected(const Case& c) {
  Gradient<Rational> grad = c.grad;
  linear_model::accumulate_gradient<Rational>(c.spec, c.params, c.batch, c.coefficients, grad);
  return grad;
}

struct Outcome {
  bool taken;
  Gradient<FastRational> grad;
};

using Path = bool (*)(const ModelSpec&, const Parameters<FastRational>&, std::span<const Sequence<FastRational>>,
                     std::span<const FastRational>, Gradient<FastRational>&);

Outcome integer_path(const Case& c, Path path = linear_model::accumulate_gradient_dyadic) {
  Parameters<FastRational> params;
  for (const auto& t : c.params.tensors) params.tensors.push_back(convert_matrix<FastRational>(t, fast));
  const auto batch = convert<FastRational>(c.batch);
  std::vector<FastRational> coefficients;
  for (const auto& q : c.coefficients) coefficients.push_back(fast(q));
  Outcome out{false, convert(c.grad)};
  out.taken = path(c.spec, params, batch, coefficients, out.grad);
  return out;
}

RC_GTEST_PROP(LinearModelExact, equals_the_generic_loop_or_declines_untouched, ()) {
  const Case c = *gen_case(false);
  const Outcome got = integer_path(c);
  RC_CLASSIFY(got.taken, "summed in integers");
  if (got.taken) {
    RC_ASSERT(got.grad == convert(expected(c)));
  } else {
    RC_ASSERT(got.grad == convert(c.grad));
  }
}

RC_GTEST_PROP(LinearModelExact, takes_every_small_dyadic_case, ()) {
  const Case c = *gen_case(true);
  const Outcome got = integer_path(c);
  RC_ASSERT(got.taken);
  RC_ASSERT(got.grad == convert(expected(c)));
}

RC_GTEST_PROP(LinearModelExact, the_gmp_path_equals_the_generic_loop_or_declines_untouched, ()) {
  const Case c = *gen_case(false, *rc::gen::arbitrary<bool>());
  const Outcome got = integer_path(c, linear_model::accumulate_gradient_integer);
  RC_CLASSIFY(got.taken, "summed in GMP integers");
  if (got.taken) {
    RC_ASSERT(got.grad == convert(expected(c)));
  } else {
    RC_ASSERT(got.grad == convert(c.grad));
  }
}

// Parameters after an SGD step (a divisor of 3), of 62 bits, or promoted (2^64n + 1), over dyadic data.
RC_GTEST_PROP(LinearModelExact, the_gmp_path_takes_any_parameters_over_dyadic_data, ()) {
  const Case c = *gen_case(false, true);
  const Outcome got = integer_path(c, linear_model::accumulate_gradient_integer);
  RC_ASSERT(got.taken);
  RC_ASSERT(got.grad == convert(expected(c)));
}

// What every caller sees: models::accumulate_gradient in FastRational equals it in Rational, frozen tensors
// and all, whichever path it took.
RC_GTEST_PROP(LinearModelExact, accumulate_gradient_in_fast_rational_equals_rational, ()) {
  Case c = *gen_case(*rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>());
  if (*rc::gen::inRange(0, 4) == 0) c.spec.frozen.push_back(*rc::gen::elementOf(parameter_names(c.spec)));
  Gradient<Rational> want = c.grad;
  accumulate_gradient<Rational>(c.spec, c.params, c.batch, c.coefficients, want);
  Parameters<FastRational> params;
  for (const auto& t : c.params.tensors) params.tensors.push_back(convert_matrix<FastRational>(t, fast));
  const auto batch = convert<FastRational>(c.batch);
  std::vector<FastRational> coefficients;
  for (const auto& q : c.coefficients) coefficients.push_back(fast(q));
  Gradient<FastRational> got = convert(c.grad);
  accumulate_gradient<FastRational>(c.spec, params, batch, coefficients, got);
  RC_ASSERT(got == convert(want));
}

// At the bound: two inputs, one token, K = 0, parameters and features of 41 bits: 3 + 41 + 41 + 41 = 126 bits
// is summed in integers (and exactly), 42 bits is declined.
TEST(LinearModelExact, sums_up_to_the_bound_and_declines_past_it) {
  for (const int bits : {41, 42}) {
    Case c;
    c.spec = ModelSpec{.kind = ModelKind::linear, .input_size = 2, .output_size = 1};
    const Rational big = pow2(bits) - Rational(1);
    Matrix<Rational> W(1, 2), b(1, 1), x(1, 2), y(1, 1);
    W << big, -big;
    b << Rational(3);
    x << big, big - Rational(5);
    y << Rational(-7);
    c.params.tensors = {W, b};
    c.batch = {Sequence<Rational>{x, {}, {}, y, {1}}};
    c.coefficients = {Rational(1LL, 3LL)};
    c.grad = zero_gradient<Rational>(c.spec);
    const Outcome got = integer_path(c);
    EXPECT_EQ(got.taken, bits == 41) << bits << " bits";
    if (got.taken) {
      EXPECT_TRUE(got.grad == convert(expected(c)));
    }
  }
}

TEST(LinearModelExact, hand_case) {
  // W = [1/2, -1/4], b = 1/8, x = [1, 2], y = 1/2: r = 1/2 - 1/2 + 1/8 - 1/2 = -3/8; with c = 1/3,
  // dW = -1/8 [1, 2] = [-1/8, -1/4], db = -1/8.
  Case c;
  c.spec = ModelSpec{.kind = ModelKind::linear, .input_size = 2, .output_size = 1};
  Matrix<Rational> W(1, 2), b(1, 1), x(1, 2), y(1, 1);
  W << Rational(1LL, 2LL), Rational(-1LL, 4LL);
  b << Rational(1LL, 8LL);
  x << Rational(1), Rational(2);
  y << Rational(1LL, 2LL);
  c.params.tensors = {W, b};
  c.batch = {Sequence<Rational>{x, {}, {}, y, {1}}};
  c.coefficients = {Rational(1LL, 3LL)};
  c.grad = zero_gradient<Rational>(c.spec);
  const Outcome got = integer_path(c);
  ASSERT_TRUE(got.taken);
  EXPECT_EQ(got.grad.tensors[0](0, 0), FastRational(-1, 8));
  EXPECT_EQ(got.grad.tensors[0](0, 1), FastRational(-1, 4));
  EXPECT_EQ(got.grad.tensors[1](0, 0), FastRational(-1, 8));
  EXPECT_TRUE(got.grad.present[0] && got.grad.present[1]);
}

}  // namespace
}  // namespace accumcheck::models
