// fuzz/campaign.h: the same seed gives the same results with 1 and 2 jobs; a campaign stopped half-way and
// resumed from its state file ends where a straight run ends; the corpus replays first; findings on disk
// parse back.
#include <filesystem>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

#include "fuzz/campaign.h"

#include <atomic>

#include <nlohmann/json.hpp>

namespace accumcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("accumcheck-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// One pair that fails at once: the band-B drop seen by the membership property, its one finding written to `findings`.
CampaignConfig one_finding_campaign(const fs::path& findings);

// A report's results without the paths of finding files (the campaigns compared write to different folders).
json without_finding_files(json results) {
  for (auto& p : results.at("pairs"))
    if (!p.at("minimal").is_null()) p.at("minimal").erase("file");
  return results;
}

CampaignConfig mixed_campaign() {
  CampaignConfig c;
  c.targets = {"reference", "deepspeed@0.16.0", "openrlhf@0.10.2+reference", "deepspeed@0.19.0"};
  c.seed = 42;
  c.trials = 128;
  return c;
}

CampaignConfig one_finding_campaign(const fs::path& findings) {
  CampaignConfig c = mixed_campaign();
  c.targets = {"deepspeed@0.16.0"};
  c.properties = {"applied_gradient_holds_each_micro_batch_once"};
  c.findings_dir = findings;
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

// Sharing a trial's runs among its properties (fuzz/trial_runs.h) changes no result, findings included.
TEST(Campaign, results_do_not_depend_on_sharing_runs) {
  CampaignConfig shared = mixed_campaign(), afresh = mixed_campaign();
  shared.jobs = afresh.jobs = 2;
  afresh.share_runs = false;
  const auto a = to_json(run_campaign(shared));
  EXPECT_EQ(a.at("results"), to_json(run_campaign(afresh)).at("results"));
  EXPECT_GT(a.at("results").at("findings").get<int>(), 0);
}

// Up to 16 steps some trials pass the exact size limit, in the target's run or the shared oracle, whose exception
// every reader gets: the verdicts, cannot-runs included, still do not depend on sharing.
TEST(Campaign, results_do_not_depend_on_sharing_the_oracle_at_the_size_limit) {
  CampaignConfig shared = mixed_campaign();
  shared.targets = {"reference", "deepspeed@0.16.0"};
  shared.properties = {"accumulated_update_equals_full_batch_update", "multi_step_trajectory_equals_full_batch_trajectory"};
  shared.generator.step_count_max = 16;
  shared.trials = 64;
  CampaignConfig afresh = shared;
  afresh.share_runs = false;
  const auto a = to_json(run_campaign(shared));
  EXPECT_EQ(a.at("results"), to_json(run_campaign(afresh)).at("results"));
  EXPECT_NE(a.at("results").dump().find("4096 bits"), std::string::npos) << "no trial reached the limit";
}

// Chunks of 1, 7 and 64 trials (each doubling while quick) fold to the same results: the fold is in trial order.
TEST(Campaign, results_do_not_depend_on_the_chunk_size) {
  CampaignConfig base = mixed_campaign();  // 128 trials: a first chunk of 64 and one of 128 or less
  base.jobs = 2;
  const auto want = to_json(run_campaign(base)).at("results");
  for (const std::uint64_t first : {1, 7}) {
    CampaignConfig other = base;
    other.first_chunk_trials = first;
    EXPECT_EQ(to_json(run_campaign(other)).at("results"), want) << "first chunk of " << first << " trials";
  }
  CampaignConfig none = base;
  none.first_chunk_trials = 0;
  EXPECT_THROW(run_campaign(none), std::invalid_argument);
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
  // Finding file paths differ by folder; everything else must match.
  EXPECT_EQ(without_finding_files(to_json(resumed).at("results")), without_finding_files(expected.at("results")));
  // A state file from another campaign is refused.
  CampaignConfig other = rest;
  other.seed = 43;
  EXPECT_THROW(run_campaign(other), std::invalid_argument);
  fs::remove_all(dir);
}

TEST(Campaign, the_corpus_replays_first_and_findings_parse_back) {
  const fs::path dir = fresh_dir("corpus");
  CampaignConfig find = one_finding_campaign(dir / "corpus");
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
  // A number no double holds, and a field of the wrong type, are named as such (no raw library exception).
  EXPECT_NE(error_of("{\"format\": \"accumcheck-finding\", \"version\": 1e400}").find("is not valid JSON"), std::string::npos);
  {
    const CampaignReport r = run_campaign(one_finding_campaign(dir / "f"));
    ASSERT_EQ(r.findings(), 1u);
    EXPECT_EQ(read_json_file(*r.pairs[0].finding_path).at("replay"), "accumcheck replay " + r.pairs[0].finding_path->string());
    json j = read_json_file(*r.pairs[0].finding_path);
    j["shrink"]["attempts"] = "many";
    EXPECT_NE(error_of(j.dump()).find("finding: a field has the wrong type or value"), std::string::npos) << error_of(j.dump());
  }
  fs::remove_all(dir);
}

// A resumed campaign's report equals an uninterrupted one's, the corpus replays included, and the state names
// finding files by absolute path, so the campaign resumes from another folder.
TEST(Campaign, a_resumed_report_keeps_the_corpus_and_resumes_from_another_folder) {
  const fs::path dir = fresh_dir("resume-corpus");
  ASSERT_EQ(run_campaign(one_finding_campaign(dir / "corpus")).findings(), 1u);

  auto campaign = [&](const std::string& findings) {
    CampaignConfig c = mixed_campaign();
    c.corpus_dir = dir / "corpus";
    c.findings_dir = fs::path(findings);
    return c;
  };
  const fs::path old_cwd = fs::current_path();
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  fs::current_path(dir);
  const auto straight = to_json(run_campaign(campaign("straight"))).at("results");
  CampaignConfig first = campaign("resumed");
  first.trials = 64;
  first.state_path = dir / "state.json";
  fs::current_path(dir / "a");
  run_campaign(first);
  CampaignConfig rest = campaign(dir / "resumed");
  rest.state_path = dir / "state.json";
  fs::current_path(dir / "b");  // another folder: the relative findings folder of the first part is not here
  const auto resumed = to_json(run_campaign(rest)).at("results");
  fs::current_path(old_cwd);
  EXPECT_EQ(resumed.at("corpus"), straight.at("corpus"));
  EXPECT_FALSE(resumed.at("corpus").empty());
  EXPECT_EQ(without_finding_files(resumed), without_finding_files(straight));
  fs::remove_all(dir);
}

// Asked to stop, a campaign ends before the first trial it did not check completely, saves its state, and
// resuming gives the uninterrupted results.
TEST(Campaign, an_interrupted_campaign_saves_a_state_that_resumes_to_the_same_results) {
  const fs::path dir = fresh_dir("interrupt");
  CampaignConfig straight = mixed_campaign();
  straight.trials = 256;
  straight.findings_dir = dir / "straight";
  const auto want = to_json(run_campaign(straight)).at("results");

  std::atomic<bool> stop{false};
  CampaignConfig first = straight;
  first.findings_dir = dir / "resumed";
  first.state_path = dir / "state.json";
  first.stop = &stop;
  std::uint64_t chunks = 0;
  const CampaignReport interrupted = run_campaign(first, [&](const Progress&) {
    if (++chunks == 2) stop = true;  // after the corpus and the first chunk
  });
  EXPECT_TRUE(interrupted.interrupted);
  EXPECT_EQ(interrupted.trials, kChunkTrials);
  EXPECT_TRUE(to_json(interrupted).at("timing").at("interrupted").get<bool>());
  CampaignConfig rest = first;
  rest.stop = nullptr;
  const CampaignReport resumed = run_campaign(rest);
  EXPECT_FALSE(resumed.interrupted);
  EXPECT_EQ(without_finding_files(to_json(resumed).at("results")), without_finding_files(want));
  fs::remove_all(dir);
}

// Finding files of different campaigns never overwrite each other; the same finding again keeps its file.
TEST(Campaign, finding_files_of_different_campaigns_do_not_collide) {
  const fs::path dir = fresh_dir("names");
  std::size_t findings = 0;
  for (std::uint64_t seed : {1, 2, 1}) {
    CampaignConfig c = mixed_campaign();
    c.seed = seed;
    c.findings_dir = dir;
    const CampaignReport r = run_campaign(c);
    if (seed != 1 || findings == 0) findings += r.findings();
  }
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_NE(entry.path().filename().string().find("--s"), std::string::npos) << entry.path();
  }
  EXPECT_GT(findings, 0u);
  EXPECT_EQ(files, findings) << "two seeds' findings, the first seed's once though it ran twice";

  // A different finding under the name of another is never overwritten.
  const CampaignReport r = run_campaign(one_finding_campaign(dir / "one"));
  ASSERT_EQ(r.findings(), 1u);
  Finding changed = *r.pairs[0].finding;
  changed.verdict.message += " (changed)";
  const fs::path path = *r.pairs[0].finding_path;
  std::ofstream(path) << to_json(changed).dump(2);
  const fs::path written = write_finding(dir / "one", *r.pairs[0].finding);
  EXPECT_NE(written, path);
  EXPECT_TRUE(written.filename().string().ends_with("-2.json")) << written;
  EXPECT_EQ(finding_from_json(read_json_file(path)).verdict.message, changed.verdict.message);
  fs::remove_all(dir);
}

// Reports, state and findings are written only to new paths or over regular files; a failed write leaves nothing.
TEST(Campaign, writes_refuse_devices_symbolic_links_and_folders) {
  const fs::path dir = fresh_dir("writes");
  auto error_of = [](const fs::path& path) {
    try {
      write_json_atomically(path, json{{"a", 1}});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("written");
  };
  EXPECT_NE(error_of("/dev/null").find("is a device, not a regular file"), std::string::npos) << error_of("/dev/null");
  { std::ofstream(dir / "target.json") << "{}"; }
  fs::create_symlink(dir / "target.json", dir / "link.json");
  EXPECT_NE(error_of(dir / "link.json").find("is a symbolic link"), std::string::npos);
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_NE(error_of(dir).find("is a folder"), std::string::npos);
  EXPECT_EQ(error_of(dir / "new.json"), "written");
  EXPECT_EQ(error_of(dir / "new.json"), "written");  // over a regular file
  // A write that fails (here a folder without write permission; a full disk the same way) names the file.
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() != 0) {
    EXPECT_NE(error_of(dir / "denied.json").find("cannot write"), std::string::npos);
  }
  fs::permissions(dir, fs::perms::owner_all);
  // A disk that fills in the middle of the write (a file size limit stands in for it: write() fails with EFBIG):
  // the error names the file and the half-written temporary file is gone.
  {
    struct rlimit old_limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    std::string error;
    try {
      write_json_atomically(dir / "big.json", json{{"a", std::string(100000, 'x')}});
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_NE(error.find("cannot write " + (dir / "big.json").string()), std::string::npos) << error;
    EXPECT_FALSE(fs::exists(dir / "big.json"));
  }
  for (const auto& entry : fs::directory_iterator(dir)) EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  fs::remove_all(dir);
}

// A damaged state file is an input error naming it, never a JSON library's exception.
TEST(Campaign, a_damaged_state_file_is_named) {
  const fs::path dir = fresh_dir("damaged");
  CampaignConfig c = mixed_campaign();
  c.trials = 64;
  c.state_path = dir / "state.json";
  c.findings_dir = dir / "f";
  run_campaign(c);
  json state = read_json_file(dir / "state.json");
  state["pairs"][0].erase("trials");
  std::ofstream(dir / "state.json") << state.dump();
  try {
    run_campaign(c);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("state.json is damaged"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace accumcheck::fuzz
