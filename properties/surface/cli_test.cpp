// surface/cli.h: a binary that is accumcheck plus its own engines. run_cli with engine models registers them, and
// `list targets` shows each as a user engine beside (not among) the built-in targets; a registration that clashes
// is a usage error with the clash named. The exit codes of the rest of the command are in cli_test.sh.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "surface/cli.h"
#include "fuzz/finding.h"
#include "sim/examples/naive_ddp_engine.h"

namespace accumcheck::surface {

using namespace fuzz;  // the search engine this surface drives
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::shared_ptr<const sim::EngineModel> leaky(const std::string& name = "naive-ddp-leaky") {
  return std::make_shared<sim::examples::NaiveDdpEngineModel>(name, sim::examples::NaiveDdpFaults{.skip_zero_grad_after_step = true});
}

// Registrations last for the process, and a test binary run by hand runs every test in one: "naive-ddp-leaky"
// is registered once (list_targets_... registers it too), and the command lines below run without engines.
void register_leaky_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!sim::find_engine_model("naive-ddp-leaky")) sim::register_engine_model(leaky());  // the first test may have
  });
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A report's results without the paths of finding files (campaigns compared here write to different folders).
nlohmann::json without_files(nlohmann::json results) {
  for (auto& p : results["pairs"])
    if (p["minimal"].is_object()) p["minimal"].erase("file");
  return results;
}

