// AdapterTarget: process pool, handshake, run round trips with deadlines, restarts and one retry; the
// "adapter:" registry of shipped and registered adapters.
#include "sim/external/adapter_target.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "models/assert.h"

namespace accumcheck::sim::external {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

std::string tail_note(const std::string& tail) {
  if (tail.empty()) return "\n  (the adapter wrote nothing to stderr)";
  std::string out = "\n  adapter stderr (last " + std::to_string(tail.size()) + " bytes):";
  std::size_t start = 0;
  while (start < tail.size()) {
    const std::size_t end = tail.find('\n', start);
    out += "\n    | " + tail.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@,+") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

constexpr milliseconds kBackoffFirst{100};
constexpr milliseconds kBackoffMax{5000};
constexpr int kRunAttempts = 2;  // the trial and one retry
// How a "failed" reply (the adapter's training code raised) begins its fault message.
constexpr std::string_view kRaisedPrefix = "the adapter reported an error of kind 'failed'";

}  // namespace

// One adapter process with its handshake and request counter.
class AdapterTarget::Process {
 public:
  explicit Process(std::unique_ptr<AdapterProcess> process) : process_(std::move(process)) {}
  AdapterProcess& io() { return *process_; }
  std::int64_t next_id() { return ++last_id_; }
  bool healthy = true;

  // Reads one reply line and parses it; on any problem returns nullopt with `fault` set.
  std::optional<json> read_reply(milliseconds deadline, const char* what, std::string& fault) {
    const ReadResult r = process_->read_line(deadline);
    switch (r.status) {
      case ReadStatus::line: break;
      case ReadStatus::timeout:
        fault = "no reply to the " + std::string(what) + " within " + std::to_string(deadline.count()) + " ms";
        return std::nullopt;
      case ReadStatus::closed:
        fault = "the adapter closed its stdout before answering the " + std::string(what) +
                (r.line.empty() ? std::string() : " (after a partial line: '" + r.line.substr(0, 200) + "')") + "; the adapter process is " +
                process_->exit_description();
        return std::nullopt;
      case ReadStatus::too_long:
        fault = "the reply to the " + std::string(what) + " is longer than the protocol's 64 MiB line limit";
        return std::nullopt;
    }
    try {
      json j = json::parse(r.line);
      if (!j.is_object() || !j.contains("type") || !j.at("type").is_string()) {
        fault = "the reply to the " + std::string(what) + " is not a protocol message (no \"type\"): '" + r.line.substr(0, 200) + "'";
        return std::nullopt;
      }
      return j;
    } catch (const json::parse_error&) {
      fault = "the reply to the " + std::string(what) + " is not JSON: '" + r.line.substr(0, 200) + "'";
      return std::nullopt;
    }
  }

 private:
  std::unique_ptr<AdapterProcess> process_;
  std::int64_t last_id_ = 0;
};

struct AdapterTarget::Pool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Process>> idle;
  std::size_t started = 0;
  int consecutive_faults = 0;
};

namespace {

// Starts a process and runs the handshake; throws with the reason and the stderr tail.
std::pair<std::unique_ptr<AdapterProcess>, Hello> start_and_greet(const AdapterSpec& spec) {
  ProcessSpec ps;
  ps.argv = {"/bin/sh", "-c", "exec " + spec.command};
  ps.working_directory = spec.working_directory;
  ps.environment = spec.environment;
  auto process = std::make_unique<AdapterProcess>(std::move(ps));
  auto fail = [&](const std::string& why) -> std::pair<std::unique_ptr<AdapterProcess>, Hello> {
    process->terminate(milliseconds(200));
    throw TargetFault("adapter '" + spec.name + "' (" + spec.command + "): " + why + tail_note(process->stderr_tail()));
  };
  if (!process->write_line(hello_request("accumcheck").dump(), spec.start_timeout))
    return fail("could not send the handshake; the adapter process is " + process->exit_description());
  const ReadResult r = process->read_line(spec.start_timeout);
  if (r.status == ReadStatus::timeout) return fail("no handshake within " + std::to_string(spec.start_timeout.count()) + " ms");
  if (r.status != ReadStatus::line)
    return fail("the adapter closed its stdout instead of answering the handshake; it " + process->exit_description());
  json reply;
  try {
    reply = json::parse(r.line);
  } catch (const json::parse_error&) {
    return fail("the handshake reply is not JSON: '" + r.line.substr(0, 200) + "'");
  }
  if (reply.is_object() && reply.value("type", "") == "error")
    return fail("the adapter refused the handshake: " + reply.value("message", reply.dump()));
  if (!reply.is_object() || reply.value("type", "") != "hello" || !reply.contains("id") || reply.at("id") != 0)
    return fail("expected a hello reply with id 0, got '" + r.line.substr(0, 200) + "'");
  try {
    Hello hello = hello_from_json(reply);
    return {std::move(process), std::move(hello)};
  } catch (const ProtocolError& e) {
    return fail(std::string("impossible capabilities: ") + e.what());
  }
}

}  // namespace

AdapterTarget::AdapterTarget(AdapterSpec spec) : spec_(std::move(spec)), pool_(std::make_unique<Pool>()) {
  try {
    auto [process, hello] = start_and_greet(spec_);
    hello_ = std::move(hello);
    dtype_ = spec_.dtype.value_or(hello_.capabilities.dtypes.front());
    if (std::find(hello_.capabilities.dtypes.begin(), hello_.capabilities.dtypes.end(), dtype_) == hello_.capabilities.dtypes.end()) {
      process->terminate(milliseconds(200));
      throw AdapterStartError("adapter '" + spec_.name + "' computes in " + to_json(hello_.capabilities).at("dtypes").dump() +
                              ", not " + std::string(to_string(dtype_)));
    }
    pool_->idle.push_back(std::make_unique<Process>(std::move(process)));
    pool_->started = 1;
  } catch (const TargetFault& e) {
    throw AdapterStartError(e.what());
  } catch (const std::runtime_error& e) {
    throw AdapterStartError("adapter '" + spec_.name + "' cannot start: " + e.what());
  }
}

AdapterTarget::~AdapterTarget() { shutdown(); }

std::string AdapterTarget::name() const {
  return std::string(kAdapterPrefix) + spec_.name + (spec_.dtype ? "@" + std::string(to_string(*spec_.dtype)) : std::string());
}

std::string AdapterTarget::description() const {
  return "external adapter '" + hello_.name + "' " + hello_.version + " (" + spec_.origin + "), computing in " +
         std::string(to_string(dtype_)) + ": " + hello_.description;
}

std::string AdapterTarget::unsupported(const Scenario& scenario) const {
  return unsupported_reason(hello_.capabilities, scenario, dtype_);
}

std::size_t AdapterTarget::processes_started() const {
  const std::lock_guard lock(pool_->mutex);
  return pool_->started;
}

std::unique_ptr<AdapterTarget::Process> AdapterTarget::start_process() const {
  int faults = 0;
  {
    const std::lock_guard lock(pool_->mutex);
    faults = pool_->consecutive_faults;
    pool_->started += 1;
  }
  if (faults > 0) {
    // Backoff after a fault, so that an adapter that dies at start does not spin the machine.
    const auto wait = std::min(kBackoffMax, kBackoffFirst * (1 << std::min(faults - 1, 6)));
    std::this_thread::sleep_for(wait);
  }
  auto [process, hello] = start_and_greet(spec_);
  if (to_json(hello.capabilities) != to_json(hello_.capabilities))
    throw TargetFault("adapter '" + spec_.name + "' restarted with different capabilities: " + to_json(hello.capabilities).dump());
  return std::make_unique<Process>(std::move(process));
}

std::unique_ptr<AdapterTarget::Process> AdapterTarget::checkout() const {
  {
    const std::lock_guard lock(pool_->mutex);
    if (!pool_->idle.empty()) {
      auto p = std::move(pool_->idle.back());
      pool_->idle.pop_back();
      return p;
    }
  }
  return start_process();
}

void AdapterTarget::checkin(std::unique_ptr<Process> process) const {
  const std::lock_guard lock(pool_->mutex);
  pool_->idle.push_back(std::move(process));
}

RunResult AdapterTarget::run_once(Process& process, const Scenario& scenario, std::string& fault) const {
  const std::int64_t id = process.next_id();
  const json request = run_request(id, scenario, dtype_);
  if (!process.io().write_line(request.dump(), spec_.run_timeout)) {
    fault = "could not send the run request; the adapter process is " + process.io().exit_description();
    process.healthy = false;
    return {};
  }
  auto reply = process.read_reply(spec_.run_timeout, "run request", fault);
  if (!reply) {
    process.healthy = false;
    return {};
  }
  const json& j = *reply;
  if (!j.contains("id") || j.at("id") != id) {
    fault = "the reply answers id " + (j.contains("id") ? j.at("id").dump() : std::string("(none)")) + ", not the request's " + std::to_string(id);
    process.healthy = false;
    return {};
  }
  const std::string type = j.at("type").get<std::string>();
  if (type == "error") {
    const std::string kind = j.value("kind", std::string("?"));
    const std::string message = j.contains("message") && j.at("message").is_string() ? j.at("message").get<std::string>() : j.dump();
    if (kind == "unsupported") throw TargetUnsupported("adapter '" + spec_.name + "' declined the scenario: " + message);
    fault = (kind == "failed" ? std::string(kRaisedPrefix) : "the adapter reported an error of kind '" + kind + "'") + ": " + message;
    if (j.contains("traceback") && j.at("traceback").is_string()) fault += "\n" + j.at("traceback").get<std::string>();
    process.healthy = kind == "failed";  // its own exception; the process itself is fine
    return {};
  }
  if (type != "result") {
    fault = "expected a result or an error, got a message of type '" + type + "'";
    process.healthy = false;
    return {};
  }
  try {
    return result_from_json(j, scenario).result;
  } catch (const ProtocolError& e) {
    fault = e.what();
    process.healthy = false;
    return {};
  }
}

RunResult AdapterTarget::run(const Scenario& scenario, const RunOptions& options) const {
  validate(scenario);
  if (const std::string why = unsupported(scenario); !why.empty())
    throw std::invalid_argument("target " + name() + " cannot run this scenario: " + why);
  if (options.scalar != scalar_of(dtype_) && !(dtype_ == DType::exact && options.scalar == ScalarKind::fast_rational))
    throw std::invalid_argument("target " + name() + " computes in " + std::string(to_string(dtype_)) + ", not " +
                                std::string(sim::to_string(options.scalar)));
  std::string faults;
  bool every_fault_raised = true;  // every attempt answered "failed": the training code itself raised
  for (int attempt = 0; attempt < kRunAttempts; ++attempt) {
    std::unique_ptr<Process> process;
    try {
      process = checkout();
    } catch (const TargetFault& e) {
      every_fault_raised = false;
      faults += std::string(attempt ? "\nretry: " : "") + e.what();
      const std::lock_guard lock(pool_->mutex);
      pool_->consecutive_faults += 1;
      continue;
    }
    std::string fault;
    RunResult result;
    try {
      result = run_once(*process, scenario, fault);
    } catch (const TargetUnsupported&) {
      checkin(std::move(process));
      throw;
    }
    if (fault.empty()) {
      {
        const std::lock_guard lock(pool_->mutex);
        pool_->consecutive_faults = 0;
      }
      checkin(std::move(process));
      return result;
    }
    if (!fault.starts_with(kRaisedPrefix)) every_fault_raised = false;
    const std::string tail = process->io().stderr_tail();
    faults += std::string(attempt ? "\nretry: " : "") + "adapter '" + spec_.name + "': " + fault + tail_note(tail);
    {
      const std::lock_guard lock(pool_->mutex);
      pool_->consecutive_faults += 1;
    }
    if (process->healthy) checkin(std::move(process));
    else process->io().terminate(milliseconds(100));
  }
  if (every_fault_raised) throw TargetRaised(faults);
  throw TargetFault(faults);
}

void AdapterTarget::shutdown() {
  std::vector<std::unique_ptr<Process>> idle;
  {
    const std::lock_guard lock(pool_->mutex);
    idle.swap(pool_->idle);
  }
  for (auto& p : idle) {
    p->io().write_line(json{{"type", "shutdown"}}.dump(), milliseconds(200));
    p->io().terminate(milliseconds(2000));
  }
}

// The registry.

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, AdapterSpec> registered;
  std::map<std::string, std::shared_ptr<AdapterTarget>> started;
};
Registry& registry() {
  static Registry r;
  return r;
}

