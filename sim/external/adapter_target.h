// External targets: a training loop in another process, driven through the adapter protocol
// (docs/adapter-protocol.md), as a sim::Target that campaigns, the shrinker, replay and the properties use
// like any other.
//
// Method. An AdapterTarget is made once per adapter name and shared: its first process answers the
// handshake, whose capabilities then decide unsupported() without another round trip. Runs check a process
// out of a small pool (one per thread that asks at once, so --jobs N drives N processes) and back in. Every
// misbehaviour (a crash, a missed deadline, a line that is not JSON, another request's id, a result of the
// wrong shape, an error reply of kind "failed") drops that process (killed with its process group), waits
// with backoff, restarts, and retries the run once; a second failure throws sim::TargetFault with what went
// wrong and the tail of the adapter's stderr. An "unsupported" reply throws sim::TargetUnsupported. Nothing
// is ever read as a result that did not parse completely.
//
// Names: "adapter:NAME". Shipped adapters live in adapters/NAME/adapter.json; users add their own with
// register_adapter (the command line's --adapter-command does).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/external/adapter_process.h"
#include "sim/external/adapter_protocol.h"
#include "sim/target.h"

namespace accumcheck::sim::external {

inline constexpr std::string_view kAdapterPrefix = "adapter:";

struct AdapterSpec {
  std::string name;  // the target is "adapter:" + name
  // The command line, run through /bin/sh -c "exec ..." so that quoting works as in a terminal.
  std::string command;
  std::filesystem::path working_directory;  // empty: the current folder
  std::vector<std::pair<std::string, std::string>> environment;
  std::chrono::milliseconds start_timeout{120000};  // the handshake: importing a framework is slow
  std::chrono::milliseconds run_timeout{60000};     // each run request
  // What runs compute in; must be one of the adapter's dtypes. Unset: the first the adapter lists, and the
  // target's name is "adapter:NAME"; set: "adapter:NAME@DTYPE".
  std::optional<DType> dtype;
  std::string origin;                               // "shipped (adapters/torch-loop)" or "--adapter-command"
  // The simulated target that models this adapter ("deepspeed@0.16.4" for the real DeepSpeed 0.16.4), which the
  // differential property compares it with; empty: none. adapter.json's "model", or --adapter-model.
  std::string model;
};

// Thrown by make_target for an adapter that cannot be started or whose handshake fails, with the reason and
// the adapter's stderr tail: nothing can be checked against it.
class AdapterStartError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class AdapterTarget final : public Target {
 public:
  // Starts one process and reads the handshake; throws AdapterStartError when that fails, or when
  // spec.dtype is not one of the adapter's dtypes.
  explicit AdapterTarget(AdapterSpec spec);
  ~AdapterTarget() override;

  std::string name() const override;
  std::string description() const override;
  std::string unsupported(const Scenario& scenario) const override;
  bool optimizer_steps_missing_gradients_as_zero() const override { return hello_.capabilities.missing_gradient_is_zero; }
  std::optional<ScalarKind> fixed_scalar() const override { return scalar_of(dtype_); }
  std::optional<std::string> behavioural_model() const override {
    return spec_.model.empty() ? std::nullopt : std::optional(spec_.model);
  }
  DType dtype() const { return dtype_; }
  RunResult run(const Scenario& scenario, const RunOptions& options) const override;

  const Hello& hello() const { return hello_; }
  const AdapterSpec& spec() const { return spec_; }
  // Processes started so far, restarts included (for tests and the campaign summary).
  std::size_t processes_started() const;
  // Sends shutdown to every idle process and reaps it.
  void shutdown();

 private:
  class Process;
  std::unique_ptr<Process> start_process() const;
  std::unique_ptr<Process> checkout() const;
  void checkin(std::unique_ptr<Process> process) const;
  RunResult run_once(Process& process, const Scenario& scenario, std::string& fault) const;

  AdapterSpec spec_;
  Hello hello_;
  DType dtype_ = DType::fp32;
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

// Adapters by name: registered ones first, then the shipped ones in adapters_dir(). Making a target starts the
// adapter once per name per process; later make_target calls share it.
void register_adapter(AdapterSpec spec);
// The shipped adapters: every adapters/NAME/adapter.json, with whether its environment is installed.
struct ShippedAdapter {
  std::string name, description, environment;
  std::string model;  // the simulated target that models it, or empty
  std::filesystem::path folder;
  bool installed = false;
  std::string install_hint;  // the command that installs the environment
};
std::vector<ShippedAdapter> shipped_adapters();
std::filesystem::path adapters_dir();
// The spec of a shipped or registered adapter; throws std::invalid_argument naming the problem (unknown name,
// environment not installed: with the command that installs it).
AdapterSpec find_adapter_spec(const std::string& name);
// Installs the "adapter:" resolver into sim::make_target. Idempotent.
void enable_adapter_targets();
// Shuts every started adapter down (end of a command).
void shutdown_adapters();
// The shared target for "adapter:NAME" (started on first use).
std::shared_ptr<AdapterTarget> adapter_target(const std::string& name);

}  // namespace accumcheck::sim::external
