// models/model.h: every hand-written backward equals exact finite differences of its own forward.
//
// For each coordinate theta_j the 5-point stencil is exact (finite_difference.h), so the check is equality in
// rationals. The MLP is piecewise quadratic: a coordinate is checked only when no ReLU pre-activation it can
// move is within the stencil's reach of the kink; such skips are counted and classified.
#include <algorithm>
#include <span>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/fast_rational.h"
#include "models/finite_difference.h"
#include "models/fixed_point.h"
#include "models/loss_aggregation.h"
#include "models/model.h"
#include "properties/generators/model_generators.h"

namespace accumcheck::models {
namespace {

using properties::gen_aggregation;
using properties::gen_batch;
using properties::gen_model_spec;
using properties::gen_parameters;

const Rational kStep(1LL, 1000000000LL);

// True when perturbing fc1 row j (weight or bias) by up to 2h could cross a ReLU kink for some token.
bool mlp_row_near_kink(const ModelSpec& spec, const Parameters<Rational>& params,
                       std::span<const Sequence<Rational>> batch, int j) {
  for (const auto& seq : batch)
    for (int t = 0; t < seq.token_count(); ++t) {
      Rational z = params.tensors[1](j, 0);
      Rational reach(1);
      for (int k = 0; k < spec.input_size; ++k) {
        z += params.tensors[0](j, k) * seq.features(t, k);
        reach = std::max(reach, abs(seq.features(t, k)));
      }
      if (abs(z) <= Rational(2) * kStep * reach) return true;
    }
  return false;
}

struct Check {
  int checked = 0;
  int skipped = 0;
};

Check check_backward(const ModelSpec& spec, const Parameters<Rational>& params,
                     const std::vector<Sequence<Rational>>& batch, const AggregationSpec& aggregation) {
  const std::span<const Sequence<Rational>> view(batch);
  const std::vector<Rational> coef = sequence_coefficients(aggregation, view, count_scope(view));
  const std::span<const Rational> coef_view(coef);
  Gradient<Rational> grad = zero_gradient<Rational>(spec);
  accumulate_gradient(spec, params, view, coef_view, grad);
  const std::vector<bool> frozen = frozen_mask(spec);
  Check result;
  for (std::size_t p = 0; p < params.size(); ++p) {
    for (Eigen::Index c = 0; c < params.tensors[p].cols(); ++c)
      for (Eigen::Index r = 0; r < params.tensors[p].rows(); ++r) {
        if (frozen[p]) {
          RC_ASSERT(!grad.present[p]);
          RC_ASSERT(grad.tensors[p](r, c) == Rational(0));
          continue;
        }
        if (spec.kind == ModelKind::mlp && p <= 1 && mlp_row_near_kink(spec, params, view, static_cast<int>(r))) {
          ++result.skipped;
          continue;
        }
        Parameters<Rational> probe = params;
        auto loss_at = [&](const Rational& value) {
          probe.tensors[p](r, c) = value;
          return weighted_loss(spec, probe, view, coef_view);
        };
        const Rational numeric = five_point_derivative(loss_at, params.tensors[p](r, c), kStep);
        RC_ASSERT(grad.tensors[p](r, c) == numeric);
        // A parameter with no gradient took no part in the forward pass: the loss cannot depend on it.
        if (!grad.present[p]) RC_ASSERT(numeric == Rational(0));
        ++result.checked;
      }
  }
  return result;
}

RC_GTEST_PROP(Backward, hand_written_backward_equals_exact_finite_differences, ()) {
  const ModelSpec spec = *gen_model_spec();
  const Parameters<Rational> params = *gen_parameters(spec);
  const auto batch = *gen_batch(spec);
  const AggregationSpec aggregation = *gen_aggregation();
  const Check check = check_backward(spec, params, batch, aggregation);
  RC_CLASSIFY(check.skipped > 0, "some MLP coordinates near a kink");
  RC_TAG(to_string(spec.kind));
}

// Tied weights: both uses of the embedding must add. A model that let the input use overwrite the output use
// (or dropped either) would fail this on most draws; here every draw has supervised tokens.
RC_GTEST_PROP(Backward, tied_embedding_gradient_adds_both_uses, ()) {
  ModelSpec spec{.kind = ModelKind::tied_embedding, .vocab_size = *rc::gen::inRange(2, 4), .embed_size = *rc::gen::inRange(1, 3)};
  const Parameters<Rational> params = *gen_parameters(spec);
  auto seq = *properties::gen_sequence(spec);
  RC_PRE(seq.valid_token_count() > 0);
  check_backward(spec, params, {seq}, AggregationSpec{});
}

TEST(Backward, tied_embedding_hand_case) {
  // V = 2, D = 1, E = [[2], [3]], b = 0, one token id 0 with target y = (0, 0), weight 1.
  // e = 2, y_hat = E e = (4, 6), l = (16 + 36)/2 = 26. r = (4, 6).
  // Output use: dE[v] += r_v e = (8, 12). Input use: dE[0] += E^T r = 2*4 + 3*6 = 26. Total (34, 12).
  const ModelSpec spec{.kind = ModelKind::tied_embedding, .vocab_size = 2, .embed_size = 1};
  Parameters<Rational> params = zero_parameters<Rational>(spec);
  params.tensors[0](0, 0) = Rational(2);
  params.tensors[0](1, 0) = Rational(3);
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>(1, 0);
  seq.token_ids = {0};
  seq.targets = Matrix<Rational>::Zero(1, 2);
  seq.loss_mask = {1};
  const std::vector<Sequence<Rational>> batch = {seq};
  const std::vector<Rational> coef = {Rational(1)};
  EXPECT_EQ(weighted_loss(spec, params, std::span<const Sequence<Rational>>(batch), std::span<const Rational>(coef)),
            Rational(26));
  Gradient<Rational> grad = zero_gradient<Rational>(spec);
  accumulate_gradient(spec, params, std::span<const Sequence<Rational>>(batch), std::span<const Rational>(coef), grad);
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(34));
  EXPECT_EQ(grad.tensors[0](1, 0), Rational(12));
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(4));
  EXPECT_EQ(grad.tensors[1](1, 0), Rational(6));
}

