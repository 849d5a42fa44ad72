// AdapterProcess: fork and exec with a status pipe, nonblocking pipes polled against deadlines, process groups.
//
// Starting: everything the child needs (argv, envp, the resolved program, the working directory) is built
// before fork, because between fork and exec in a multithreaded parent only async-signal-safe calls are
// allowed: no allocation, no locks. The child reports a failure before exec as (stage, errno) on a
// close-on-exec pipe; exec closes that pipe, so an empty read in the parent means exec succeeded, and a full
// one names the stage that failed. Signals are blocked across fork so that no parent handler runs in the child;
// the child resets every disposition and unblocks everything just before exec.
//
// Waiting: every wait is poll(2) with the milliseconds left to a deadline, retried on EINTR, and whatever is
// readable on stdout and stderr is read meanwhile (stdout into a buffer bounded by the line limit, stderr into
// a tail), so no call outlives its deadline and no pipe stays full while we wait on another.
//
// Stopping: the exit is observed with waitid(WNOWAIT), which leaves the adapter a zombie until terminate()
// reaps it. The unreaped zombie keeps its pid, and so its process group id, from being reused, so the last
// SIGKILL to the group can never reach an unrelated process.
#include "sim/external/adapter_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "models/assert.h"

namespace accumcheck::sim::external {
namespace {

// One read(2) asks for this much; 64 KiB is a pipe's default capacity on Linux.
constexpr std::size_t read_chunk_bytes = std::size_t{64} << 10;
// One drain reads at most this much from one pipe, so that an adapter writing without pause cannot hold a call
// past its deadline: the loops around a drain check the clock between drains.
constexpr std::size_t drain_bytes_max = std::size_t{1} << 20;
// How often terminate() looks for the exit while it drains the pipes.
constexpr int exit_poll_interval_ms = 5;
// The longest deadline honoured; longer ones are clamped so that now + deadline cannot overflow the clock.
constexpr std::chrono::hours deadline_max{24 * 365};
// When close_range(2) is missing (Linux < 5.11), descriptors up to RLIMIT_NOFILE are marked one by one, capped.
constexpr rlim_t fd_limit_max = rlim_t{1} << 20;

// What the child was doing when it failed, reported with errno on the status pipe.
enum ChildStage : int { stage_stdio = 1, stage_process_group, stage_working_directory, stage_exec };
struct ChildFailure {
  int stage;
  int error_number;
};

// Everything the child touches between fork and exec, prepared by the parent.
struct ChildPlan {
  int stdin_fd;   // read end of the stdin pipe
  int stdout_fd;  // write end of the stdout pipe
  int stderr_fd;  // write end of the stderr pipe
  int status_fd;  // write end of the status pipe
  const char* working_directory;  // nullptr: inherit
  const char* program;
  char* const* argv;
  char* const* envp;
  int fd_limit;
};

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

std::string errno_text(int error_number) { return std::system_category().message(error_number); }

[[noreturn]] void throw_start_error(const std::string& command, const std::string& what) {
  throw std::runtime_error("cannot start adapter '" + command + "': " + what);
}

// The command line as a shell would read it back, for messages.
std::string describe_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& arg : argv) {
    if (!out.empty()) out += ' ';
    if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::chrono::steady_clock::time_point deadline_from_now(std::chrono::milliseconds deadline) {
  return std::chrono::steady_clock::now() +
         std::clamp<std::chrono::milliseconds>(deadline, std::chrono::milliseconds(0), deadline_max);
}

// Milliseconds left to `until`, rounded up so that a wait never ends just before its deadline and spins.
int remaining_ms(std::chrono::steady_clock::time_point until) {
  const auto left = until - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  return static_cast<int>(std::min<long long>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), INT_MAX));
}

// A descriptor at 3 or above: the child dup2()s its pipe ends onto 0, 1 and 2, which must not be pipe ends
// themselves (they are when our own standard descriptors are closed). Returns -1 with errno set.
int above_stdio(int fd) {
  if (fd > STDERR_FILENO) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  const int saved_errno = errno;
  ::close(fd);
  errno = saved_errno;
  return moved;
}