// A fresh folder for one test's files.
std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("accumcheck-cli-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs the command line as `program`, with `engines` registered (none: the plain command line, for the later calls
// of a test, since registrations last for the process), and returns its exit status; `out` and `err` get what it
// printed.
int run(std::vector<std::string> args, const std::vector<std::shared_ptr<const sim::EngineModel>>& engines,
        std::string& out, std::string& err, const std::string& program = "accumcheck") {
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = engines.empty() ? run_cli(static_cast<int>(argv.size()), argv.data())
                                   : run_cli(static_cast<int>(argv.size()), argv.data(), engines);
  std::fflush(stdout);
  std::fflush(stderr);
  out = testing::internal::GetCapturedStdout();
  err = testing::internal::GetCapturedStderr();
  return code;
}

TEST(Cli, list_targets_shows_registered_user_engines_marked_as_user_engines) {
  std::string out, err;
  const int code = run({"list", "targets"},
                       {std::make_shared<sim::examples::NaiveDdpEngineModel>(),
                        std::make_shared<sim::examples::NaiveDdpEngineModel>(
                            "naive-ddp-leaky", sim::examples::NaiveDdpFaults{.skip_zero_grad_after_step = true})},
                       out, err);
  ASSERT_EQ(code, kExitClean) << err;
  const auto section = out.find("Registered engines");
  ASSERT_NE(section, std::string::npos) << out;
  const std::string built_in = out.substr(0, section), user = out.substr(section);
  EXPECT_TRUE(contains(built_in, "deepspeed@0.16.0")) << out;
  EXPECT_FALSE(contains(built_in, "[user engine]")) << out;
  EXPECT_FALSE(contains(built_in, "naive-ddp")) << out;
  EXPECT_TRUE(contains(user, "naive-ddp ")) << out;
  EXPECT_TRUE(contains(user, "naive-ddp-leaky ")) << out;
  EXPECT_TRUE(contains(user, "[user engine] example user engine, PyTorch DDP loop that forgets zero_grad()")) << out;
  EXPECT_LT(user.find("naive-ddp "), user.find("naive-ddp-leaky ")) << "registration order: " << out;
}

TEST(Cli, an_engine_that_clashes_with_a_built_in_one_is_a_usage_error_with_the_clash_named) {
  std::string out, err;
  const int code =
      run({"list", "targets"}, {std::make_shared<sim::examples::NaiveDdpEngineModel>("reference")}, out, err);
  EXPECT_EQ(code, kExitUsage);
  EXPECT_TRUE(contains(err, "the name 'reference' clashes with a built-in engine model")) << err;
  EXPECT_TRUE(out.empty()) << out;
}

// --stop-at-first-finding ends at the first failing trial of the campaign without it, with the same finding, and
// the results do not depend on --jobs.
TEST(Cli, a_campaign_stops_at_its_first_finding_and_times_it) {
  const auto dir = scratch("stop");
  std::string out, err;
  const std::vector<std::string> common = {"fuzz", "--target", "naive-ddp-leaky", "--seed", "3", "--trials", "640", "--no-corpus", "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  register_leaky_once();
  ASSERT_EQ(run(with({"--findings", (dir / "all").string(), "--report", (dir / "all.json").string()}), {}, out, err), kExitFindings)
      << out << err;
  const auto all = read_json(dir / "all.json");
  std::uint64_t first = UINT64_MAX;
  for (const auto& p : all["results"]["pairs"])
    if (p["found"].get<bool>()) first = std::min(first, p["trials_to_first_failure"].get<std::uint64_t>());
  ASSERT_NE(first, UINT64_MAX) << all.dump(1);
  EXPECT_FALSE(all["results"]["stopped_at_first_finding"].get<bool>());

  nlohmann::json stopped[2];
  for (int jobs : {1, 2}) {
    const std::string name = "stop" + std::to_string(jobs);
    ASSERT_EQ(run(with({"--stop-at-first-finding", "--jobs", std::to_string(jobs), "--findings", (dir / name).string(), "--report",
                        (dir / (name + ".json")).string()}),
                  {}, out, err),
              kExitFindings)
        << out << err;
    EXPECT_TRUE(contains(out, "stopped at the first finding (--stop-at-first-finding): trial " + std::to_string(first - 1))) << out;
    stopped[jobs - 1] = read_json(dir / (name + ".json"));
  }
  EXPECT_EQ(without_files(stopped[0]["results"]), without_files(stopped[1]["results"]));
  const auto results = without_files(stopped[0]["results"]);
  const auto unstopped = without_files(all["results"]);
  EXPECT_TRUE(results["stopped_at_first_finding"].get<bool>());
  EXPECT_EQ(results["trials"].get<std::uint64_t>(), first);
  std::size_t found = 0;
  for (std::size_t i = 0; i < results["pairs"].size(); ++i) {
    const auto& p = results["pairs"][i];
    EXPECT_EQ(p["trials"].get<std::uint64_t>(), first) << p.dump();  // every pair ran up to the stopping trial, no further
    if (!p["found"].get<bool>()) continue;
    ++found;
    EXPECT_EQ(p["trials_to_first_failure"].get<std::uint64_t>(), first);
    EXPECT_EQ(p["found_by"], "generated trial");
    EXPECT_EQ(p["minimal"], unstopped["pairs"][i]["minimal"]) << "the same finding as without the flag";
    const auto& timing = stopped[0]["timing"]["pairs"][i];
    EXPECT_GT(timing["seconds_to_first_failure"].get<double>(), 0.0);
    EXPECT_LE(timing["seconds_to_first_failure"].get<double>(), stopped[0]["timing"]["seconds"].get<double>());
  }
  EXPECT_GE(found, 1u);
  std::filesystem::remove_all(dir);
}

// A finding from the corpus says so, by file, and ends a --stop-at-first-finding campaign before any generated
// trial; a --corpus that is not a folder is a usage error.
TEST(Cli, a_corpus_finding_names_its_file_and_a_missing_corpus_is_refused) {
  const auto dir = scratch("corpus");
  std::string out, err;
  register_leaky_once();
  ASSERT_EQ(run({"fuzz", "--target", "naive-ddp-leaky", "--seed", "3", "--trials", "640", "--no-corpus", "--quiet", "--stop-at-first-finding",
                 "--findings", (dir / "corpus").string()},
                {}, out, err),
            kExitFindings)
      << out << err;
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "corpus")) files.insert(entry.path().filename().string());
  ASSERT_FALSE(files.empty());
  ASSERT_EQ(run({"fuzz", "--target", "naive-ddp-leaky", "--seed", "4", "--trials", "64", "--quiet", "--stop-at-first-finding", "--corpus",
                 (dir / "corpus").string(), "--findings", (dir / "new").string(), "--report", (dir / "report.json").string()},
                {}, out, err),
            kExitFindings)
      << out << err;
  EXPECT_TRUE(contains(out, "corpus: " + (dir / "corpus").string() + " (" + std::to_string(files.size()) + " finding file(s)")) << out;
  EXPECT_TRUE(contains(out, "by the corpus file " + *files.begin() + ", before any generated trial")) << out;
  EXPECT_TRUE(contains(out, "stopped at the first finding (--stop-at-first-finding): from the corpus")) << out;
  const auto report = read_json(dir / "report.json");
  EXPECT_EQ(report["results"]["trials"], 0);
  bool named = false;
  for (const auto& p : report["results"]["pairs"])
    if (p["found"].get<bool>()) {
      EXPECT_EQ(p["found_by"], "corpus");
      EXPECT_EQ(files.count(p["corpus_file"].get<std::string>()), 1u) << p.dump();
      EXPECT_TRUE(p["trials_to_first_failure"].is_null());
      named = true;
    }
  EXPECT_TRUE(named) << report.dump(1);
  EXPECT_EQ(run({"fuzz", "--target", "reference", "--trials", "1", "--corpus", (dir / "no-such-folder").string()}, {}, out, err), kExitUsage);
  EXPECT_TRUE(contains(err, "--corpus " + (dir / "no-such-folder").string() + ": not a folder")) << err;
  std::filesystem::remove_all(dir);
}

