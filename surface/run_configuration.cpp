// Readers of what a past run left behind (run_configuration.h).
#include "surface/run_configuration.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "sim/external/adapter_process.h"

namespace accumcheck::surface {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Inputs larger than this are not configurations (a checkpoint's tensors go through saved_run.py instead).
constexpr std::uintmax_t kTextInputBytesMax = 16u << 20;

std::string read_text(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw AuditInputError(fmt::format("{}: cannot read: {}", file.string(), ec.message()));
  if (size > kTextInputBytesMax)
    throw AuditInputError(fmt::format("{}: {} bytes is too large for a configuration (at most {})", file.string(), size,
                                      kTextInputBytesMax));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw AuditInputError(fmt::format("{}: cannot open", file.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw AuditInputError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
}

std::string normalised_package(std::string name) {
  std::string out;
  for (char c : name) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == '_' || l == '.' || l == '-') {
      if (out.empty() || out.back() != '-') out += '-';
    } else {
      out += l;
    }
  }
  return out;
}

// The packages audit decides on; other lines of a freeze file are not kept.
constexpr std::array<std::string_view, 8> kPackages{"deepspeed", "transformers", "trl", "openrlhf", "llamafactory",
                                                    "accelerate", "torch", "llmtuner"};

void state_version(RunConfiguration& run, const std::string& package, std::string_view text,
                   const std::string& source) {
  const auto release = Release::parse(text);
  if (!release) throw AuditInputError(fmt::format("{}: '{}' is not a release number of {}", source, text, package));
  const std::string name = package == "llmtuner" ? "llamafactory" : package;  // LLaMA-Factory's package until 0.5
  auto it = run.versions.find(name);
  if (it == run.versions.end()) {
    run.versions.emplace(name, Stated<Release>{*release, source});
  } else if (it->second.value.text != release->text) {
    throw AuditInputError(fmt::format("{} {} ({}) contradicts {} {} ({})", name, release->text, source, name,
                                      it->second.value.text, it->second.source));
  }
}

// A JSON value that may be "auto" (transformers fills it from TrainingArguments): nullopt then.
// `where` names the key's object for messages ("zero_optimization.").
std::optional<int> json_int(const json& j, const std::string& key, const std::string& source, const std::string& where = "") {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_string() && v.get<std::string>() == "auto") return std::nullopt;
  if (v.is_number_integer()) return v.get<int>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    int out = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size()) return out;
  }
  throw AuditInputError(fmt::format("{}: {}{} is {}, not an integer or \"auto\"", source, where, key, v.dump()));
}

std::optional<bool> json_bool(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string() && v.get<std::string>() == "auto") return std::nullopt;
  throw AuditInputError(fmt::format("{}: {} is {}, not true, false or \"auto\"", source, key, v.dump()));
}

void state_precision(RunConfiguration& run, std::optional<bool> bf16, std::optional<bool> fp16,
                     const std::string& source) {
  if (bf16.value_or(false) && fp16.value_or(false))
    throw AuditInputError(fmt::format("{}: bf16 and fp16 are both enabled", source));
  if (bf16.value_or(false)) state(run.precision, std::string("bf16"), source, "precision");
  else if (fp16.value_or(false)) state(run.precision, std::string("fp16"), source, "precision");
  else if (bf16 && fp16) state(run.precision, std::string("fp32"), source, "precision");
}

void state_positive(std::optional<Stated<int>>& field, std::optional<int> value, const std::string& source,
                    const std::string& what) {
  if (!value) return;
  if (*value < 1) throw AuditInputError(fmt::format("{}: {} is {}, not a positive count", source, what, *value));
  state(field, *value, source, what);
}

// Framework statements rank: a wrapper (TRL, LLaMA-Factory, OpenRLHF) outranks the Trainer it runs, which
// outranks DeepSpeed alone; two different wrappers contradict each other.
int framework_rank(Framework f) {
  switch (f) {
    case Framework::deepspeed: return 0;
    case Framework::transformers: return 1;
    default: return 2;
  }
}

void state_framework(RunConfiguration& run, Framework f, const std::string& source) {
  if (run.framework && run.framework->value != f) {
    const int old_rank = framework_rank(run.framework->value);
    const int new_rank = framework_rank(f);
    if (old_rank == 2 && new_rank == 2)
      throw AuditInputError(fmt::format("{} says the run used {}, {} says {}", source, to_string(f),
                                        run.framework->source, to_string(run.framework->value)));
    if (new_rank < old_rank) return;
  }
  if (!run.framework || run.framework->value != f) run.framework = Stated<Framework>{f, source};
}

