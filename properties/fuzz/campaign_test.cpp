// fuzz/campaign.h: the same seed gives the same results with 1 and 2 jobs; a campaign stopped half-way and
// resumed from its state file ends where a straight run ends; the corpus replays first; findings on disk
// parse back.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "fuzz/campaign.h"

namespace accumcheck::fuzz {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("accumcheck-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

CampaignConfig mixed_campaign() {
  CampaignConfig c;
  c.targets = {"reference", "deepspeed@0.16.0", "openrlhf@0.10.2+reference", "deepspeed@0.19.0"};
  c.seed = 42;
  c.trials = 128;
  return c;
}

TEST(Campaign, results_do_not_depend_on_the_number_of_jobs) {
  CampaignConfig one = mixed_campaign(), two = mixed_campaign();
  one.jobs = 1;
  two.jobs = 2;
  const auto a = to_json(run_campaign(one));
  const auto b = to_json(run_campaign(two));
  EXPECT_EQ(a.at("results"), b.at("results"));
  EXPECT_GT(a.at("results").at("findings").get<int>(), 0);
}

TEST(Campaign, a_stopped_campaign_resumes_to_the_same_results) {
  const fs::path dir = fresh_dir("resume");
  CampaignConfig straight = mixed_campaign();
  straight.findings_dir = dir / "straight";
  const auto expected = to_json(run_campaign(straight));

  CampaignConfig first = mixed_campaign();
  first.trials = 64;  // "killed" after one chunk
  first.findings_dir = dir / "resumed";
  first.state_path = dir / "state.json";
  run_campaign(first);
  CampaignConfig rest = mixed_campaign();
  rest.findings_dir = dir / "resumed";
  rest.state_path = dir / "state.json";
  const CampaignReport resumed = run_campaign(rest);
  EXPECT_TRUE(resumed.resumed);
  auto results = to_json(resumed).at("results");
  auto want = expected.at("results");
  // Finding file paths differ by folder; everything else must match.
  for (auto* r : {&results, &want})
    for (auto& p : r->at("pairs"))
      if (!p.at("minimal").is_null()) p.at("minimal").erase("file");
  EXPECT_EQ(results, want);
  // A state file from another campaign is refused.
  CampaignConfig other = rest;
  other.seed = 43;
  EXPECT_THROW(run_campaign(other), std::invalid_argument);
  fs::remove_all(dir);
}

TEST(Campaign, the_corpus_replays_first_and_findings_parse_back) {
  const fs::path dir = fresh_dir("corpus");
  CampaignConfig find = mixed_campaign();
  find.targets = {"deepspeed@0.16.0"};
  find.properties = {"applied_gradient_holds_each_micro_batch_once"};
  find.findings_dir = dir / "corpus";
  const CampaignReport found = run_campaign(find);
  ASSERT_EQ(found.findings(), 1u);
  const Finding back = finding_from_json(read_json_file(*found.pairs[0].finding_path));
  EXPECT_EQ(to_json(back), to_json(*found.pairs[0].finding));
  for (const auto& entry : fs::directory_iterator(dir / "corpus")) EXPECT_EQ(entry.path().extension(), ".json");  // no temp files left

  CampaignConfig replay = find;
  replay.seed = 7;
  replay.corpus_dir = dir / "corpus";
  replay.findings_dir = dir / "new";
  const CampaignReport again = run_campaign(replay);
  ASSERT_EQ(again.corpus.size(), 1u);
  EXPECT_EQ(again.corpus[0].outcome, properties::Outcome::fail);
  EXPECT_TRUE(again.pairs[0].from_corpus);
  EXPECT_EQ(again.pairs[0].trials, 0u);
  fs::remove_all(dir);
}

TEST(Campaign, bad_configurations_are_refused_with_the_reason) {
  CampaignConfig c = mixed_campaign();
  c.properties = {"no_such_property"};
  EXPECT_THROW(run_campaign(c), std::invalid_argument);
  c = mixed_campaign();
  c.trials.reset();
  EXPECT_THROW(run_campaign(c), std::invalid_argument);
  c = mixed_campaign();
  c.targets = {"deepspeed@banana"};
  EXPECT_THROW(run_campaign(c), std::invalid_argument);
}

TEST(Campaign, finding_files_with_problems_are_named) {
  const fs::path dir = fresh_dir("bad");
  auto error_of = [&](const std::string& text) {
    const fs::path file = dir / "f.json";
    { std::ofstream(file) << text; }
    try {
      finding_from_json(read_json_file(file));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of("{not json").find("is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"other\"}").find("not an accumcheck finding"), std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"accumcheck-finding\", \"version\": 9}").find("unsupported version"), std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"accumcheck-finding\", \"version\": 1}").find("missing field 'target'"), std::string::npos);
  EXPECT_THROW(read_json_file(dir / "absent.json"), std::invalid_argument);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace accumcheck::fuzz
