// fuzz/cli.h: a binary that is accumcheck plus its own engines. run_cli with engine models registers them, and
// `list targets` shows each as a user engine beside (not among) the built-in targets; a registration that clashes
// is a usage error with the clash named. The exit codes of the rest of the command are in cli_test.sh.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/cli.h"
#include "sim/examples/naive_ddp_engine.h"

namespace accumcheck::fuzz {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs the command line with `engines` registered and returns its exit status; `out` and `err` get what it printed.
int run(std::vector<std::string> args, const std::vector<std::shared_ptr<const sim::EngineModel>>& engines,
        std::string& out, std::string& err) {
  args.insert(args.begin(), "accumcheck");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), engines);
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
  const auto section = out.find("User engines");
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

}  // namespace
}  // namespace accumcheck::fuzz