// Shell words of a command line: quotes, backslash escapes and line continuations, comments to the line's end.
std::vector<std::string> shell_words(const std::string& text, const std::string& source) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] != '\n') {
        word += text[i + 1];
        in_word = true;
      }
      ++i;
    } else if (c == '\'' || c == '"') {
      const std::size_t close = text.find(c, i + 1);
      if (close == std::string::npos) throw AuditInputError(fmt::format("{}: unterminated {} quote", source, c));
      word += text.substr(i + 1, close - i - 1);
      in_word = true;
      i = close;
    } else if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

int parse_count(const std::string& text, const std::string& source, const std::string& flag) {
  int out = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec != std::errc() || end != text.data() + text.size() || out < 0)
    throw AuditInputError(fmt::format("{}: {} '{}' is not a count", source, flag, text));
  return out;
}

// A folder a framework writes inside one run: DeepSpeed's checkpoint tags (global_step10/) and the Trainer's
// checkpoints (checkpoint-500/). Their files belong to the run above them.
bool inside_a_run(const fs::path& dir) {
  const std::string name = dir.filename().string();
  return name.rfind("global_step", 0) == 0 || name.rfind("checkpoint-", 0) == 0;
}

bool has_recognised_file(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && classify(entry.path())) return true;
    if (entry.is_directory() && inside_a_run(entry.path()) && has_recognised_file(entry.path())) return true;
  }
  return false;
}

}  // namespace

std::string_view to_string(Framework framework) {
  switch (framework) {
    case Framework::deepspeed: return "deepspeed";
    case Framework::transformers: return "transformers";
    case Framework::trl: return "trl";
    case Framework::openrlhf: return "openrlhf";
    case Framework::llamafactory: return "llamafactory";
  }
  return "?";
}

std::optional<Framework> parse_framework(std::string_view text) {
  for (Framework f : {Framework::deepspeed, Framework::transformers, Framework::trl, Framework::openrlhf,
                      Framework::llamafactory})
    if (to_string(f) == text) return f;
  return std::nullopt;
}

std::string_view to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::none: return "none";
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
  }
  return "?";
}

std::optional<OffloadDevice> parse_offload_device(std::string_view text) {
  for (OffloadDevice d : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme})
    if (to_string(d) == text) return d;
  return std::nullopt;
}

std::optional<Release> Release::parse(std::string_view text) {
  Release r;
  r.text = std::string(text);
  std::size_t i = 0;
  if (i < text.size() && (text[i] == 'v' || text[i] == 'V')) ++i;
  while (true) {
    int part = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), part);
    if (ec != std::errc() || part < 0) break;
    r.parts.push_back(part);
    i = static_cast<std::size_t>(end - text.data());
    if (i < text.size() && text[i] == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))
      ++i;
    else
      break;
  }
  if (r.parts.empty()) return std::nullopt;
  // What may follow the numbers: a pre-release, post-release, dev or local suffix (rc1, .dev0, +cu124).
  for (; i < text.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(text[i])) && text[i] != '.' && text[i] != '+' && text[i] != '-' &&
        text[i] != '_')
      return std::nullopt;
  return r;
}

bool operator<(const Release& a, const Release& b) {
  const std::size_t n = std::max(a.parts.size(), b.parts.size());
  for (std::size_t i = 0; i < n; ++i) {
    const int x = i < a.parts.size() ? a.parts[i] : 0;
    const int y = i < b.parts.size() ? b.parts[i] : 0;
    if (x != y) return x < y;
  }
  return false;
}

bool Release::in(std::string_view first, std::string_view last) const {
  return *Release::parse(first) <= *this && *this <= *Release::parse(last);
}

const Stated<Release>* RunConfiguration::version(const std::string& package) const {
  auto it = versions.find(package);
  return it == versions.end() ? nullptr : &it->second;
}

std::string RunConfiguration::display(const fs::path& file) const {
  if (root.empty()) return file.string();
  const fs::path rel = file.lexically_normal().lexically_relative(root.lexically_normal());
  if (rel.empty() || *rel.begin() == "..") return file.string();
  return rel.string();
}

