// surface/report.h, surface/gallery.h, surface/html_page.h: the measured pictures are exact (which micro-batch
// and which sequence reached the optimizer with what weight), each kind of document makes its page, a user's
// strings never become markup, and bad documents are refused with the field named. The pages as a browser draws
// them are checked in report_browser_test.sh.
#include <gtest/gtest.h>

#include "properties/surface/catalogue_finding.h"
#include "surface/audit.h"
#include "surface/gallery.h"
#include "surface/html_page.h"
#include "surface/report.h"

namespace accumcheck::surface {
namespace {

using models::Rational;
using nlohmann::json;

constexpr const char* kProperty1 = "accumulated_update_equals_full_batch_update";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MembershipWeights, measures_the_catalogue_drop_exactly_on_band_b_and_nothing_wrong_on_band_c) {
  const fuzz::Finding f = properties::catalogue_finding(kProperty1);  // G = 3, two steps, ZeRO-2 + offload
  const MembershipWeights buggy = membership_weights(*sim::make_target("deepspeed@0.16.0"), f.scenario);
  ASSERT_EQ(buggy.why_not, "");
  ASSERT_EQ(buggy.micro_batches.size(), 6u);
  EXPECT_EQ(buggy.micro_batches[1], "s0 k1 r0");
  // The probe's `sum` makes a correct target apply every micro-batch with weight 1 in its own step; band B applies
  // micro-batches 0 and 2 and drops micro-batch 1, in both steps.
  const std::vector<Rational> step0 = {Rational(1), Rational(0), Rational(1), Rational(0), Rational(0), Rational(0)};
  const std::vector<Rational> step1 = {Rational(0), Rational(0), Rational(0), Rational(1), Rational(0), Rational(1)};
  EXPECT_EQ(buggy.weight[0], step0);
  EXPECT_EQ(buggy.weight[1], step1);
  const MembershipWeights fixed = membership_weights(*sim::make_target("deepspeed@0.19.0"), f.scenario);
  ASSERT_EQ(fixed.why_not, "");
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(fixed.weight[s][i], Rational(fixed.own_step[i] == static_cast<int>(s) ? 1 : 0));
}

// Two micro-batches of one sequence each, 1 and 3 tokens, token mean, G = 2: a token of the short sequence
// counts 1/(G T) = 1/2 under a mean of micro-batch means and 1/4 under the token mean (catalogue entry 2).
TEST(SequenceWeights, gives_the_mean_of_means_weights_of_openrlhf_0_10_2_exactly) {
  sim::Scenario s = properties::scalar_scenario({}, sim::EngineConfig{.rank_count = 1, .accumulation_steps = 2});
  s.training.aggregation.mode = models::LossAggregation::token_mean;
  sim::StepPlan plan;
  plan.micro_batches.push_back(sim::MicroBatch{{{properties::scalar_tokens({Rational(-2)})}}});
  plan.micro_batches.push_back(sim::MicroBatch{{{properties::scalar_tokens({Rational(-4), Rational(-4), Rational(-4)})}}});
  s.steps.push_back(plan);
  const SequenceWeights buggy = sequence_weights(*sim::make_target("openrlhf@0.10.2+reference"), s, sim::ScalarKind::rational);
  ASSERT_EQ(buggy.why_not, "");
  EXPECT_EQ(buggy.sequences, (std::vector<std::string>{"k0 r0 #0 (1 token)", "k1 r0 #0 (3 tokens)"}));
  EXPECT_EQ(buggy.weight, (std::vector<Rational>{Rational(1, 2), Rational(1, 6)}));
  const SequenceWeights fixed = sequence_weights(*sim::make_target("openrlhf@0.10.4+reference"), s, sim::ScalarKind::rational);
  EXPECT_EQ(fixed.weight, (std::vector<Rational>{Rational(1, 4), Rational(1, 4)}));
}

TEST(Report, a_finding_page_has_the_verdict_the_pictures_and_the_commands) {
  const fuzz::Finding f = properties::catalogue_finding(kProperty1);
  const std::string page = report_html(fuzz::to_json(f), "findings/drop.json");
  EXPECT_TRUE(contains(page, "data-verdict=\"fail\"")) << page.substr(0, 400);
  EXPECT_TRUE(contains(page, "id=\"chart-membership\""));
  EXPECT_TRUE(contains(page, "id=\"chart-mismatches\""));
  EXPECT_TRUE(contains(page, "s0 k1 r0: weight 0 in its own step (dropped)"));
  EXPECT_TRUE(contains(page, "accumcheck replay findings/drop.json"));
  EXPECT_TRUE(contains(page, "--format deepspeed"));
  EXPECT_TRUE(contains(page, "new Chart("));  // the library and the drawing script are in the page
}

TEST(Report, an_audit_page_shows_which_micro_batches_reached_the_optimizer) {
  RunConfiguration run;
  run.name = "(flags)";
  run.framework = Stated<Framework>{Framework::deepspeed, "--framework"};
  run.uses_deepspeed = Stated<bool>{true, "--framework"};
  read_package_versions(run, "deepspeed==0.16.4\n", "--package");
  run.zero_stage = Stated<int>{2, "--zero-stage"};
  run.optimizer_offload = Stated<OffloadDevice>{OffloadDevice::cpu, "--offload"};
  run.accumulation_steps = Stated<int>{8, "--accumulation-steps"};
  run.world_size = Stated<int>{1, "--world-size"};
  const std::string page = report_html(audit_json({audit_run(run)}), "audit.json");
  EXPECT_TRUE(contains(page, "1 of 1 runs affected"));
  EXPECT_TRUE(contains(page, "deepspeed-zero2-offload-drop: affected"));
  EXPECT_TRUE(contains(page, "id=\"chart-run-0-deepspeed-zero2-offload-drop\""));
  // The same run on the fixed release: nothing affected, and the verdict words become classes the page colours.
  run.versions.clear();
  read_package_versions(run, "deepspeed==0.19.0\n", "--package");
  const std::string fixed = report_html(audit_json({audit_run(run)}), "audit.json");
  EXPECT_TRUE(contains(fixed, "<td class=\"verdict-not-affected\">not affected</td><td>-</td>")) << fixed;
  EXPECT_TRUE(contains(fixed, "class=\"verdict verdict-not-affected\" data-verdict=\"not affected\""));
}

TEST(Report, a_campaign_page_lists_every_pair_and_its_finding) {
  fuzz::CampaignConfig c;
  c.targets = {"deepspeed@0.16.0", "deepspeed@0.19.0"};
  c.properties = {kProperty1};
  c.generator.ordinary_only = true;
  c.generator.offload = true;
  c.trials = 60;
  c.seed = 3;
  const json report = fuzz::to_json(fuzz::run_campaign(c));
  const std::string page = report_html(report, "report.json");
  EXPECT_TRUE(contains(page, "data-verdict=\"fail\"")) << report.dump();
  EXPECT_TRUE(contains(page, "Findings, shrunk"));
  EXPECT_TRUE(contains(page, "id=\"chart-pairs\""));
  EXPECT_TRUE(contains(page, "<td>deepspeed@0.19.0</td>"));
  EXPECT_TRUE(contains(page, "at most 3 ranks, 3 optimizer steps, G and windows of 4, 2 sequences per micro-batch and rank, 6 tokens"))
      << page.substr(0, 2000);
}

TEST(Report, refuses_documents_it_cannot_read_naming_the_problem) {
  EXPECT_THROW(report_html(json::array(), "x.json"), std::invalid_argument);
  try {
    report_html(json{{"format", "something-else"}}, "x.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "neither a campaign report")) << e.what();
  }
  try {
    report_html(json{{"format", "accumcheck-report"}, {"results", {{"findings", "two"}}}}, "r.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "r.json: a field is missing or has the wrong type")) << e.what();
  }
  EXPECT_THROW(report_html(json{{"audit", 1}, {"runs", {{{"run", 3}}}}}, "a.json"), std::invalid_argument);
}

TEST(HtmlPage, escapes_every_string_and_keeps_script_data_inside_its_element) {
  HtmlPage page("<b>title</b>");
  page.paragraph("a <script>alert(1)</script> & \"quoted\"");
  page.table({"<th>"}, {{{"<td>", "fail"}}});
  page.chart("x", "caption", json{{"type", "bar"}, {"data", {{"labels", {"</script><script>alert(2)</script>"}}}}});
  const std::string html = page.render();
  EXPECT_FALSE(contains(html, "<script>alert(")) << html.substr(html.size() - 600);
  EXPECT_TRUE(contains(html, "a &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;"));
  EXPECT_TRUE(contains(html, "<title>&lt;b&gt;title&lt;/b&gt;</title>"));
  EXPECT_TRUE(contains(html, "\\u003c/script>\\u003cscript>alert(2)"));
}

TEST(HtmlPage, names_the_package_when_chart_js_is_missing) {
  ::setenv("ACCUMCHECK_CHART_JS", "/nonexistent/chart.min.js", 1);
  HtmlPage page("t");
  page.chart("x", "c", json{{"type", "bar"}});
  try {
    (void)page.render();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "libjs-chart.js")) << e.what();
  }
  ::unsetenv("ACCUMCHECK_CHART_JS");
}

}  // namespace
}  // namespace accumcheck::surface
