// surface/explain.h: the story of the catalogue finding names the dropped micro-batch and 37 versus 101/3, gives
// the catalogue hint only when the facts match, and is the same text for the same finding.
#include <filesystem>
#include <iostream>

#include <gtest/gtest.h>

#include "properties/membership.h"

#include "surface/explain.h"
#include "properties/surface/catalogue_finding.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives
namespace {

using properties::catalogue_finding;

constexpr const char* kProperty1 = "accumulated_update_equals_full_batch_update";
constexpr const char* kProperty5 = "applied_gradient_holds_each_micro_batch_once";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Token-mean over a 1-token and a 3-token micro-batch (token gradients 2 and 4, 4, 4), one rank, G = 2: the
// correct gradient is 7/2 and a per-micro-batch mean gives 3 (docs/targets.md section 8).
Finding normalisation_finding(const std::string& target_name) {
  sim::Scenario s = properties::scalar_scenario({}, sim::EngineConfig{.rank_count = 1, .accumulation_steps = 2});
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  sim::StepPlan plan;
  plan.micro_batches.push_back(sim::MicroBatch{{{properties::scalar_tokens({models::Rational(-2)})}}});
  plan.micro_batches.push_back(
      sim::MicroBatch{{{properties::scalar_tokens({models::Rational(-4), models::Rational(-4), models::Rational(-4)})}}});
  s.steps.push_back(plan);
  const auto target = sim::make_target(target_name);
  return make_finding(*target, *properties::find_property(kProperty1), s, sim::ScalarKind::fast_rational, 1, 3, 5, 0);
}

TEST(Explain, tells_the_catalogue_story_of_property_1_with_37_versus_101_thirds) {
  const std::string text = explain(catalogue_finding(kProperty1));
  EXPECT_TRUE(contains(text, "accumcheck finding: deepspeed@0.16.0 fails accumulated_update_equals_full_batch_update")) << text;
  EXPECT_TRUE(contains(text, "step 0 / gradient / weight[0,0]: expected 37 (37), actual 101/3 (33.666666666666664)")) << text;
  EXPECT_TRUE(contains(text, "step 1 / gradient / weight[0,0]: expected 37000 (37000), actual 101000/3")) << text;
  // The target with its description, the property with its description.
  EXPECT_TRUE(contains(text, "DeepSpeed 0.16.0 ZeRO-1/2 (band B1)")) << text;
  EXPECT_TRUE(contains(text, "1. each step's applied gradient equals the oracle's full-batch gradient")) << text;
  // The configuration and the data in brief.
  EXPECT_TRUE(contains(text, "1 data-parallel rank, G = 3 (automatic boundary, engine.step() after every backward), "
                             "ZeRO-2 with the optimizer offloaded to the host")) << text;
  EXPECT_TRUE(contains(text, "token-mean aggregation; SGD (lr 0); no gradient clipping; 2 optimizer steps")) << text;
  EXPECT_TRUE(contains(text, "step 0: 3 micro-batches; 3 sequences, 3 tokens (3 supervised)")) << text;
  EXPECT_TRUE(contains(text, "micro-batch 1: rank 0: 1 sequence of 1 token = [x=(1) y=(-10)]")) << text;
  // The hint is computed: 101/3 is exactly micro-batches 0 and 2 alone.
  EXPECT_TRUE(contains(text, "Hint: this resembles catalogue section 1")) << text;
  EXPECT_TRUE(contains(text, "exactly the sum of micro-batches 0 and 2 alone, with ZeRO-2, offload and G = 3")) << text;
  const std::string file = finding_file_name(catalogue_finding(kProperty1));
  EXPECT_TRUE(file.starts_with("deepspeed@0.16.0--accumulated_update_equals_full_batch_update--s")) << file;
  EXPECT_TRUE(text.ends_with("Replay: accumcheck replay " + file + "\n")) << text;
}

TEST(Explain, names_the_dropped_micro_batch_for_the_membership_property) {
  const std::string text = explain(catalogue_finding(kProperty5));
  EXPECT_TRUE(contains(text, "Membership: step 0: micro-batch 1 (rank 0) of step 0 dropped")) << text;
  EXPECT_TRUE(contains(text, "micro-batch 1 of step 0 on rank 0: dropped\n")) << text;
  EXPECT_TRUE(contains(text, "micro-batch 1 of step 1 on rank 0: dropped")) << text;
  EXPECT_TRUE(contains(text, "The membership probe keeps this engine configuration")) << text;
  EXPECT_TRUE(contains(text, "Hint: this resembles catalogue section 1")) << text;
  EXPECT_TRUE(contains(text, "only intermediate micro-batches were dropped (micro-batch 1 of step 0, 1 of step 1)")) << text;
}

TEST(Explain, is_the_same_text_for_the_same_finding_and_after_a_json_round_trip) {
  const Finding f = catalogue_finding(kProperty1);
  const std::string text = explain(f);
  EXPECT_EQ(text, explain(catalogue_finding(kProperty1)));
  EXPECT_EQ(text, explain(finding_from_json(to_json(f))));
}

TEST(Explain, gives_no_hint_when_the_facts_do_not_match) {
  Finding f = catalogue_finding(kProperty1);
  // Same configuration, but an actual value that is not micro-batches 0 and 2 alone.
  for (auto& m : f.verdict.mismatches) m.actual = models::Rational(7);
  EXPECT_EQ(catalogue_hint(f), "");
  EXPECT_FALSE(contains(explain(f), "Hint:"));
  // The right numbers without offload are not catalogue section 1.
  Finding no_offload = catalogue_finding(kProperty1);
  no_offload.scenario.engine.offload = false;
  EXPECT_EQ(catalogue_hint(no_offload), "");
}

TEST(Explain, hints_per_micro_batch_normalisation_for_the_framework_layers) {
  const Finding openrlhf = normalisation_finding("openrlhf@0.10.2+reference");
  ASSERT_EQ(openrlhf.verdict.mismatches.size(), 1u);
  EXPECT_EQ(openrlhf.verdict.mismatches[0].expected, models::Rational(7LL, 2LL));
  EXPECT_EQ(openrlhf.verdict.mismatches[0].actual, models::Rational(3));
  EXPECT_TRUE(catalogue_hint(openrlhf).starts_with("resembles catalogue section 2")) << catalogue_hint(openrlhf);
  const Finding transformers = normalisation_finding("transformers@4.45+reference");
  EXPECT_TRUE(catalogue_hint(transformers).starts_with("resembles catalogue section 3")) << catalogue_hint(transformers);
  EXPECT_TRUE(contains(explain(transformers), "micro-batch 1: rank 0: 1 sequence of 3 tokens")) << explain(transformers);
}

// No built-in engine weights micro-batches wrongly any more (framework layers run only the aggregation modes
// they implement, and the membership probe uses `sum`), so the decoder is fed a run that did: a step whose
// applied gradient 11/2 is not a whole sum of the micro-batch gradients 1 and 10.
TEST(Explain, calls_a_wrongly_weighted_membership_step_wrong_weights_not_drops) {
  sim::Scenario s = properties::scalar_scenario({{1, 10}}, sim::EngineConfig{.rank_count = 1, .accumulation_steps = 2});
  const properties::MembershipProbe probe = properties::membership_probe(s);
  sim::RunResult run;
  sim::StepOutcome step;
  step.applied = true;
  step.gradient = models::zero_gradient<models::Rational>(probe.scenario.training.model);
  step.gradient.tensors[0](0, 0) = models::Rational(11LL, 2LL);
  run.steps.push_back(step);
  Finding f;
  f.target = "openrlhf@0.10.2+reference";
  f.property = kProperty5;
  f.scenario = s;
  f.verdict.outcome = properties::Outcome::fail;
  f.verdict.membership = properties::decode_membership(probe, run);
  f.verdict.message = f.verdict.membership->summary;
  const std::string text = explain(f);
  EXPECT_TRUE(contains(text, "Membership: step 0: applied gradient 11/2 is not a whole sum")) << text;
  EXPECT_TRUE(contains(text, "micro-batch 0 of step 0 on rank 0: wrong weight (the gradient applied in step 0 is not a whole sum")) << text;
  EXPECT_FALSE(contains(text, ": dropped")) << text;
}

TEST(Explain, reads_the_framework_layer_from_the_target_name) {
  EXPECT_EQ(framework_layer_of("deepspeed@0.16.0"), "reference");
  EXPECT_EQ(framework_layer_of("trl+deepspeed@0.16.0"), "reference");
  EXPECT_EQ(framework_layer_of("openrlhf@0.10.2+deepspeed@0.18.9"), "openrlhf@0.10.2");
  EXPECT_EQ(framework_layer_of("llamafactory+transformers@4.46+deepspeed@0.16.0"), "transformers@4.46");
  EXPECT_TRUE(contains(target_description("no-such-engine"), "does not know this target"));
}

// Every finding of the regression corpus explains deterministically, and the catalogue hint is there exactly for
// the findings of the DeepSpeed band-B and framework-layer targets whose facts match.
TEST(Explain, explains_every_corpus_finding) {
  const std::filesystem::path corpus = ACCUMCHECK_CORPUS_DIR;
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << "no corpus at " << corpus;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(corpus))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const Finding f = finding_from_json(read_json_file(file));
    const std::string text = explain(f);
    EXPECT_EQ(text, explain(f)) << file;
    EXPECT_TRUE(contains(text, "Replay: accumcheck replay ")) << file;
    if (std::getenv("ACCUMCHECK_SHOW_EXPLAIN")) std::cout << "==== " << file.filename().string() << "\n" << text;
  }
}

// A minimum with no trainable parameter says what that means instead of leaving the reader to wonder.
TEST(Explain, says_why_a_minimum_can_have_every_parameter_frozen) {
  Finding f = normalisation_finding("openrlhf@0.10.2+reference");
  EXPECT_FALSE(contains(explain(f), "Every parameter is frozen")) << explain(f);
  f.scenario.training.model.frozen = {"weight", "bias"};
  ASSERT_EQ(models::trainable_value_count(f.scenario.training.model), 0u);
  EXPECT_TRUE(contains(explain(f), "Every parameter is frozen: the property fails with nothing to train")) << explain(f);
}

}  // namespace
}  // namespace accumcheck::surface