bool RunConfiguration::first_reading(const fs::path& file) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(file, ec);
  if (ec) canonical = file.lexically_normal();
  if (std::find(read_.begin(), read_.end(), canonical) != read_.end()) return false;
  read_.push_back(canonical);
  return true;
}

template <class T>
void state(std::optional<Stated<T>>& field, T value, const std::string& source, const std::string& what) {
  if (field && !(field->value == value)) {
    auto words = [](const T& v) {
      if constexpr (std::is_same_v<T, bool>) return std::string(v ? "true" : "false");
      else if constexpr (std::is_same_v<T, std::string>) return v;
      else if constexpr (std::is_same_v<T, int>) return std::to_string(v);
      else return std::string(to_string(v));
    };
    throw AuditInputError(fmt::format("{} is {} in {} but {} in {}", what, words(value), source, words(field->value),
                                      field->source));
  }
  if (!field) field = Stated<T>{std::move(value), source};
}
template void state(std::optional<Stated<int>>&, int, const std::string&, const std::string&);
template void state(std::optional<Stated<bool>>&, bool, const std::string&, const std::string&);
template void state(std::optional<Stated<std::string>>&, std::string, const std::string&, const std::string&);
template void state(std::optional<Stated<OffloadDevice>>&, OffloadDevice, const std::string&, const std::string&);

void read_deepspeed_config(RunConfiguration& run, const json& config, const std::string& source) {
  if (!config.is_object()) throw AuditInputError(fmt::format("{}: a DeepSpeed config is a JSON object", source));
  run.inputs.push_back(source);
  state(run.uses_deepspeed, true, source, "the use of DeepSpeed");
  const json zero = config.value("zero_optimization", json::object());
  if (!zero.is_object()) throw AuditInputError(fmt::format("{}: zero_optimization is not an object", source));
  // DeepSpeed's defaults (runtime/zero/config.py): stage 0, no offload.
  const auto stage = json_int(zero, "stage", source, "zero_optimization.");
  if (stage && (*stage < 0 || *stage > 3))
    throw AuditInputError(fmt::format("{}: zero_optimization.stage is {}; DeepSpeed has stages 0 to 3", source, *stage));
  if (stage) state(run.zero_stage, *stage, source, "the ZeRO stage");
  else if (!zero.contains("stage")) state(run.zero_stage, 0, source + " (DeepSpeed's default)", "the ZeRO stage");
  OffloadDevice offload = OffloadDevice::none;
  if (zero.contains("offload_optimizer") && zero["offload_optimizer"].is_object()) {
    const std::string device = zero["offload_optimizer"].value("device", std::string("none"));
    const auto d = parse_offload_device(device);
    if (!d) throw AuditInputError(fmt::format("{}: offload_optimizer.device '{}' is not none, cpu or nvme", source, device));
    offload = *d;
  } else if (zero.value("cpu_offload", false)) {  // the key before offload_optimizer (DeepSpeed <= 0.3)
    offload = OffloadDevice::cpu;
  }
  state(run.optimizer_offload, offload, source, "the optimizer offload");
  state_positive(run.accumulation_steps, json_int(config, "gradient_accumulation_steps", source), source,
                 "gradient_accumulation_steps");
  const auto train = json_int(config, "train_batch_size", source);
  const auto micro = json_int(config, "train_micro_batch_size_per_gpu", source);
  if (train && micro && run.accumulation_steps && *micro > 0 && *train % (*micro * run.accumulation_steps->value) == 0)
    state_positive(run.world_size, *train / (*micro * run.accumulation_steps->value),
                   source + " (train_batch_size / (micro-batch x G))", "the world size");
  if (const json types = config.value("data_types", json::object()); types.is_object() && types.contains("grad_accum_dtype") &&
                                                                     types["grad_accum_dtype"].is_string())
    state(run.grad_accum_dtype, types["grad_accum_dtype"].get<std::string>(), source, "data_types.grad_accum_dtype");
  else
    state(run.grad_accum_dtype, std::string("not set"), source, "data_types.grad_accum_dtype");
  const json bf16 = config.value("bf16", json::object());
  const json fp16 = config.value("fp16", json::object());
  state_precision(run, bf16.is_object() ? json_bool(bf16, "enabled", source) : std::nullopt,
                  fp16.is_object() ? json_bool(fp16, "enabled", source) : std::nullopt, source);
}