std::filesystem::path venv_dir() {
  if (const char* v = std::getenv("ACCUMCHECK_VENV_DIR"); v && *v) return v;
  return ACCUMCHECK_DEFAULT_VENV_DIR;
}

ShippedAdapter read_shipped(const std::filesystem::path& folder, json& manifest) {
  const auto file = folder / "adapter.json";
  std::ifstream in(file);
  try {
    manifest = json::parse(in);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(file.string() + " is not JSON: " + e.what());
  }
  ShippedAdapter a;
  a.folder = folder;
  a.name = manifest.value("name", folder.filename().string());
  a.description = manifest.value("description", std::string());
  if (manifest.contains("model")) {
    if (!manifest.at("model").is_string() || manifest.at("model").get<std::string>().empty())
      throw std::invalid_argument(file.string() + ": \"model\" must be the name of a simulated target, such as \"deepspeed@0.16.4\"");
    a.model = manifest.at("model").get<std::string>();
  }
  a.environment = manifest.contains("environment") && manifest.at("environment").is_string() ? manifest.at("environment").get<std::string>() : "";
  if (a.environment.empty()) {
    a.installed = true;
  } else {
    a.installed = std::filesystem::exists(venv_dir() / a.environment / "bin" / "python");
    // The manifest says how its environment is installed; the PyTorch one is the default.
    a.install_hint = manifest.contains("install") && manifest.at("install").is_string() ? manifest.at("install").get<std::string>()
                                                                                         : "scripts/adapters-env.sh";
  }
  return a;
}

}  // namespace