TEST(Backward, routed_expert_with_no_tokens_has_no_gradient) {
  const ModelSpec spec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1, .expert_count = 3};
  const Parameters<Rational> params = zero_parameters<Rational>(spec);
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>::Constant(2, 1, Rational(1));
  seq.targets = Matrix<Rational>::Constant(2, 1, Rational(-1));
  seq.loss_mask = {1, 0};
  seq.expert_index = {0, 2};  // expert 1 receives nothing; expert 2 only a masked token
  const std::vector<Sequence<Rational>> batch = {seq};
  const std::vector<Rational> coef = {Rational(1)};
  Gradient<Rational> grad = zero_gradient<Rational>(spec);
  accumulate_gradient(spec, params, std::span<const Sequence<Rational>>(batch), std::span<const Rational>(coef), grad);
  EXPECT_EQ(grad.present, (std::vector<bool>{true, true, false, false, true, true}));
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(1));
  EXPECT_EQ(grad.tensors[4](0, 0), Rational(0));  // present, but zero: a masked token still builds the graph
}

TEST(Backward, frozen_parameter_is_never_given_a_gradient) {
  ModelSpec spec{.kind = ModelKind::mlp, .input_size = 1, .output_size = 1, .hidden_size = 1};
  spec.frozen = {"fc2.bias"};
  Parameters<Rational> params = zero_parameters<Rational>(spec);
  params.tensors[0](0, 0) = Rational(1);
  params.tensors[2](0, 0) = Rational(1);
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>::Constant(1, 1, Rational(2));
  seq.targets = Matrix<Rational>::Zero(1, 1);
  seq.loss_mask = {1};
  const std::vector<Sequence<Rational>> batch = {seq};
  const std::vector<Rational> coef = {Rational(1)};
  Gradient<Rational> grad = zero_gradient<Rational>(spec);
  accumulate_gradient(spec, params, std::span<const Sequence<Rational>>(batch), std::span<const Rational>(coef), grad);
  EXPECT_EQ(grad.present, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(grad.tensors[3](0, 0), Rational(0));
  // y_hat = relu(2) = 2, r = 2: dW2 = r h = 4, dz = W2 r = 2, dW1 = dz x = 4, db1 = 2.
  EXPECT_EQ(grad.tensors[2](0, 0), Rational(4));
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(4));
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(2));
}

TEST(Backward, invalid_sequences_are_rejected_with_the_field_named) {
  const ModelSpec spec{.kind = ModelKind::tied_embedding, .vocab_size = 2, .embed_size = 1};
  Sequence<Rational> seq;
  seq.features = Matrix<Rational>(1, 0);
  seq.token_ids = {5};
  seq.targets = Matrix<Rational>::Zero(1, 2);
  seq.loss_mask = {1};
  try {
    validate_sequence(spec, seq);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("id 5 outside [0, 2)"), std::string::npos) << e.what();
  }
}