void read_package_versions(RunConfiguration& run, const std::string& text, const std::string& source) {
  run.inputs.push_back(source);
  std::istringstream in(text);
  std::string line;
  int read = 0;
  while (std::getline(in, line)) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '-') continue;  // blank, or an option such as -e or --hash
    line = line.substr(first);
    // name==version, name===version; a `name @ url` line names no release.
    const auto eq = line.find("==");
    if (eq == std::string::npos) continue;
    std::string name = line.substr(0, eq);
    if (const auto bracket = name.find('['); bracket != std::string::npos) name.resize(bracket);  // extras
    name.erase(name.find_last_not_of(" \t") + 1);
    std::string version = line.substr(eq + 2);
    if (!version.empty() && version[0] == '=') version.erase(0, 1);
    const auto end = version.find_first_of(" \t;\\");
    if (end != std::string::npos) version.resize(end);
    const std::string package = normalised_package(name);
    if (std::find(kPackages.begin(), kPackages.end(), package) == kPackages.end()) continue;
    state_version(run, package, version, source);
    ++read;
  }
  if (read == 0) run.notes.push_back(source + " names none of DeepSpeed, transformers, TRL, OpenRLHF, LLaMA-Factory, accelerate or torch");
}

void read_training_arguments(RunConfiguration& run, const json& arguments, const std::string& source,
                             const fs::path& base_dir) {
  if (!arguments.is_object()) throw AuditInputError(fmt::format("{}: TrainingArguments are a JSON object", source));
  run.inputs.push_back(source);
  // TRL's configs extend TrainingArguments with their own fields (SFTConfig's dataset_text_field, packing).
  const bool trl = arguments.contains("dataset_text_field") || arguments.contains("packing");
  state_framework(run, trl ? Framework::trl : Framework::transformers, source);
  state_positive(run.accumulation_steps, json_int(arguments, "gradient_accumulation_steps", source), source,
                 "gradient_accumulation_steps");
  state_precision(run, json_bool(arguments, "bf16", source), json_bool(arguments, "fp16", source), source);
  if (const auto a = json_bool(arguments, "average_tokens_across_devices", source))
    state(run.average_tokens_across_devices, *a, source, "average_tokens_across_devices");
  if (arguments.contains("deepspeed")) {
    const json& ds = arguments["deepspeed"];
    if (ds.is_null()) {
      // Not a statement: accelerate launch with a DeepSpeed config (TRL's documented setup) leaves it null too.
      run.notes.push_back(source + ": deepspeed is null, which accelerate's DeepSpeed configs also leave it; --deepspeed no "
                                   "says the run had none");
    } else if (ds.is_object()) {
      read_deepspeed_config(run, ds, source + " (deepspeed)");
    } else if (ds.is_string()) {
      const fs::path path = ds.get<std::string>();
      fs::path found;
      for (const fs::path& p : {path, base_dir / path, base_dir / path.filename()})
        if (fs::is_regular_file(p)) {
          found = p;
          break;
        }
      state(run.uses_deepspeed, true, source + " (deepspeed: " + path.string() + ")", "the use of DeepSpeed");
      if (found.empty()) run.notes.push_back(fmt::format("{} names the DeepSpeed config {}, which is not here", source, path.string()));
      else if (run.first_reading(found)) read_deepspeed_config(run, parse_json(read_text(found), run.display(found)), run.display(found));
    } else {
      throw AuditInputError(fmt::format("{}: deepspeed is {}, not a path, a config or null", source, ds.dump()));
    }
  }
}