std::filesystem::path adapters_dir() {
  if (const char* v = std::getenv("ACCUMCHECK_ADAPTERS_DIR"); v && *v) return v;
  return ACCUMCHECK_DEFAULT_ADAPTERS_DIR;
}

std::vector<ShippedAdapter> shipped_adapters() {
  std::vector<ShippedAdapter> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(adapters_dir(), ec)) {
    if (!entry.is_directory() || !std::filesystem::exists(entry.path() / "adapter.json")) continue;
    json manifest;
    out.push_back(read_shipped(entry.path(), manifest));
  }
  std::sort(out.begin(), out.end(), [](const ShippedAdapter& a, const ShippedAdapter& b) { return a.name < b.name; });
  return out;
}

void register_adapter(AdapterSpec spec) {
  if (spec.name.empty() || spec.name.find_first_of("+@ ") != std::string::npos)
    throw std::invalid_argument("adapter name '" + spec.name + "' must be non-empty and hold no '+', '@' or space");
  if (spec.command.empty()) throw std::invalid_argument("adapter '" + spec.name + "' has an empty command");
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.registered[spec.name] = std::move(spec);
}

AdapterSpec find_adapter_spec(const std::string& name) {
  {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    if (auto it = r.registered.find(name); it != r.registered.end()) return it->second;
  }
  const auto folder = adapters_dir() / name;
  if (!std::filesystem::exists(folder / "adapter.json")) {
    std::string known;
    for (const auto& a : shipped_adapters()) known += (known.empty() ? "" : ", ") + a.name;
    throw std::invalid_argument("unknown adapter '" + name + "' (shipped: " + (known.empty() ? "none" : known) +
                                "; or pass --adapter-command \"...\")");
  }
  json manifest;
  const ShippedAdapter shipped = read_shipped(folder, manifest);
  if (!shipped.installed)
    throw std::invalid_argument("adapter '" + name + "' needs the Python environment '" + shipped.environment + "', which is not installed (" +
                                (venv_dir() / shipped.environment).string() + "): run " + shipped.install_hint);
  if (!manifest.contains("command") || !manifest.at("command").is_array() || manifest.at("command").empty())
    throw std::invalid_argument((folder / "adapter.json").string() + ": \"command\" must be a non-empty list of strings");
  AdapterSpec spec;
  spec.name = name;
  spec.origin = "shipped: " + folder.string();
  spec.model = shipped.model;
  spec.working_directory = folder;
  for (const auto& part : manifest.at("command")) {
    if (!part.is_string()) throw std::invalid_argument((folder / "adapter.json").string() + ": \"command\" must hold strings");
    std::string s = part.get<std::string>();
    if (s == "{python}") s = (venv_dir() / shipped.environment / "bin" / "python").string();
    spec.command += (spec.command.empty() ? "" : " ") + shell_quote(s);
  }
  return spec;
}

