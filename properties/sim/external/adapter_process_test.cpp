// sim/external/adapter_process.h: lines come back in order and one per read, deadlines are honoured, the whole
// process group is killed and the adapter reaped, stderr is drained into a bounded tail, writes to a dead
// adapter fail without SIGPIPE, and start failures name the command and what failed.
//
// The children are /bin/sh scripts and python3 -c programs (standard library only), so every case says in one
// line what the adapter does. Deadlines for replies that must arrive are generous because the test machine is
// shared; the cases about timing use their own bounds.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

#include "sim/external/adapter_process.h"

namespace accumcheck::sim::external {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Long enough for python3 to start on a loaded machine; a healthy case never waits this long.
constexpr std::chrono::milliseconds reply_deadline = 10s;

ProcessSpec shell(std::string script) { return ProcessSpec{.argv = {"/bin/sh", "-c", std::move(script)}}; }
ProcessSpec python(std::string code) { return ProcessSpec{.argv = {"python3", "-c", std::move(code)}}; }

std::string read_text(AdapterProcess& process) {
  const ReadResult result = process.read_line(reply_deadline);
  EXPECT_EQ(result.status, ReadStatus::line) << "adapter '" << process.command() << "' " << process.exit_description()
                                             << ", stderr: " << process.stderr_tail();
  return result.line;
}

// No live process has this pid: it is gone, or a zombie that only its reaper can remove (PID 1 of a container
// may never reap orphans, and a zombie cannot run).
bool is_dead(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const std::size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

bool becomes_dead_within(pid_t pid, std::chrono::milliseconds deadline) {
  for (const auto until = Clock::now() + deadline; Clock::now() < until; std::this_thread::sleep_for(10ms))
    if (is_dead(pid)) return true;
  return is_dead(pid);
}

bool exits_within(AdapterProcess& process, std::chrono::milliseconds deadline) {
  for (const auto until = Clock::now() + deadline; Clock::now() < until; std::this_thread::sleep_for(10ms))
    if (!process.running()) return true;
  return !process.running();
}

// Reaped: no child of ours has this pid any more. WNOWAIT, because looking must not reap a zombie itself.
bool is_reaped(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == -1 && errno == ECHILD;
}

std::string start_error(ProcessSpec spec) {
  try {
    AdapterProcess process(std::move(spec));
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  ADD_FAILURE() << "the adapter started, but should not have";
  return {};
}

// A fresh directory under the system's temporary directory, removed at the end of the case.
struct TemporaryDirectory {
  TemporaryDirectory()
      : path(std::filesystem::temp_directory_path() /
             ("accumcheck_adapter_process_test_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TemporaryDirectory() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

TEST(AdapterProcess, cat_echoes_lines_in_order_one_per_read) {
  AdapterProcess process(ProcessSpec{.argv = {"cat"}});
  const std::vector<std::string> lines = {"first", "second", "", "{\"type\": \"hello\", \"id\": 0}"};
  for (const std::string& line : lines) ASSERT_TRUE(process.write_line(line, reply_deadline));
  for (const std::string& line : lines) EXPECT_EQ(read_text(process), line);
  process.terminate(5s);
  EXPECT_EQ(process.exit_description(), "exited with status 0");  // cat exits on end of file: no signal needed
}

TEST(AdapterProcess, lines_arriving_in_one_write_come_back_one_per_read) {
  AdapterProcess process(shell("printf 'a\\nb\\nc\\n'"));
  EXPECT_EQ(read_text(process), "a");
  // One write of six bytes arrives in one read: b and c are buffered and need no waiting.
  for (const char* expected : {"b", "c"}) {
    const ReadResult result = process.read_line(0ms);
    EXPECT_EQ(result.status, ReadStatus::line);
    EXPECT_EQ(result.line, expected);
  }
  const ReadResult end = process.read_line(reply_deadline);
  EXPECT_EQ(end.status, ReadStatus::closed);
  EXPECT_EQ(end.line, "");
}

TEST(AdapterProcess, a_line_larger_than_the_pipes_round_trips_through_cat) {
  // cat echoes while we are still writing: this deadlocks unless write_line reads stdout while it waits.
  std::string line(std::size_t{3} << 20, 'x');
  for (std::size_t i = 0; i < line.size(); i += 997) line[i] = static_cast<char>('a' + i % 26);
  AdapterProcess process(ProcessSpec{.argv = {"cat"}});
  ASSERT_TRUE(process.write_line(line, reply_deadline));
  const std::string echoed = read_text(process);
  EXPECT_EQ(echoed.size(), line.size());
  EXPECT_TRUE(echoed == line);
}

TEST(AdapterProcess, read_times_out_within_its_deadline_and_terminate_kills_quickly) {
  const auto test_start = Clock::now();
  AdapterProcess process(ProcessSpec{.argv = {"sleep", "30"}});
  const pid_t pid = process.pid();
  EXPECT_EQ(process.read_line(0ms).status, ReadStatus::timeout);
  const auto read_start = Clock::now();
  const ReadResult result = process.read_line(200ms);
  const auto read_time = Clock::now() - read_start;
  EXPECT_EQ(result.status, ReadStatus::timeout);
  EXPECT_GE(read_time, 200ms);
  EXPECT_LT(read_time, 5s);
  EXPECT_TRUE(process.running());
  EXPECT_EQ(process.exit_description(), "still running");
  process.terminate(100ms);
  EXPECT_FALSE(process.running());
  EXPECT_EQ(process.exit_description(), "killed by signal 15 (Terminated)");
  EXPECT_TRUE(is_reaped(pid));
  EXPECT_LT(Clock::now() - test_start, 10s);
}

TEST(AdapterProcess, terminate_kills_the_whole_process_group) {
  AdapterProcess process(shell("sleep 300 & echo $!; sleep 300"));
  const pid_t grandchild = std::stoi(read_text(process));
  EXPECT_EQ(::getpgid(process.pid()), process.pid());
  EXPECT_EQ(::getpgid(grandchild), process.pid());
  EXPECT_NE(::getpgid(0), process.pid());
  const auto terminate_start = Clock::now();
  process.terminate(100ms);
  EXPECT_LT(Clock::now() - terminate_start, 5s);
  EXPECT_TRUE(is_reaped(process.pid()));
  EXPECT_TRUE(becomes_dead_within(grandchild, 5s)) << "grandchild " << grandchild << " survived terminate()";
}

TEST(AdapterProcess, workers_left_behind_by_an_adapter_that_exits_are_killed) {
  // The shell exits at end of file on its stdin, leaving its background sleep in the group.
  AdapterProcess process(shell("sleep 300 & echo $!; read ignored; exit 4"));
  const pid_t worker = std::stoi(read_text(process));
  process.terminate(5s);
  EXPECT_EQ(process.exit_description(), "exited with status 4");
  EXPECT_TRUE(becomes_dead_within(worker, 5s)) << "worker " << worker << " survived its adapter";
}

TEST(AdapterProcess, a_partial_line_before_end_of_file_reads_as_closed_with_its_text) {
  AdapterProcess process(shell("printf partial"));
  const ReadResult result = process.read_line(reply_deadline);
  EXPECT_EQ(result.status, ReadStatus::closed);
  EXPECT_EQ(result.line, "partial");
  const ReadResult again = process.read_line(0ms);
  EXPECT_EQ(again.status, ReadStatus::closed);
  EXPECT_EQ(again.line, "");
}

TEST(AdapterProcess, a_line_past_the_limit_reads_as_too_long_and_one_at_the_limit_does_not) {
  ProcessSpec spec = python(
      "import sys, time\n"
      "sys.stdout.write('y' * (1 << 20) + '\\n')\n"
      "sys.stdout.write('x' * (2 << 20))\n"
      "sys.stdout.flush()\n"
      "time.sleep(30)\n");
  spec.line_bytes_max = std::size_t{1} << 20;
  AdapterProcess process(std::move(spec));
  EXPECT_EQ(read_text(process), std::string(std::size_t{1} << 20, 'y'));
  const ReadResult result = process.read_line(reply_deadline);
  EXPECT_EQ(result.status, ReadStatus::too_long);
  EXPECT_EQ(process.read_line(0ms).status, ReadStatus::too_long);  // the stream stays unusable
  process.terminate(0ms);
  EXPECT_EQ(process.exit_description(), "killed by signal 15 (Terminated)");
}

TEST(AdapterProcess, stderr_is_drained_while_waiting_and_its_tail_is_kept) {
  // 128 000 bytes of log, twice a pipe's capacity, before the reply: without draining the adapter blocks.
  AdapterProcess process(python(
      "import sys\n"
      "sys.stderr.write(''.join('log line %06d\\n' % i for i in range(8000)))\n"
      "sys.stderr.flush()\n"
      "print('done', flush=True)\n"));
  std::string log;
  for (int i = 0; i < 8000; ++i) {
    char line[32];
    std::snprintf(line, sizeof line, "log line %06d\n", i);
    log += line;
  }
  EXPECT_EQ(read_text(process), "done");
  const std::string tail = process.stderr_tail();
  EXPECT_EQ(tail.size(), 4096u);
  EXPECT_EQ(tail, log.substr(log.size() - 4096));
  process.terminate(5s);
  EXPECT_EQ(process.stderr_tail(), tail);  // kept after terminate(), for the caller's message
}

TEST(AdapterProcess, writing_to_an_exited_adapter_returns_false_without_sigpipe) {
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &before), 0);
  ASSERT_EQ(before.sa_handler, SIG_DFL) << "SIGPIPE is not at its default here, so this case would prove nothing";
  AdapterProcess process(shell("exit 0"));
  ASSERT_TRUE(exits_within(process, reply_deadline));
  EXPECT_FALSE(process.write_line("hello", reply_deadline));  // a SIGPIPE at its default would end the test here
  EXPECT_FALSE(process.write_line("again", reply_deadline));
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, SIG_DFL);
  sigset_t pending;
  ::sigemptyset(&pending);
  ::sigpending(&pending);
  EXPECT_EQ(::sigismember(&pending, SIGPIPE), 0);
}

TEST(AdapterProcess, writing_to_an_adapter_that_closed_its_stdin_returns_false) {
  AdapterProcess process(shell("exec 0<&-; echo ready; sleep 30"));
  EXPECT_EQ(read_text(process), "ready");
  EXPECT_FALSE(process.write_line("hello", reply_deadline));
  EXPECT_TRUE(process.running());
}

TEST(AdapterProcess, start_failures_throw_naming_the_command_and_the_cause) {
  const std::string not_on_path = start_error(ProcessSpec{.argv = {"accumcheck-no-such-adapter", "--flag"}});
  EXPECT_NE(not_on_path.find("'accumcheck-no-such-adapter --flag'"), std::string::npos) << not_on_path;
  EXPECT_NE(not_on_path.find("PATH"), std::string::npos) << not_on_path;

  const std::string missing_path = start_error(ProcessSpec{.argv = {"/nonexistent/accumcheck-adapter"}});
  EXPECT_NE(missing_path.find("/nonexistent/accumcheck-adapter"), std::string::npos) << missing_path;
  EXPECT_NE(missing_path.find("No such file or directory"), std::string::npos) << missing_path;

  const std::string not_executable = start_error(ProcessSpec{.argv = {"/etc/passwd"}});
  EXPECT_NE(not_executable.find("Permission denied"), std::string::npos) << not_executable;

  const std::string missing_directory =
      start_error(ProcessSpec{.argv = {"cat"}, .working_directory = "/nonexistent/accumcheck-directory"});
  EXPECT_NE(missing_directory.find("/nonexistent/accumcheck-directory"), std::string::npos) << missing_directory;

  EXPECT_NE(start_error(ProcessSpec{}).find("empty"), std::string::npos);
}

TEST(AdapterProcess, exit_description_names_the_status_and_the_signal) {
  AdapterProcess exits(shell("exit 3"));
  ASSERT_TRUE(exits_within(exits, reply_deadline));
  EXPECT_EQ(exits.exit_description(), "exited with status 3");
  AdapterProcess killed(shell("kill -9 $$"));
  ASSERT_TRUE(exits_within(killed, reply_deadline));
  EXPECT_EQ(killed.exit_description(), "killed by signal 9 (Killed)");
  // Observing an exit does not reap it: terminate() still finds the status, and only then is the pid released.
  EXPECT_FALSE(is_reaped(killed.pid()));
  killed.terminate(0ms);
  EXPECT_EQ(killed.exit_description(), "killed by signal 9 (Killed)");
  EXPECT_TRUE(is_reaped(killed.pid()));
}

TEST(AdapterProcess, environment_and_working_directory_are_applied) {
  const TemporaryDirectory directory;
  ASSERT_EQ(::setenv("ACCUMCHECK_TEST_INHERITED", "from-parent", 1), 0);
  ASSERT_EQ(::setenv("ACCUMCHECK_TEST_OVERRIDDEN", "parent", 1), 0);
  ProcessSpec spec = shell(
      "printf '%s|%s|%s|%s\\n' \"$ACCUMCHECK_TEST_INHERITED\" \"$ACCUMCHECK_TEST_OVERRIDDEN\" "
      "\"$ACCUMCHECK_TEST_ADDED\" \"$(pwd -P)\"");
  spec.working_directory = directory.path;
  spec.environment = {{"ACCUMCHECK_TEST_OVERRIDDEN", "child"}, {"ACCUMCHECK_TEST_ADDED", "added"}};
  AdapterProcess process(std::move(spec));
  EXPECT_EQ(read_text(process),
            "from-parent|child|added|" + std::filesystem::canonical(directory.path).string());
  ::unsetenv("ACCUMCHECK_TEST_INHERITED");
  ::unsetenv("ACCUMCHECK_TEST_OVERRIDDEN");
}

TEST(AdapterProcess, programs_are_found_relative_to_the_working_directory_and_on_the_child_path) {
  const TemporaryDirectory directory;
  const std::filesystem::path script = directory.path / "adapter.sh";
  std::ofstream(script) << "#!/bin/sh\necho \"adapter in $(pwd -P)\"\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const std::string expected = "adapter in " + std::filesystem::canonical(directory.path).string();

  AdapterProcess relative(ProcessSpec{.argv = {"./adapter.sh"}, .working_directory = directory.path});
  EXPECT_EQ(read_text(relative), expected);
  AdapterProcess on_path(ProcessSpec{.argv = {"adapter.sh"},
                                     .working_directory = directory.path,
                                     .environment = {{"PATH", directory.path.string()}}});
  EXPECT_EQ(read_text(on_path), expected);
}

TEST(AdapterProcess, only_stdin_stdout_and_stderr_are_inherited) {
  const int stray_fd = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(stray_fd, 0);
  const std::string fd = std::to_string(stray_fd);
  AdapterProcess process(shell("if [ -e /proc/self/fd/" + fd + " ]; then echo leaked; else echo clean; fi"));
  EXPECT_EQ(read_text(process), "clean");
  ::close(stray_fd);
}

TEST(AdapterProcess, the_destructor_leaves_no_child_behind) {
  const auto start = Clock::now();
  pid_t pid = -1;
  {
    AdapterProcess process(ProcessSpec{.argv = {"sleep", "30"}});
    pid = process.pid();
  }
  EXPECT_TRUE(is_reaped(pid));
  EXPECT_LT(Clock::now() - start, 5s);
}

}  // namespace
}  // namespace accumcheck::sim::external