void read_llamafactory_yaml(RunConfiguration& run, const fs::path& file) {
  const std::string source = run.display(file);
  YAML::Node root;
  try {
    root = YAML::Load(read_text(file));
  } catch (const YAML::Exception& e) {
    throw AuditInputError(fmt::format("{}: not valid YAML: {}", source, e.what()));
  }
  if (!root.IsMap()) throw AuditInputError(fmt::format("{}: a configuration is a YAML mapping", source));
  run.inputs.push_back(source);
  try {
    if (root["distributed_type"]) {  // an accelerate config, as TRL documents them (trl/accelerate_configs/zero2.yaml)
      state_framework(run, Framework::transformers, source);
      const bool deepspeed = root["distributed_type"].as<std::string>() == "DEEPSPEED";
      state(run.uses_deepspeed, deepspeed, source, "the use of DeepSpeed");
      if (const auto n = root["num_processes"]; n && n.IsScalar()) {
        const int machines = root["num_machines"] ? root["num_machines"].as<int>() : 1;
        state_positive(run.world_size, n.as<int>() * machines, source + " (num_processes x num_machines)", "the world size");
      }
      if (const auto mp = root["mixed_precision"]; mp && mp.IsScalar()) {
        const std::string p = mp.as<std::string>();
        state(run.precision, std::string(p == "no" ? "fp32" : p), source + " (mixed_precision)", "precision");
      }
      if (const auto ds = root["deepspeed_config"]; deepspeed && ds && ds.IsMap()) {
        if (const auto file_node = ds["deepspeed_config_file"]; file_node && file_node.IsScalar()) {
          const fs::path path = file.parent_path() / file_node.as<std::string>();
          if (fs::is_regular_file(path)) {
            if (run.first_reading(path)) read_deepspeed_config(run, parse_json(read_text(path), run.display(path)), run.display(path));
          }
          else run.notes.push_back(fmt::format("{} names the DeepSpeed config {}, which is not here", source, path.string()));
        } else {
          if (ds["zero_stage"]) state(run.zero_stage, ds["zero_stage"].as<int>(), source + " (zero_stage)", "the ZeRO stage");
          const std::string device = ds["offload_optimizer_device"] ? ds["offload_optimizer_device"].as<std::string>() : "none";
          const auto d = parse_offload_device(device);
          if (!d) throw AuditInputError(fmt::format("{}: offload_optimizer_device '{}' is not none, cpu or nvme", source, device));
          state(run.optimizer_offload, *d, source + " (offload_optimizer_device)", "the optimizer offload");
          if (ds["gradient_accumulation_steps"])
            state_positive(run.accumulation_steps, ds["gradient_accumulation_steps"].as<int>(), source, "gradient_accumulation_steps");
        }
      }
      return;
    }
    state_framework(run, Framework::llamafactory, source);
    if (const auto g = root["gradient_accumulation_steps"]; g && g.IsScalar())
      state_positive(run.accumulation_steps, g.as<int>(), source, "gradient_accumulation_steps");
    auto flag = [&](const char* key) -> std::optional<bool> {
      if (const auto n = root[key]; n && n.IsScalar()) return n.as<bool>();
      return std::nullopt;
    };
    state_precision(run, flag("bf16"), flag("fp16"), source);
    if (const auto ds = root["deepspeed"]; ds && ds.IsScalar()) {
      const fs::path path = ds.as<std::string>();
      state(run.uses_deepspeed, true, source + " (deepspeed: " + path.string() + ")", "the use of DeepSpeed");
      fs::path found;
      for (const fs::path& p : {file.parent_path() / path, file.parent_path() / path.filename(), path})
        if (fs::is_regular_file(p)) {
          found = p;
          break;
        }
      if (found.empty()) run.notes.push_back(fmt::format("{} names the DeepSpeed config {}, which is not here", source, path.string()));
      else if (run.first_reading(found)) read_deepspeed_config(run, parse_json(read_text(found), run.display(found)), run.display(found));
    } else if (!ds) {
      state(run.uses_deepspeed, false, source + " (no deepspeed key)", "the use of DeepSpeed");
    }
  } catch (const YAML::Exception& e) {
    throw AuditInputError(fmt::format("{}: a field has the wrong type: {}", source, e.what()));
  }
}