namespace {

// make_target returns unique targets; adapters are shared, so each handle forwards to the shared one.
class SharedAdapterTarget final : public Target {
 public:
  explicit SharedAdapterTarget(std::shared_ptr<AdapterTarget> t) : t_(std::move(t)) {}
  std::string name() const override { return t_->name(); }
  std::string description() const override { return t_->description(); }
  std::string unsupported(const Scenario& s) const override { return t_->unsupported(s); }
  bool optimizer_steps_missing_gradients_as_zero() const override { return t_->optimizer_steps_missing_gradients_as_zero(); }
  std::optional<ScalarKind> fixed_scalar() const override { return t_->fixed_scalar(); }
  std::optional<std::string> behavioural_model() const override { return t_->behavioural_model(); }
  RunResult run(const Scenario& s, const RunOptions& o) const override { return t_->run(s, o); }

 private:
  std::shared_ptr<AdapterTarget> t_;
};

}  // namespace

std::shared_ptr<AdapterTarget> adapter_target(const std::string& full) {
  // "NAME" or "NAME@DTYPE".
  std::string name = full;
  std::optional<DType> dtype;
  if (const auto at = full.rfind('@'); at != std::string::npos) {
    name = full.substr(0, at);
    const std::string d = full.substr(at + 1);
    if (d == "exact") dtype = DType::exact;
    else if (d == "fp32") dtype = DType::fp32;
    else if (d == "fp64") dtype = DType::fp64;
    else throw std::invalid_argument("adapter target 'adapter:" + full + "': unknown dtype '" + d + "' (exact, fp32 or fp64)");
  }
  Registry& r = registry();
  {
    const std::lock_guard lock(r.mutex);
    if (auto it = r.started.find(full); it != r.started.end()) return it->second;
  }
  AdapterSpec spec = find_adapter_spec(name);
  spec.dtype = dtype;
  auto target = std::make_shared<AdapterTarget>(std::move(spec));
  const std::lock_guard lock(r.mutex);
  auto [it, inserted] = r.started.emplace(full, target);
  return it->second;
}

void enable_adapter_targets() {
  register_target_resolver(std::string(kAdapterPrefix), [](std::string_view name) -> std::unique_ptr<Target> {
    return std::make_unique<SharedAdapterTarget>(adapter_target(std::string(name.substr(kAdapterPrefix.size()))));
  });
}

void shutdown_adapters() {
  std::map<std::string, std::shared_ptr<AdapterTarget>> started;
  {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    started.swap(r.started);
  }
  for (auto& [name, target] : started) target->shutdown();
}

}  // namespace accumcheck::sim::external
