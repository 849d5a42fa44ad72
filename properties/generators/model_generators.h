// RapidCheck generators for the exact core: rationals, model specs, parameters, sequences and batches.
//
// Weighted toward the interesting (STYLE.md): zeros and ones, values that cancel, empty sequences, fully
// masked sequences, single-token sequences, experts that receive no token, frozen parameters. Every generator
// produces only valid values, so properties never discard with RC_PRE. Sizes stay tiny: the models are
// checked by exhaustive finite differences, whose cost grows with the parameter count.
#pragma once

#include <string>
#include <vector>

#include <rapidcheck.h>

#include "models/loss_aggregation.h"
#include "models/model.h"
#include "models/optimizer.h"
#include "models/rational.h"

namespace accumcheck::properties {

using models::Rational;

// Small rationals: 0 and +-1 often, small integers, and fractions with denominators up to 6.
inline rc::Gen<Rational> gen_small_rational() {
  return rc::gen::weightedOneOf<Rational>({
      {3, rc::gen::element(Rational(0), Rational(1), Rational(-1))},
      {3, rc::gen::map(rc::gen::inRange(-9, 10), [](int n) { return Rational(n); })},
      {4, rc::gen::apply([](int n, int d) { return Rational(static_cast<long long>(n), static_cast<long long>(d)); },
                         rc::gen::inRange(-12, 13), rc::gen::inRange(1, 7))},
  });
}

inline rc::Gen<Rational> gen_positive_rational() {
  return rc::gen::apply([](int n, int d) { return Rational(static_cast<long long>(n), static_cast<long long>(d)); },
                        rc::gen::inRange(1, 13), rc::gen::inRange(1, 7));
}

inline rc::Gen<models::Matrix<Rational>> gen_matrix(int rows, int cols) {
  return rc::gen::map(rc::gen::container<std::vector<Rational>>(static_cast<std::size_t>(rows * cols),
                                                                gen_small_rational()),
                      [rows, cols](const std::vector<Rational>& values) {
                        models::Matrix<Rational> m(rows, cols);
                        for (int i = 0; i < rows * cols; ++i) m(i % rows, i / rows) = values[static_cast<std::size_t>(i)];
                        return m;
                      });
}

// A model spec of any kind with sizes 1..3 (experts 1..3) and, one time in four, a frozen parameter.
inline rc::Gen<models::ModelSpec> gen_model_spec() {
  return rc::gen::exec([] {
    models::ModelSpec spec;
    spec.kind = *rc::gen::element(models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding);
    switch (spec.kind) {
      case models::ModelKind::linear:
        spec.input_size = *rc::gen::inRange(1, 4);
        spec.output_size = *rc::gen::inRange(1, 3);
        spec.expert_count = *rc::gen::weightedOneOf<int>({{2, rc::gen::just(1)}, {1, rc::gen::inRange(2, 4)}});
        break;
      case models::ModelKind::mlp:
        spec.input_size = *rc::gen::inRange(1, 3);
        spec.hidden_size = *rc::gen::inRange(1, 4);
        spec.output_size = *rc::gen::inRange(1, 3);
        break;
      case models::ModelKind::tied_embedding:
        spec.vocab_size = *rc::gen::inRange(1, 4);
        spec.embed_size = *rc::gen::inRange(1, 3);
        break;
    }
    if (*rc::gen::inRange(0, 4) == 0) {
      const auto names = models::parameter_names(spec);
      spec.frozen.push_back(*rc::gen::elementOf(names));
    }
    return spec;
  });
}

inline rc::Gen<models::Parameters<Rational>> gen_parameters(const models::ModelSpec& spec) {
  return rc::gen::exec([spec] {
    models::Parameters<Rational> params;
    for (const auto& [rows, cols] : models::parameter_shapes(spec)) params.tensors.push_back(*gen_matrix(rows, cols));
    return params;
  });
}

// A sequence of 0..4 tokens: mostly supervised, sometimes masked tokens; routes and ids uniform.
inline rc::Gen<models::Sequence<Rational>> gen_sequence(const models::ModelSpec& spec) {
  return rc::gen::exec([spec] {
    const int T = *rc::gen::weightedOneOf<int>({{1, rc::gen::just(0)}, {2, rc::gen::just(1)}, {4, rc::gen::inRange(2, 5)}});
    models::Sequence<Rational> seq;
    seq.features = spec.kind == models::ModelKind::tied_embedding ? models::Matrix<Rational>(T, 0)
                                                                 : *gen_matrix(T, spec.input_size);
    seq.targets = *gen_matrix(T, models::target_size(spec));
    for (int t = 0; t < T; ++t) {
      seq.loss_mask.push_back(*rc::gen::weightedOneOf<std::uint8_t>(
          {{4, rc::gen::just<std::uint8_t>(1)}, {1, rc::gen::just<std::uint8_t>(0)}}));
      if (spec.kind == models::ModelKind::tied_embedding) seq.token_ids.push_back(*rc::gen::inRange(0, spec.vocab_size));
      if (spec.kind == models::ModelKind::linear && spec.expert_count > 1)
        seq.expert_index.push_back(*rc::gen::inRange(0, spec.expert_count));
    }
    return seq;
  });
}

inline rc::Gen<std::vector<models::Sequence<Rational>>> gen_batch(const models::ModelSpec& spec) {
  return rc::gen::exec([spec] {
    const int count = *rc::gen::inRange(0, 5);
    std::vector<models::Sequence<Rational>> batch;
    for (int i = 0; i < count; ++i) batch.push_back(*gen_sequence(spec));
    return batch;
  });
}

inline rc::Gen<models::AggregationSpec> gen_aggregation() {
  return rc::gen::exec([] {
    models::AggregationSpec spec;
    spec.mode = *rc::gen::elementOf(std::vector<models::LossAggregation>(std::begin(models::kAllLossAggregations),
                                                                         std::end(models::kAllLossAggregations)));
    spec.norm_constant = *gen_positive_rational();
    return spec;
  });
}

inline rc::Gen<models::OptimizerSpec> gen_optimizer() {
  return rc::gen::exec([] {
    models::OptimizerSpec spec;
    spec.kind = *rc::gen::element(models::OptimizerKind::sgd, models::OptimizerKind::adam, models::OptimizerKind::adamw);
    spec.lr = *rc::gen::element(Rational(1LL, 10LL), Rational(1LL, 2LL), Rational(1));
    spec.weight_decay = *rc::gen::element(Rational(0), Rational(1LL, 100LL));
    if (spec.kind == models::OptimizerKind::sgd) {
      spec.momentum = *rc::gen::element(Rational(0), Rational(9LL, 10LL));
      spec.nesterov = spec.momentum.sign() > 0 && *rc::gen::arbitrary<bool>();
    }
    return spec;
  });
}

}  // namespace accumcheck::properties