void read_openrlhf_command(RunConfiguration& run, const std::string& text, const std::string& source) {
  const std::vector<std::string> words = shell_words(text, source);
  std::size_t module = words.size();
  for (std::size_t i = 0; i < words.size(); ++i)
    if (words[i].rfind("openrlhf.cli.", 0) == 0) {
      module = i;
      break;
    }
  if (module == words.size()) throw AuditInputError(fmt::format("{}: no openrlhf.cli module on the command line", source));
  run.inputs.push_back(source);
  state_framework(run, Framework::openrlhf, source);
  state(run.uses_deepspeed, true, source + " (OpenRLHF trains through DeepSpeed)", "the use of DeepSpeed");
  state(run.openrlhf_trainer, words[module].substr(std::string("openrlhf.cli.").size()), source, "the OpenRLHF trainer");
  // The launcher's process count, where it says it (deepspeed --num_gpus N, torchrun --nproc_per_node N).
  std::optional<int> world;
  std::map<std::string, std::string> args;
  std::set<std::string> flags;
  for (std::size_t i = 0; i < words.size(); ++i) {
    std::string w = words[i];
    if (w.rfind("--", 0) != 0) continue;
    std::string value;
    bool has_value = false;
    if (const auto eq = w.find('='); eq != std::string::npos) {
      value = w.substr(eq + 1);
      w.resize(eq);
      has_value = true;
    } else if (i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0) {
      value = words[i + 1];
      has_value = true;
    }
    // The launcher's options, wherever the script puts them (OpenRLHF's scripts launch after the heredoc that
    // holds the module's arguments): deepspeed --num_gpus N or --include host:0,1,..., torchrun --nproc_per_node N.
    if ((w == "--num_gpus" || w == "--nproc_per_node" || w == "--nproc-per-node") && has_value) {
      world = parse_count(value, source, w);
      continue;
    }
    if (w == "--include" && has_value && value.find(':') != std::string::npos && value.find('@') == std::string::npos) {
      world = static_cast<int>(std::count(value.begin(), value.end(), ',')) + 1;
      continue;
    }
    if (i < module) continue;
    if (has_value) args[w] = value;
    flags.insert(w);
  }
  // OpenRLHF's flags changed names in 0.10 (--ds.zero_stage for --zero_stage, --train.batch_size for
  // --train_batch_size, ...): either spelling is read. Defaults (openrlhf/cli/train_sft.py, both spellings):
  // ZeRO stage 2, micro-batch 8, global batch 128, the optimizer on the device unless adam_offload.
  auto given = [&](std::initializer_list<const char*> names) -> std::optional<std::string> {
    for (const char* n : names)
      if (auto it = args.find(n); it != args.end()) return it->second;
    return std::nullopt;
  };
  auto flag_set = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return flags.count(n) > 0; });
  };
  auto count = [&](std::initializer_list<const char*> names, int fallback) {
    const auto v = given(names);
    return v ? parse_count(*v, source, *names.begin()) : fallback;
  };
  if (const auto z = given({"--zero_stage", "--ds.zero_stage"})) state(run.zero_stage, parse_count(*z, source, "--zero_stage"), source, "the ZeRO stage");
  else state(run.zero_stage, 2, source + " (OpenRLHF's default ZeRO stage 2)", "the ZeRO stage");
  const bool offload = flag_set({"--adam_offload", "--ds.adam_offload"});
  state(run.optimizer_offload, offload ? OffloadDevice::cpu : OffloadDevice::none,
        source + (offload ? " (adam_offload)" : " (no adam_offload)"), "the optimizer offload");
  if (flag_set({"--bf16"})) state(run.precision, std::string("bf16"), source + " (--bf16)", "precision");
  if (const auto p = given({"--ds.param_dtype", "--param_dtype"})) state(run.precision, *p, source + " (param_dtype)", "precision");
  if (const auto t = given({"--ds.grad_accum_dtype", "--grad_accum_dtype"}))
    state(run.grad_accum_dtype, *t, source + " (grad_accum_dtype)", "data_types.grad_accum_dtype");
  else
    state(run.grad_accum_dtype, std::string("not set"), source + " (OpenRLHF's default: none)", "data_types.grad_accum_dtype");
  state(run.dynamic_batch, flag_set({"--use_dynamic_batch", "--train.dynamic_batch_enable"}), source, "dynamic batching");
  const int micro = count({"--micro_train_batch_size", "--train.micro_batch_size"}, 8);
  const int train = count({"--train_batch_size", "--train.batch_size"}, 128);
  const int ring = count({"--ring_attn_size", "--ds.ring_attn_size"}, 1);
  const int tensor = count({"--ds.tensor_parallel_size"}, 1);
  if (micro < 1 || train < 1 || ring < 1 || tensor < 1)
    throw AuditInputError(fmt::format("{}: batch and group sizes must be positive", source));
  // OpenRLHF's strategy (openrlhf/utils/deepspeed/deepspeed.py): G = batch x ring x tensor-parallel / micro-batch /
  // processes; the data-parallel ranks are the processes over ring x tensor-parallel.
  if (world) {
    if (*world % (ring * tensor) != 0)
      throw AuditInputError(fmt::format("{}: {} processes do not divide into ring attention groups of {} x tensor-parallel {}",
                                        source, *world, ring, tensor));
    state_positive(run.world_size, *world / (ring * tensor), source + " (the launcher's process count)", "the world size");
  }
  if (run.world_size && !flag_set({"--use_dynamic_batch", "--train.dynamic_batch_enable"})) {
    const long processes = static_cast<long>(run.world_size->value) * ring * tensor;
    const long scaled = static_cast<long>(train) * ring * tensor;
    if (scaled % (micro * processes) != 0)
      throw AuditInputError(fmt::format("{}: the global batch {} is not a multiple of the micro-batch {} x {} data-parallel ranks",
                                        source, train, micro, run.world_size->value));
    state_positive(run.accumulation_steps, static_cast<int>(scaled / (micro * processes)),
                   source + fmt::format(" (batch {} / (micro-batch {} x {} ranks))", train, micro, run.world_size->value),
                   "gradient_accumulation_steps");
  } else if (flag_set({"--use_dynamic_batch", "--train.dynamic_batch_enable"})) {
    state_positive(run.accumulation_steps, std::optional<int>(1), source + " (dynamic batching configures G = 1)",
                   "gradient_accumulation_steps");
  } else {
    run.notes.push_back(fmt::format("{}: G = batch {} / (micro-batch {} x data-parallel ranks), and the ranks are not on "
                                    "this command line (--world-size gives them)", source, train, micro));
  }
}