// A pipe with both ends close-on-exec (so children started concurrently by other threads do not inherit it)
// and above the standard descriptors. Returns false with errno set.
bool make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end.reset(above_stdio(fds[0]));
  write_end.reset(above_stdio(fds[1]));
  return read_end.get() >= 0 && write_end.get() >= 0;
}

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// The inherited environment with the spec's entries added or overriding, as NAME=value strings.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& overrides,
                                           const std::string& command) {
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) entries.emplace_back(*entry);
  for (const auto& [name, value] : overrides) {
    if (name.empty() || name.find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
        value.find('\0') != std::string::npos)
      throw_start_error(command, "environment variable name '" + name +
                                     "' is empty or holds '=' or a NUL byte, or its value holds a NUL byte");
    const std::string prefix = name + "=";
    std::erase_if(entries, [&](const std::string& entry) { return entry.starts_with(prefix); });
    entries.push_back(prefix + value);
  }
  return entries;
}

// argv[0] as exec will be given it: itself when it holds a '/', else the first executable regular file named
// so in a PATH directory (an empty entry is the working directory, as in execvp). Relative candidates are
// checked against the working directory the child will have. nullopt when there is none.
std::optional<std::string> resolve_program(const std::string& name, const std::vector<std::string>& environment,
                                           const std::filesystem::path& working_directory, std::string& path_used) {
  if (name.find('/') != std::string::npos) return name;
  path_used = "/bin:/usr/bin";  // execvp's default when PATH is unset
  for (const std::string& entry : environment)
    if (entry.starts_with("PATH=")) path_used = entry.substr(5);
  std::string_view rest = path_used;
  for (;;) {
    const std::size_t colon = rest.find(':');
    const std::string_view directory = rest.substr(0, colon);
    const std::string candidate = (directory.empty() ? std::string(".") : std::string(directory)) + "/" + name;
    const std::filesystem::path checked =
        candidate.front() == '/' || working_directory.empty() ? std::filesystem::path(candidate)
                                                               : working_directory / candidate;
    struct stat info {};
    if (::stat(checked.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(checked.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(colon + 1);
  }
}

// The child between fork and exec: async-signal-safe calls only. Never returns.
[[noreturn]] void run_child(const ChildPlan& plan) {
  const auto fail = [&](int stage) {
    const ChildFailure failure{stage, errno};
    // A failed report still ends in _exit(127); the parent then sees an exit without a report.
    [[maybe_unused]] const ssize_t ignored = ::write(plan.status_fd, &failure, sizeof failure);
    ::_exit(127);
  };
  // Every plan descriptor is above 2 (above_stdio), so each dup2 makes a fresh descriptor, without close-on-exec.
  if (::dup2(plan.stdin_fd, STDIN_FILENO) < 0 || ::dup2(plan.stdout_fd, STDOUT_FILENO) < 0 ||
      ::dup2(plan.stderr_fd, STDERR_FILENO) < 0)
    fail(stage_stdio);
  if (::setpgid(0, 0) != 0) fail(stage_process_group);
  // Whatever else this process had open (our pipes, and descriptors other threads opened without O_CLOEXEC)
  // closes at exec; the status pipe stays open until then, which is what reports success.
  if (::close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    for (int fd = STDERR_FILENO + 1; fd < plan.fd_limit; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (plan.working_directory != nullptr && ::chdir(plan.working_directory) != 0) fail(stage_working_directory);
  // Ignored signals stay ignored across exec: an adapter must start with the defaults (a SIGPIPE we ignore
  // would otherwise turn its broken pipes into silent EPIPEs). Signals are blocked until just before exec.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal_number = 1; signal_number < NSIG; ++signal_number)
    if (signal_number != SIGKILL && signal_number != SIGSTOP) ::sigaction(signal_number, &default_action, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.program, plan.argv, plan.envp);
  fail(stage_exec);
  ::_exit(127);  // unreachable: fail() exits
}

std::string exec_hint(int error_number) {
  switch (error_number) {
    case EACCES: return " (is it executable? chmod +x)";
    case ENOEXEC: return " (not a binary, and no '#!' line)";
    case ENOENT: return " (no such file, or its '#!' interpreter is missing)";
    default: return "";
  }
}

// Blocks SIGPIPE in this thread while it lives, and consumes the SIGPIPE a failed write raised, so that a
// broken pipe is an EPIPE return and never a signal, without touching the process-wide disposition.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t pending;
    ::sigemptyset(&pending);
    ::sigpending(&pending);
    was_pending_ = ::sigismember(&pending, SIGPIPE) == 1;
    sigset_t block;
    ::sigemptyset(&block);
    ::sigaddset(&block, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &block, &old_mask_);
  }
  ~SigpipeBlock() {
    // A SIGPIPE pending before we blocked is someone else's: leave it for them.
    if (raised_ && !was_pending_) {
      sigset_t sigpipe;
      ::sigemptyset(&sigpipe);
      ::sigaddset(&sigpipe, SIGPIPE);
      const timespec zero{0, 0};
      while (::sigtimedwait(&sigpipe, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

  void note_raised() { raised_ = true; }

 private:
  sigset_t old_mask_;
  bool was_pending_ = false;
  bool raised_ = false;
};

}  // namespace

AdapterProcess::AdapterProcess(ProcessSpec spec) : spec_(std::move(spec)), command_(describe_command(spec_.argv)) {
  if (spec_.argv.empty() || spec_.argv.front().empty()) throw_start_error(command_, "the command is empty");
  for (const std::string& arg : spec_.argv)
    if (arg.find('\0') != std::string::npos) throw_start_error(command_, "an argument holds a NUL byte");

  const std::vector<std::string> environment = child_environment(spec_.environment, command_);
  std::string path_used;
  const std::optional<std::string> program =
      resolve_program(spec_.argv.front(), environment, spec_.working_directory, path_used);
  if (!program)
    throw_start_error(command_, "'" + spec_.argv.front() + "' is not an executable file in any PATH directory (PATH=" +
                                    path_used + "); give its path, or add its directory to PATH");

  UniqueFd stdin_read, stdin_write, stdout_read, stdout_write, stderr_read, stderr_write, status_read, status_write;
  if (!make_pipe(stdin_read, stdin_write) || !make_pipe(stdout_read, stdout_write) ||
      !make_pipe(stderr_read, stderr_write) || !make_pipe(status_read, status_write))
    throw_start_error(command_, "cannot create pipes: " + errno_text(errno));
  if (!set_nonblocking(stdin_write.get()) || !set_nonblocking(stdout_read.get()) ||
      !set_nonblocking(stderr_read.get()))
    throw_start_error(command_, "cannot make its pipes nonblocking: " + errno_text(errno));

  std::vector<char*> argv;
  for (const std::string& arg : spec_.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : environment) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  rlimit fd_rlimit{};
  const rlim_t fd_limit =
      ::getrlimit(RLIMIT_NOFILE, &fd_rlimit) == 0 && fd_rlimit.rlim_cur != RLIM_INFINITY
          ? std::min(fd_rlimit.rlim_cur, fd_limit_max)
          : fd_limit_max;
  const ChildPlan plan{
      .stdin_fd = stdin_read.get(),
      .stdout_fd = stdout_write.get(),
      .stderr_fd = stderr_write.get(),
      .status_fd = status_write.get(),
      .working_directory = spec_.working_directory.empty() ? nullptr : spec_.working_directory.c_str(),
      .program = program->c_str(),
      .argv = argv.data(),
      .envp = envp.data(),
      .fd_limit = static_cast<int>(fd_limit),
  };

  sigset_t all_signals, old_mask;
  ::sigfillset(&all_signals);
  ::pthread_sigmask(SIG_SETMASK, &all_signals, &old_mask);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(plan);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) throw_start_error(command_, "fork failed: " + errno_text(fork_errno));

  stdin_read.reset();
  stdout_write.reset();
  stderr_write.reset();
  status_write.reset();
  // The child execs or exits at once, so this read ends promptly (an empty read: exec succeeded).
  ChildFailure failure{};
  ssize_t got = 0;
  do {
    got = ::read(status_read.get(), &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  const int read_errno = errno;
  if (got != 0) {
    int status = 0;
    if (got < 0) ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got < 0) throw_start_error(command_, "cannot read its start status: " + errno_text(read_errno));
    const std::string error = errno_text(failure.error_number);
    switch (failure.stage) {
      case stage_stdio: throw_start_error(command_, "cannot connect its stdin, stdout and stderr: " + error);
      case stage_process_group:
        throw_start_error(command_, "cannot make it a process group leader (setpgid): " + error);
      case stage_working_directory:
        throw_start_error(command_,
                          "cannot change to working directory '" + spec_.working_directory.string() + "': " + error);
      case stage_exec:
        throw_start_error(command_, "cannot execute '" + *program + "': " + error + exec_hint(failure.error_number));
      default: throw_start_error(command_, "its start report is garbled (stage " + std::to_string(failure.stage) + ")");
    }
  }
  pid_ = pid;
  stdin_fd_ = stdin_write.release();
  stdout_fd_ = stdout_read.release();
  stderr_fd_ = stderr_read.release();
}

AdapterProcess::~AdapterProcess() { terminate(std::chrono::milliseconds(100)); }

bool AdapterProcess::write_line(std::string_view line, std::chrono::milliseconds deadline) {
  if (stdin_fd_ < 0) return false;
  const auto until = deadline_from_now(deadline);
  SigpipeBlock sigpipe_block;
  char newline = '\n';
  const std::size_t total_bytes = line.size() + 1;
  std::size_t written_bytes = 0;
  while (written_bytes < total_bytes) {
    iovec parts[2];
    int part_count = 0;
    if (written_bytes < line.size())
      parts[part_count++] = {const_cast<char*>(line.data()) + written_bytes, line.size() - written_bytes};
    parts[part_count++] = {&newline, 1};
    const ssize_t n = ::writev(stdin_fd_, parts, part_count);
    if (n > 0) {
      written_bytes += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      // EPIPE (the adapter closed its stdin or died) or worse: nothing more can go down this pipe.
      if (errno == EPIPE) sigpipe_block.note_raised();
      close_stdin();
      return false;
    }
    // The pipe is full: wait for room, reading what the adapter says meanwhile so that it is never blocked on
    // a full stdout or stderr while we wait for it to read its stdin.
    const int timeout_ms = remaining_ms(until);
    if (timeout_ms == 0) return false;
    poll_once(timeout_ms, true);
  }
  return true;
}

ReadResult AdapterProcess::read_line(std::chrono::milliseconds deadline) {
  const auto until = deadline_from_now(deadline);
  for (bool polled = false;; polled = true) {
    if (stdout_overlong_) return {ReadStatus::too_long, {}};
    const std::size_t buffered_bytes = stdout_buffer_.size() - read_offset_;
    const std::size_t scan_from = std::max(scan_offset_, read_offset_);
    const void* found = std::memchr(stdout_buffer_.data() + scan_from, '\n', stdout_buffer_.size() - scan_from);
    if (found != nullptr) {
      const auto newline_index = static_cast<std::size_t>(static_cast<const char*>(found) - stdout_buffer_.data());
      if (newline_index - read_offset_ > spec_.line_bytes_max) break;
      ReadResult result{ReadStatus::line, stdout_buffer_.substr(read_offset_, newline_index - read_offset_)};
      read_offset_ = scan_offset_ = newline_index + 1;
      // Compact once the consumed prefix dominates, so that a stream of lines costs linear time and memory.
      if (read_offset_ == stdout_buffer_.size()) {
        stdout_buffer_.clear();
        read_offset_ = scan_offset_ = 0;
      } else if (read_offset_ >= read_chunk_bytes && read_offset_ >= stdout_buffer_.size() / 2) {
        stdout_buffer_.erase(0, read_offset_);
        read_offset_ = scan_offset_ = 0;
      }
      return result;
    }
    scan_offset_ = stdout_buffer_.size();
    if (buffered_bytes > spec_.line_bytes_max) break;
    if (stdout_fd_ < 0) {
      ReadResult result{ReadStatus::closed, stdout_buffer_.substr(read_offset_)};
      stdout_buffer_.clear();
      read_offset_ = scan_offset_ = 0;
      return result;
    }
    const int timeout_ms = remaining_ms(until);
    if (timeout_ms == 0 && polled) return {ReadStatus::timeout, {}};
    poll_once(timeout_ms, false);
  }
  // Too long: the rest of that line would read as the next one, so the stream stays unusable, and what comes
  // later is read only to be discarded (keeping memory bounded and the adapter unblocked until terminate()).
  stdout_overlong_ = true;
  stdout_buffer_.clear();
  stdout_buffer_.shrink_to_fit();
  read_offset_ = scan_offset_ = 0;
  return {ReadStatus::too_long, {}};
}

std::string AdapterProcess::stderr_tail() {
  drain_stderr();
  const std::size_t keep = std::min(stderr_buffer_.size(), spec_.stderr_tail_bytes);
  return stderr_buffer_.substr(stderr_buffer_.size() - keep);
}

void AdapterProcess::terminate(std::chrono::milliseconds exit_grace, std::chrono::milliseconds sigterm_grace) {
  if (pid_ < 0 || reaped_) return;
  close_stdin();
  if (!wait_for_exit(exit_grace)) {
    ::kill(-pid_, SIGTERM);
    if (!wait_for_exit(sigterm_grace)) ::kill(-pid_, SIGKILL);
  }
  // What is left of the group (workers of an adapter that exited) goes too. The adapter is not reaped yet, so
  // its group id still names its group.
  ::kill(-pid_, SIGKILL);
  // SIGKILL cannot be caught: this wait ends as soon as the kernel lets the adapter die.
  siginfo_t info{};
  int rc = 0;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0 && !exit_) exit_ = std::pair{info.si_code, info.si_status};
  if (rc != 0 && !exit_) exit_ = std::pair{0, 0};  // reaped elsewhere (SIGCHLD ignored, or a waitpid(-1))
  reaped_ = true;
  // Keep the adapter's last words for the caller's message, then let go of the pipes.
  drain_stderr();
  close_stdin();
  for (int* fd : {&stdout_fd_, &stderr_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

bool AdapterProcess::running() { return !observe_exit(); }

std::string AdapterProcess::exit_description() {
  if (!observe_exit()) return "still running";
  const auto [code, status] = *exit_;
  const auto signal_text = [](int signal_number) {
    const char* description = ::sigdescr_np(signal_number);
    return "killed by signal " + std::to_string(signal_number) + " (" +
           (description != nullptr ? description : "unknown signal") + ")";
  };
  switch (code) {
    case CLD_EXITED: return "exited with status " + std::to_string(status);
    case CLD_KILLED: return signal_text(status);
    case CLD_DUMPED: return signal_text(status) + ", core dumped";
    default: return "exited (status unknown: it was reaped outside AdapterProcess)";
  }
}

bool AdapterProcess::poll_once(int timeout_ms, bool want_stdin) {
  pollfd fds[3];
  nfds_t fd_count = 0;
  int stdin_index = -1, stdout_index = -1, stderr_index = -1;
  if (want_stdin && stdin_fd_ >= 0) {
    stdin_index = static_cast<int>(fd_count);
    fds[fd_count++] = {stdin_fd_, POLLOUT, 0};
  }
  // Past the line limit nothing more is needed to decide too_long, so stdout waits (bounding memory), unless
  // the stream is already declared too long and is only being discarded.
  if (stdout_fd_ >= 0 && (stdout_overlong_ || stdout_buffer_.size() - read_offset_ <= spec_.line_bytes_max)) {
    stdout_index = static_cast<int>(fd_count);
    fds[fd_count++] = {stdout_fd_, POLLIN, 0};
  }
  if (stderr_fd_ >= 0) {
    stderr_index = static_cast<int>(fd_count);
    fds[fd_count++] = {stderr_fd_, POLLIN, 0};
  }
  const int ready_count = ::poll(fds, fd_count, timeout_ms);
  if (ready_count < 0) {
    ACCUMCHECK_ASSERT_MSG(errno == EINTR, "poll on the adapter's pipes failed");
    return false;
  }
  const short readable = POLLIN | POLLHUP | POLLERR;
  for (nfds_t i = 0; i < fd_count; ++i)
    ACCUMCHECK_ASSERT_MSG((fds[i].revents & POLLNVAL) == 0, "an adapter pipe was closed while still polled");
  if (stdout_index >= 0 && (fds[stdout_index].revents & readable) != 0) drain_stdout();
  if (stderr_index >= 0 && (fds[stderr_index].revents & readable) != 0) drain_stderr();
  return stdin_index >= 0 && (fds[stdin_index].revents & (POLLOUT | POLLERR | POLLHUP)) != 0;
}

void AdapterProcess::drain_stdout() {
  for (std::size_t read_bytes = 0; stdout_fd_ >= 0 && read_bytes < drain_bytes_max;) {
    if (!stdout_overlong_ && stdout_buffer_.size() - read_offset_ > spec_.line_bytes_max) return;
    // A discarded stream reads over its own start: only the count matters.
    const std::size_t old_size = stdout_overlong_ ? 0 : stdout_buffer_.size();
    stdout_buffer_.resize(old_size + read_chunk_bytes);
    const ssize_t n = ::read(stdout_fd_, stdout_buffer_.data() + old_size, read_chunk_bytes);
    stdout_buffer_.resize(old_size + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) {
      read_bytes += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // End of file, or an error that ends the stream just the same.
    ::close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

void AdapterProcess::drain_stderr() {
  for (std::size_t read_bytes = 0; stderr_fd_ >= 0 && read_bytes < drain_bytes_max;) {
    const std::size_t old_size = stderr_buffer_.size();
    stderr_buffer_.resize(old_size + read_chunk_bytes);
    const ssize_t n = ::read(stderr_fd_, stderr_buffer_.data() + old_size, read_chunk_bytes);
    stderr_buffer_.resize(old_size + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    // Trim to the tail once the buffer holds twice it, so that trimming costs amortised constant time per byte.
    if (stderr_buffer_.size() > 2 * spec_.stderr_tail_bytes + read_chunk_bytes)
      stderr_buffer_.erase(0, stderr_buffer_.size() - spec_.stderr_tail_bytes);
    if (n > 0) {
      read_bytes += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(stderr_fd_);
    stderr_fd_ = -1;
  }
}

bool AdapterProcess::observe_exit() {
  if (exit_) return true;
  siginfo_t info{};
  int rc = 0;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc != 0) {
    // ECHILD: someone reaped it behind our back; it is gone all the same.
    exit_ = std::pair{0, 0};
    return true;
  }
  if (info.si_pid == 0) return false;
  exit_ = std::pair{info.si_code, info.si_status};
  return true;
}

bool AdapterProcess::wait_for_exit(std::chrono::milliseconds grace) {
  const auto until = deadline_from_now(grace);
  for (;;) {
    if (observe_exit()) return true;
    const int timeout_ms = remaining_ms(until);
    if (timeout_ms == 0) return false;
    poll_once(std::min(timeout_ms, exit_poll_interval_ms), false);
  }
}

void AdapterProcess::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

}  // namespace accumcheck::sim::external