// A user's binary: its findings, explanations and exports say to replay with that binary, not plain accumcheck.
TEST(Cli, findings_of_a_users_binary_replay_with_that_binary) {
  const auto dir = scratch("program");
  std::string out, err;
  const std::string program = "./build/my-engines";
  ASSERT_EQ(run({"fuzz", "--target", "naive-ddp-leaky-program", "--seed", "3", "--trials", "640", "--no-corpus", "--quiet",
                 "--stop-at-first-finding", "--findings", dir.string()},
                {leaky("naive-ddp-leaky-program")}, out, err, program),
            kExitFindings)
      << out << err;
  std::filesystem::path file;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) file = entry.path();
  ASSERT_FALSE(file.empty());
  EXPECT_TRUE(contains(out, "replay: " + program + " replay " + file.string())) << out;
  EXPECT_EQ(read_json(file)["replay"], program + " replay " + file.string());  // with its folder, as written
  ASSERT_EQ(run({"explain", file.string()}, {}, out, err, program), kExitClean) << err;
  EXPECT_TRUE(contains(out, "Replay: " + program + " replay " + file.filename().string())) << out;
  ASSERT_EQ(run({"export", file.string(), "--format", "markdown"}, {}, out, err, program), kExitClean) << err;
  EXPECT_TRUE(contains(out, program + " replay " + file.filename().string())) << out;
  EXPECT_FALSE(contains(out, "accumcheck replay")) << out;
  std::filesystem::remove_all(dir);
}

// A build's own subcommand (the CUDA batched mode is one): listed by --help, handed everything after its name
// (its own --help included) and its exit code returned; a name that clashes is refused.
TEST(Cli, an_extension_command_gets_its_arguments_and_gives_the_exit_code) {
  static std::vector<std::string> seen;
  static std::once_flag once;
  std::call_once(once, [] {
    register_extension_command({"echo-args", "Test command: prints its arguments", [](int argc, char** argv) {
                                  seen.assign(argv, argv + argc);
                                  return 4;
                                }});
  });
  std::string out, err;
  EXPECT_EQ(run({"echo-args", "--trials", "3", "--help", "x"}, {}, out, err), 4) << err;
  EXPECT_EQ(seen, (std::vector<std::string>{"echo-args", "--trials", "3", "--help", "x"}));
  ASSERT_EQ(run({"--help"}, {}, out, err), kExitClean);
  EXPECT_TRUE(contains(out, "echo-args")) << out;
  EXPECT_TRUE(contains(out, "Test command: prints its arguments")) << out;
  const auto run_it = [](int, char**) { return 0; };
  EXPECT_THROW(register_extension_command({"fuzz", "clash", run_it}), std::invalid_argument);
  EXPECT_THROW(register_extension_command({"echo-args", "again", run_it}), std::invalid_argument);
  EXPECT_THROW(register_extension_command({"", "no name", run_it}), std::invalid_argument);
  EXPECT_THROW(register_extension_command({"no-run", "nothing runs it", {}}), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::surface
