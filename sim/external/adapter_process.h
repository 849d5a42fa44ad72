// AdapterProcess: an external adapter as a long-lived subprocess that speaks in lines (docs/adapter-protocol.md,
// section 1). This is the process layer only: it knows lines, deadlines and process groups, not JSON.
//
// Method: fork and exec with three pipes (stdin, stdout, stderr) whose parent ends are nonblocking; every wait
// is one poll(2) over those pipes with the time left to a deadline, so no call blocks past its deadline and no
// thread is needed. While waiting for anything, stderr is drained into a bounded tail and stdout into a bounded
// line buffer, so an adapter that is chatty on either pipe never stalls on a full pipe while we wait on the
// other. The child leads its own process group, and terminate() signals the whole group, so the workers an
// adapter spawns (DDP ranks, data loaders) go down with it.
//
// Threads: one AdapterProcess is used by one thread at a time; distinct instances may live in distinct threads
// (every descriptor is close-on-exec, and a child closes what it inherited before exec). SIGPIPE: write_line
// blocks SIGPIPE in the calling thread for the duration of the write and consumes the one it caused; the
// process-wide disposition is never changed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace accumcheck::sim::external {

struct ProcessSpec {
  // The command line. argv[0] without a '/' is looked up on the child's PATH (the inherited PATH, or the one
  // `environment` sets); with a '/' it is a path, relative to working_directory when that is set.
  std::vector<std::string> argv;
  std::filesystem::path working_directory;  // empty: inherit ours
  // Added to the inherited environment; an entry whose name is already there overrides it.
  std::vector<std::pair<std::string, std::string>> environment;
  // The protocol's bound on one line (section 1); a longer line reads as ReadStatus::too_long.
  std::size_t line_bytes_max = std::size_t{64} << 20;
  // How much of the adapter's stderr (its log) is kept: the last bytes are what explain a failure.
  std::size_t stderr_tail_bytes = 4096;
};

enum class ReadStatus {
  line,      // `line` holds the next line, without its '\n'
  timeout,   // the deadline passed before a whole line arrived; what did arrive stays buffered
  closed,    // end of file on stdout; `line` holds any partial last line (without a '\n')
  too_long,  // more than line_bytes_max bytes without a '\n'; the stream is unusable from here on
};

struct ReadResult {
  ReadStatus status;
  std::string line;
};

class AdapterProcess {
 public:
  // Starts the process in its own process group with stdin, stdout and stderr as pipes and every other
  // descriptor closed. Throws std::runtime_error naming the command and what failed (not found on PATH, the
  // working directory, exec's errno) when it cannot start; a started process has reached exec.
  explicit AdapterProcess(ProcessSpec spec);
  // terminate(100 ms): an adapter gets a moment to exit on end of file, then its group is killed and reaped.
  ~AdapterProcess();

  AdapterProcess(const AdapterProcess&) = delete;
  AdapterProcess& operator=(const AdapterProcess&) = delete;
  AdapterProcess(AdapterProcess&&) = delete;
  AdapterProcess& operator=(AdapterProcess&&) = delete;

  // Writes `line` and a '\n' within the deadline. False when the adapter closed its stdin or died (EPIPE),
  // when the deadline passed with the pipe full, or after terminate(); a false may leave part of the line
  // written, so the stream is unusable and the caller terminates. Never raises SIGPIPE.
  bool write_line(std::string_view line, std::chrono::milliseconds deadline);

  // The next line from stdout within the deadline (0 ms: only what has already arrived). Lines that arrived in
  // one chunk are returned one per call.
  ReadResult read_line(std::chrono::milliseconds deadline);

  // The last stderr_tail_bytes of the adapter's stderr, after draining what is readable now. Kept after
  // terminate(), for the message that explains why the adapter was dropped.
  std::string stderr_tail();

  // Closes stdin and waits up to exit_grace for the adapter to exit; then SIGTERM to its process group and up
  // to sigterm_grace more; then SIGKILL. Whatever is left of the group once the adapter has exited is killed
  // too, then the adapter is reaped. Idempotent; a process that detached into its own group or session escapes.
  void terminate(std::chrono::milliseconds exit_grace,
                 std::chrono::milliseconds sigterm_grace = std::chrono::milliseconds(500));

  // Not yet exited (a non-blocking check that leaves the exit status to be reaped by terminate()).
  bool running();
  // "still running", "exited with status 3", "killed by signal 9 (Killed)".
  std::string exit_description();
  // The adapter's pid, which is also its process group id.
  pid_t pid() const { return pid_; }
  // The command line as one string, for messages.
  const std::string& command() const { return command_; }

 private:
  // One poll(2) over the open pipes for at most timeout_ms, reading what is ready into the buffers. With
  // want_stdin it also polls stdin for room; returns true when stdin is writable (or has failed: the next
  // write says which).
  bool poll_once(int timeout_ms, bool want_stdin);
  void drain_stdout();
  void drain_stderr();
  void append_stderr(const char* data, std::size_t size);
  // Records the exit (without reaping) when the adapter has exited; true if it has.
  bool observe_exit();
  // Waits up to `grace` for the adapter to exit, draining its pipes meanwhile.
  bool wait_for_exit(std::chrono::milliseconds grace);
  void close_stdin();

  ProcessSpec spec_;
  std::string command_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  bool reaped_ = false;
  // Set once the adapter has exited: si_code (CLD_EXITED, CLD_KILLED, CLD_DUMPED) and si_status of waitid.
  std::optional<std::pair<int, int>> exit_;

  // Bytes from stdout not yet returned: [read_offset_, size()); no '\n' in [read_offset_, scan_offset_).
  std::string stdout_buffer_;
  std::size_t read_offset_ = 0;
  std::size_t scan_offset_ = 0;
  bool stdout_overlong_ = false;  // a line passed line_bytes_max: stdout is discarded from then on

  std::string stderr_buffer_;  // the tail, kept between stderr_tail_bytes and twice that
};

}  // namespace accumcheck::sim::external