void read_saved_run(RunConfiguration& run, const fs::path& file, const std::string& python, const fs::path& kit_script) {
  if (kit_script.empty() || !fs::is_regular_file(kit_script))
    throw AuditInputError(fmt::format("{}: reading a torch.save file needs the Python kit's saved_run.py, not found at '{}'",
                                      file.string(), kit_script.string()));
  // One JSON line on stdout, or a message on stderr and exit 2 (saved_run.py's contract).
  std::string line;
  std::string failure;
  try {
    // -I: isolated mode, so nothing beside the script or in the environment changes what Python imports.
    sim::external::AdapterProcess reader({.argv = {python, "-I", kit_script.string(), file.string()}});
    const auto read = reader.read_line(std::chrono::seconds(120));
    reader.terminate(std::chrono::seconds(5));
    const std::string exit = reader.exit_description();
    std::string why = reader.stderr_tail();
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    if (read.status == sim::external::ReadStatus::timeout)
      failure = fmt::format("{}: saved_run.py did not answer within 120 s", file.string());
    else if (read.status != sim::external::ReadStatus::line || exit != "exited with status 0")
      failure = why.empty() ? fmt::format("{}: saved_run.py {}", file.string(), exit) : why;
    else
      line = read.line;
  } catch (const std::runtime_error& e) {
    throw AuditInputError(fmt::format("{}: cannot start '{}' to read it: {}", file.string(), python, e.what()));
  }
  if (!failure.empty()) throw AuditInputError(failure);
  const json saved = parse_json(line, file.string() + " (saved_run.py's output)");
  const std::string source = run.display(file);
  bool any = false;
  if (saved.contains("ds_config") && saved["ds_config"].is_object()) {
    read_deepspeed_config(run, saved["ds_config"], source + " (ds_config)");
    any = true;
  } else if (saved.contains("ds_config") && saved["ds_config"].is_string()) {
    // Before DeepSpeed 0.18.6 the engine kept the config as deepspeed.initialize was given it: a path, if a path.
    state(run.uses_deepspeed, true, source + " (ds_config)", "the use of DeepSpeed");
    run.notes.push_back(fmt::format("{} records its DeepSpeed config as the path {}; audit that file too", source,
                                    saved["ds_config"].get<std::string>()));
    any = true;
  }
  if (saved.contains("ds_version") && saved["ds_version"].is_string()) {
    state_version(run, "deepspeed", saved["ds_version"].get<std::string>(), source + " (ds_version)");
    any = true;
  }
  if (saved.contains("dp_world_size") && saved["dp_world_size"].is_number_integer())
    state_positive(run.world_size, saved["dp_world_size"].get<int>(), source + " (dp_world_size)", "the world size");
  if (saved.contains("training_arguments") && saved["training_arguments"].is_object()) {
    read_training_arguments(run, saved["training_arguments"], source, file.parent_path());
    any = true;
  }
  if (!any) throw AuditInputError(fmt::format("{}: holds neither ds_config, ds_version nor TrainingArguments", source));
}

