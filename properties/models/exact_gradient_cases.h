// What the tests of the models' integer gradient paths share (linear_model_exact_test.cpp, mlp_model_exact_test.cpp):
// cases of values as the generator and a step leave them, the reference (the generic loop in Rational), and a
// call of a path on FastRational copies.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <rapidcheck.h>

#include "models/fast_rational.h"
#include "models/model.h"

namespace accumcheck::models::exact_cases {

// Values as the generator and a step leave them: mostly small dyadics, and sometimes what the integer path
// must decline or take to its bounds: a denominator of 3 (a token count), numerators of up to 62 bits,
// exponents of up to 62, and values too big to be inline.
inline rc::Gen<Rational> gen_value() {
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
inline rc::Gen<Rational> gen_coefficient() {
  return rc::gen::weightedOneOf<Rational>({
      {6, rc::gen::element(Rational(1LL, 3LL), Rational(1LL, 7LL), Rational(1LL, 4LL), Rational(1), Rational(-2LL, 5LL))},
      {1, rc::gen::just(pow2(100) / Rational(3))},
  });
}

inline rc::Gen<Matrix<Rational>> gen_values(int rows, int cols, bool dyadic_only) {
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

// A linear model (1-5 inputs, 1-3 outputs, 1-3 experts), an MLP (1-4 inputs, 1-4 hidden units, 1-3 outputs) or a
// tied embedding (vocabulary 2-5, width 1-3),
// 0-5 sequences of 0-6 tokens. dyadic_only: every value a small dyadic; dyadic_data: the features and targets
// are, the parameters anything.
inline rc::Gen<Case> gen_case(ModelKind kind, bool dyadic_only, bool dyadic_data = false) {
  return rc::gen::exec([kind, dyadic_only, dyadic_data] {
    Case c;
    c.spec.kind = kind;
    if (kind == ModelKind::tied_embedding) {
      c.spec.vocab_size = *rc::gen::inRange(2, 6);
      c.spec.embed_size = *rc::gen::inRange(1, 4);
    } else {
      c.spec.input_size = *rc::gen::inRange(1, kind == ModelKind::linear ? 6 : 5);
      c.spec.output_size = *rc::gen::inRange(1, 4);
    }
    if (kind == ModelKind::mlp) c.spec.hidden_size = *rc::gen::inRange(1, 5);
    if (kind == ModelKind::linear)
      c.spec.expert_count = *rc::gen::weightedOneOf<int>({{2, rc::gen::just(1)}, {1, rc::gen::inRange(2, 4)}});
    for (const auto& [rows, cols] : parameter_shapes(c.spec)) c.params.tensors.push_back(*gen_values(rows, cols, dyadic_only));
    const bool small_data = dyadic_only || dyadic_data;
    const int count = *rc::gen::inRange(0, 6);
    for (int i = 0; i < count; ++i) {
      Sequence<Rational> seq;
      const int T = *rc::gen::inRange(0, 7);
      seq.features = *gen_values(T, feature_size(c.spec), small_data);
      seq.targets = *gen_values(T, target_size(c.spec), small_data);
      for (int t = 0; t < T; ++t) {
        if (kind == ModelKind::tied_embedding) seq.token_ids.push_back(*rc::gen::inRange(0, c.spec.vocab_size));
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

inline FastRational fast(const Rational& q) { return FastRational(q); }

template <class S>
inline std::vector<Sequence<S>> convert(const std::vector<Sequence<Rational>>& batch) {
  std::vector<Sequence<S>> out;
  for (const auto& seq : batch)
    out.push_back({convert_matrix<S>(seq.features, fast), seq.token_ids, seq.expert_index,
                   convert_matrix<S>(seq.targets, fast), seq.loss_mask});
  return out;
}

inline Gradient<FastRational> convert(const Gradient<Rational>& g) {
  Gradient<FastRational> out{{}, g.present};
  for (const auto& t : g.tensors) out.tensors.push_back(convert_matrix<FastRational>(t, fast));
  return out;
}

// The generic loop in Rational: the reference.
inline Gradient<Rational> expected(const Case& c) {
  Gradient<Rational> grad = c.grad;
  switch (c.spec.kind) {
    case ModelKind::linear: linear_model::accumulate_gradient<Rational>(c.spec, c.params, c.batch, c.coefficients, grad); break;
    case ModelKind::mlp: mlp_model::accumulate_gradient<Rational>(c.spec, c.params, c.batch, c.coefficients, grad); break;
    case ModelKind::tied_embedding:
      tied_embedding_model::accumulate_gradient<Rational>(c.spec, c.params, c.batch, c.coefficients, grad);
      break;
  }
  return grad;
}

struct Outcome {
  bool taken;
  Gradient<FastRational> grad;
};

using Path = bool (*)(const ModelSpec&, const Parameters<FastRational>&, std::span<const Sequence<FastRational>>,
                     std::span<const FastRational>, Gradient<FastRational>&);

inline Outcome integer_path(const Case& c, Path path) {
  Parameters<FastRational> params;
  for (const auto& t : c.params.tensors) params.tensors.push_back(convert_matrix<FastRational>(t, fast));
  const auto batch = convert<FastRational>(c.batch);
  std::vector<FastRational> coefficients;
  for (const auto& q : c.coefficients) coefficients.push_back(fast(q));
  Outcome out{false, convert(c.grad)};
  out.taken = path(c.spec, params, batch, coefficients, out.grad);
  return out;
}

// The properties every path has. A path equals the generic loop where it takes a case, and leaves the gradient
// untouched where it declines (`label` classifies how often it took one).
inline void check_equals_or_declines(const Case& c, Path path, const char* label) {
  const Outcome got = integer_path(c, path);
  RC_CLASSIFY(got.taken, label);
  if (got.taken) {
    RC_ASSERT(got.grad == convert(expected(c)));
  } else {
    RC_ASSERT(got.grad == convert(c.grad));
  }
}

// A case the path must take, and get right.
inline void check_takes(const Case& c, Path path) {
  const Outcome got = integer_path(c, path);
  RC_ASSERT(got.taken);
  RC_ASSERT(got.grad == convert(expected(c)));
}

// What every caller sees: models::accumulate_gradient in FastRational equals it in Rational, whichever path it
// took, frozen tensors (one case in four) and all.
inline void check_accumulate_gradient(Case c) {
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

}  // namespace accumcheck::models::exact_cases