// Every message validate_sequence writes, whole (its checks inline, its messages built out of line).
TEST(Backward, every_invalid_sequence_message_is_written_whole) {
  auto message = [](const ModelSpec& spec, const Sequence<Rational>& seq) {
    try {
      validate_sequence(spec, seq);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const ModelSpec linear{.kind = ModelKind::linear, .input_size = 2, .output_size = 1, .expert_count = 2};
  auto valid = [] {
    Sequence<Rational> seq;
    seq.features = Matrix<Rational>::Zero(2, 2);
    seq.targets = Matrix<Rational>::Zero(2, 1);
    seq.expert_index = {0, 1};
    seq.loss_mask = {1, 0};
    return seq;
  };
  EXPECT_EQ(message(linear, valid()), "accepted");
  Sequence<Rational> seq = valid();
  seq.targets = Matrix<Rational>::Zero(2, 3);
  EXPECT_EQ(message(linear, seq), "sequence: targets must be [2, 1], got [2, 3]");
  seq = valid();
  seq.features = Matrix<Rational>::Zero(3, 2);
  EXPECT_EQ(message(linear, seq), "sequence: features must be [2, 2], got [3, 2]");
  seq = valid();
  seq.expert_index = {0};
  EXPECT_EQ(message(linear, seq), "sequence: expert_index has 1 entries for 2 tokens");
  seq = valid();
  seq.expert_index = {0, 2};
  EXPECT_EQ(message(linear, seq), "sequence: token 1 is routed to expert 2 outside [0, 2)");
  seq = valid();
  seq.loss_mask = {1, 2};
  EXPECT_EQ(message(linear, seq), "sequence: loss_mask of token 1 is 2 (expected 0 or 1)");
  const ModelSpec tied{.kind = ModelKind::tied_embedding, .vocab_size = 2, .embed_size = 1};
  Sequence<Rational> tokens;
  tokens.features = Matrix<Rational>(1, 0);
  tokens.targets = Matrix<Rational>::Zero(1, 2);
  tokens.loss_mask = {1};
  EXPECT_EQ(message(tied, tokens), "sequence: token_ids has 0 entries for 1 tokens");
  tokens.token_ids = {-1};
  EXPECT_EQ(message(tied, tokens), "sequence: token 0 has id -1 outside [0, 2)");
}

// parameter_index answers as a search of parameter_names would, for every name and for names close to one.
// zero_parameters and zero_gradient build the exact types' matrices from their default value, and the others' with
// Matrix::Zero: every value is zero, in every scalar, in the spec's shapes, and no gradient is present.
template <class S>
void check_zero(const ModelSpec& spec) {
  const Parameters<S> params = zero_parameters<S>(spec);
  const Gradient<S> grad = zero_gradient<S>(spec);
  const ParameterShapes shapes = parameter_shapes(spec);
  RC_ASSERT(params.size() == shapes.size());
  RC_ASSERT(grad.size() == shapes.size());
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    for (const Matrix<S>* m : {&params.tensors[p], &grad.tensors[p]}) {
      RC_ASSERT(m->rows() == shapes[p].first);
      RC_ASSERT(m->cols() == shapes[p].second);
      for (Eigen::Index i = 0; i < m->size(); ++i) RC_ASSERT((*m)(i) == S(0));
    }
    RC_ASSERT(!grad.present[p]);
  }
}

RC_GTEST_PROP(ModelSpec, zero_parameters_and_gradients_are_zero_in_every_scalar, ()) {
  const ModelSpec spec = *gen_model_spec();
  check_zero<Rational>(spec);
  check_zero<FastRational>(spec);
  check_zero<double>(spec);
  check_zero<float>(spec);
  check_zero<Fixed32>(spec);
}

TEST(ModelSpec, parameter_index_agrees_with_the_names) {
  const std::vector<ModelSpec> specs = {
      {.kind = ModelKind::linear, .input_size = 2, .output_size = 1},
      {.kind = ModelKind::linear, .input_size = 1, .output_size = 1, .expert_count = 12},
      {.kind = ModelKind::mlp, .input_size = 1, .output_size = 1, .hidden_size = 3},
      {.kind = ModelKind::tied_embedding, .vocab_size = 3, .embed_size = 2},
  };
  const std::vector<std::string> near = {"",         "weight ",         "expert",          "expert.weight", "expert01.weight",
                                         "expert12.bias", "expert-1.bias", "expert1.weights", "expert1bias",   "expert 1.bias",
                                         "fc3.bias",      "embeddings",    "expert99999999999.bias"};
  for (const auto& spec : specs) {
    const auto names = parameter_names(spec);
    for (std::size_t p = 0; p < names.size(); ++p) EXPECT_EQ(parameter_index(spec, names[p]), p) << names[p];
    for (const auto& name : near) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        EXPECT_EQ(parameter_index(spec, name), std::nullopt) << "'" << name << "'";
      }
    }
    for (const auto& other : specs) {  // another model's names
      for (const auto& name : parameter_names(other)) {
        if (std::find(names.begin(), names.end(), name) == names.end()) {
          EXPECT_EQ(parameter_index(spec, name), std::nullopt) << name;
        }
      }
    }
  }
  ModelSpec frozen{.kind = ModelKind::linear, .input_size = 1, .output_size = 1, .expert_count = 3};
  frozen.frozen = {"expert2.weight", "expert0.bias"};
  EXPECT_EQ(frozen_mask(frozen), (std::vector<bool>{false, true, false, false, true, false}));
  frozen.frozen = {"expert3.weight"};
  EXPECT_THROW(validate(frozen), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::models