std::optional<InputKind> classify(const fs::path& file) {
  const std::string name = file.filename().string();
  const std::string ext = file.extension().string();
  if (name == "trainer_state.json") return InputKind::trainer_state;
  if (name == "training_args.bin" || (name.find("model_states") != std::string::npos && ext == ".pt"))
    return InputKind::saved_run;
  if (ext == ".yaml" || ext == ".yml") return InputKind::llamafactory_yaml;
  if (name.rfind("requirements", 0) == 0 || name.find("freeze") != std::string::npos || ext == ".lock" ||
      name == "constraints.txt")
    return InputKind::package_versions;
  if (ext == ".sh" || name.find("command") != std::string::npos || ext == ".cmd") return InputKind::openrlhf_command;
  if (ext == ".json") {
    // Judged by the keys: DeepSpeed's config has zero_optimization or batch sizes; TrainingArguments have
    // per_device_train_batch_size.
    std::error_code ec;
    if (fs::file_size(file, ec) > kTextInputBytesMax || ec) return std::nullopt;
    std::ifstream in(file);
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return std::nullopt;
    if (j.contains("per_device_train_batch_size")) return InputKind::training_arguments_json;
    if (j.contains("zero_optimization") || j.contains("train_micro_batch_size_per_gpu") ||
        j.contains("train_batch_size"))
      return InputKind::deepspeed_config;
  }
  return std::nullopt;
}

RunConfiguration read_run(const fs::path& path, const ReadOptions& options, RunConfiguration given) {
  RunConfiguration run = std::move(given);
  run.name = path.string();
  if (fs::is_directory(path)) run.root = path;
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::recursive_directory_iterator(path))
      if (entry.is_regular_file() && classify(entry.path())) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path)) {
    files.push_back(path);
  } else {
    throw AuditInputError(fmt::format("{}: no such file or folder", path.string()));
  }
  bool recognised = false;
  for (const fs::path& file : files) {
    const auto kind = classify(file);
    if (!kind) continue;
    recognised = true;
    if (!run.first_reading(file)) continue;  // another input pointed at it and it was read then
    const std::string source = run.display(file);
    switch (*kind) {
      case InputKind::deepspeed_config: read_deepspeed_config(run, parse_json(read_text(file), source), source); break;
      case InputKind::training_arguments_json:
        read_training_arguments(run, parse_json(read_text(file), source), source, file.parent_path());
        break;
      case InputKind::trainer_state:
        run.notes.push_back(source + " holds no accumulation setting (the Trainer saves them in training_args.bin)");
        break;
      case InputKind::saved_run: read_saved_run(run, file, options.python, options.kit_script); break;
      case InputKind::llamafactory_yaml: read_llamafactory_yaml(run, file); break;
      case InputKind::openrlhf_command: {
        const std::string text = read_text(file);
        if (text.find("openrlhf.cli.") != std::string::npos) read_openrlhf_command(run, text, source);
        else run.notes.push_back(source + " holds no openrlhf.cli command");
        break;
      }
      case InputKind::package_versions: read_package_versions(run, read_text(file), source); break;
    }
  }
  if (!recognised)
    throw AuditInputError(fmt::format("{}: nothing audit reads (a DeepSpeed config, TrainingArguments, a checkpoint's "
                                      "model states, a LLaMA-Factory or accelerate YAML, an OpenRLHF command, a freeze file)",
                                      path.string()));
  return run;
}

std::vector<fs::path> find_runs(const fs::path& path) {
  if (!fs::exists(path)) throw AuditInputError(fmt::format("{}: no such file or folder", path.string()));
  if (!fs::is_directory(path) || has_recognised_file(path)) return {path};
  std::vector<fs::path> subfolders;
  for (const auto& entry : fs::directory_iterator(path))
    if (entry.is_directory()) subfolders.push_back(entry.path());
  std::sort(subfolders.begin(), subfolders.end());
  std::vector<fs::path> runs;
  for (const fs::path& sub : subfolders) {
    try {
      for (fs::path run : find_runs(sub)) runs.push_back(std::move(run));
    } catch (const AuditInputError&) {
      // A subfolder with nothing recognised is not a run; the folder as a whole must still hold one.
    }
  }
  if (runs.empty()) throw AuditInputError(fmt::format("{}: no run found (no file audit reads, here or below)", path.string()));
  return runs;
}

}  // namespace accumcheck::surface
