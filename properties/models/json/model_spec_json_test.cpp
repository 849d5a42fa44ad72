// models/json/model_spec_json.h: exact round trips, and bad input named by its JSON path.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "models/json/model_spec_json.h"
#include "properties/generators/model_generators.h"

namespace accumcheck::models::json {
namespace {

RC_GTEST_PROP(ModelSpecJson, spec_parameters_and_sequences_round_trip_exactly, ()) {
  TrainingSpec spec;
  spec.model = *properties::gen_model_spec();
  spec.aggregation = *properties::gen_aggregation();
  spec.optimizer = *properties::gen_optimizer();
  if (*rc::gen::arbitrary<bool>()) spec.max_grad_norm = *properties::gen_positive_rational();
  const auto text = to_json(spec).dump();
  RC_ASSERT(training_spec_from_json(nlohmann::json::parse(text)) == spec);

  const auto params = *properties::gen_parameters(spec.model);
  RC_ASSERT(parameters_from_json(spec.model, nlohmann::json::parse(to_json(spec.model, params).dump())) == params);

  const auto seq = *properties::gen_sequence(spec.model);
  const auto back = sequence_from_json(spec.model, nlohmann::json::parse(to_json(seq).dump()), "seq");
  RC_ASSERT(matrices_equal(back.features, seq.features));
  RC_ASSERT(matrices_equal(back.targets, seq.targets));
  RC_ASSERT(back.loss_mask == seq.loss_mask);
  RC_ASSERT(back.token_ids == seq.token_ids);
  RC_ASSERT(back.expert_index == seq.expert_index);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ModelSpecJson, bad_input_names_the_json_path) {
  using nlohmann::json;
  EXPECT_NE(error_of([] { model_spec_from_json(json{{"kind", "transformer"}}); }).find("model.kind"), std::string::npos);
  EXPECT_NE(error_of([] { model_spec_from_json(json{{"kind", "linear"}, {"input_size", -3}}); }).find("input_size"),
            std::string::npos);
  EXPECT_NE(error_of([] { model_spec_from_json(json{{"kind", "linear"}, {"input_size", "4"}}); }).find("model.input_size"),
            std::string::npos);
  EXPECT_NE(error_of([] { model_spec_from_json(json::array()); }).find("expected an object"), std::string::npos);
  const ModelSpec spec{.kind = ModelKind::linear, .input_size = 1, .output_size = 1};
  EXPECT_NE(error_of([&] { parameters_from_json(spec, json{{"weight", {{"1/0"}}}, {"bias", {{"0"}}}}); })
                .find("parameters.weight[0][0]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parameters_from_json(spec, json{{"weight", {{"1"}}}, {"bias", {{"0"}}}, {"extra", 1}}); })
                .find("parameters.extra"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              sequence_from_json(spec, json{{"loss_mask", {1, 2}}, {"features", {{"1"}, {"1"}}}, {"targets", {{"0"}, {"0"}}}},
                                 "steps[0][1]");
            }).find("steps[0][1].loss_mask[1]"),
            std::string::npos);
  EXPECT_EQ(rational_from_json(json("-3/6"), "x"), Rational(-1LL, 2LL));
  EXPECT_EQ(rational_from_json(json("0.125"), "x"), Rational(1LL, 8LL));
}

}  // namespace
}  // namespace accumcheck::models::json
