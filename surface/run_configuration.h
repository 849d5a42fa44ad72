// What a past training run left behind, read into the fields `accumcheck audit` decides on (docs/audit.md).
//
// A run is described by the files users keep: a DeepSpeed config JSON, a DeepSpeed checkpoint's model-states
// file (its `ds_config` and `ds_version`), a transformers `TrainingArguments` dump (JSON, or the Trainer's
// `training_args.bin`), an OpenRLHF command line, a LLaMA-Factory YAML, and package versions (`pip freeze`
// output, a requirements or lock file), plus command-line flags. Every field remembers where it came from, so a
// verdict can say which file decided it. Files written by torch.save are read by the Python kit's
// `saved_run.py`, which never imports or calls anything named in the file (see its docstring), never here.
//
// Reading never guesses: a field no input states stays unknown, and two inputs that state different values for
// one field are an error naming both (AuditInputError), never a silent choice.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace accumcheck::surface {

// A malformed or contradictory input: the message names the file and the problem.
class AuditInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class T>
struct Stated {
  T value;
  std::string source;  // "ds_config.json", "requirements.txt", "--world-size", ...
};

// The framework whose training loop drove the engine.
enum class Framework { deepspeed, transformers, trl, openrlhf, llamafactory };
std::string_view to_string(Framework framework);
std::optional<Framework> parse_framework(std::string_view text);

enum class OffloadDevice { none, cpu, nvme };
std::string_view to_string(OffloadDevice device);
std::optional<OffloadDevice> parse_offload_device(std::string_view text);

// A release number's leading numeric parts ("4.46.0.dev0" -> 4.46.0, with the suffix kept for the text).
struct Release {
  std::vector<int> parts;
  std::string text;
  static std::optional<Release> parse(std::string_view text);
  // Compares the numeric parts, missing parts as 0: 4.46 == 4.46.0.
  friend bool operator<(const Release& a, const Release& b);
  friend bool operator<=(const Release& a, const Release& b) { return !(b < a); }
  bool in(std::string_view first, std::string_view last) const;  // first <= this <= last
};

struct RunConfiguration {
  std::string name;                 // the run: its folder or file
  std::filesystem::path root;       // the run's folder: sources are named relative to it
  std::vector<std::string> inputs;  // the inputs read, in order (each file once)
  std::vector<std::string> notes;   // what was seen and not used ("trainer_state.json holds no accumulation setting")

  std::map<std::string, Stated<Release>> versions;  // normalised package name -> release
  std::optional<Stated<Framework>> framework;
  std::optional<Stated<bool>> uses_deepspeed;
  std::optional<Stated<int>> zero_stage;
  std::optional<Stated<OffloadDevice>> optimizer_offload;
  std::optional<Stated<int>> accumulation_steps;  // G as configured
  std::optional<Stated<int>> world_size;          // data-parallel ranks
  std::optional<Stated<std::string>> precision;   // "fp32", "bf16" or "fp16"
  std::optional<Stated<std::string>> grad_accum_dtype;  // DeepSpeed's data_types.grad_accum_dtype ("fp32", ...)
  std::optional<Stated<bool>> average_tokens_across_devices;
  std::optional<Stated<std::string>> openrlhf_trainer;  // "train_sft", "train_ppo_ray", ...
  std::optional<Stated<bool>> dynamic_batch;            // OpenRLHF --use_dynamic_batch

  const Stated<Release>* version(const std::string& package) const;
  // A file's name for messages and sources: relative to root when under it.
  std::string display(const std::filesystem::path& file) const;
  // True the first time `file` is read in this run (files another input points at are read once).
  bool first_reading(const std::filesystem::path& file);

 private:
  std::vector<std::filesystem::path> read_;
};

// Sets `field` from `source`, or checks it agrees with what an earlier input stated (AuditInputError if not).
template <class T>
void state(std::optional<Stated<T>>& field, T value, const std::string& source, const std::string& what);

// The readers. Each adds what its input states to `run`, names itself in run.inputs and throws AuditInputError
// for malformed input. `source` is the name the messages use.
void read_deepspeed_config(RunConfiguration& run, const nlohmann::json& config, const std::string& source);
void read_package_versions(RunConfiguration& run, const std::string& text, const std::string& source);
void read_training_arguments(RunConfiguration& run, const nlohmann::json& arguments, const std::string& source,
                             const std::filesystem::path& base_dir);
void read_llamafactory_yaml(RunConfiguration& run, const std::filesystem::path& file);
void read_openrlhf_command(RunConfiguration& run, const std::string& text, const std::string& source);
// Runs `python` on the kit's saved_run.py for a torch.save file and reads its ds_config, ds_version and
// TrainingArguments fields.
void read_saved_run(RunConfiguration& run, const std::filesystem::path& file, const std::string& python,
                    const std::filesystem::path& kit_script);

// What a file is, judged by its name and content; nullopt for a file audit does not read.
enum class InputKind { deepspeed_config, training_arguments_json, trainer_state, saved_run, llamafactory_yaml,
                       openrlhf_command, package_versions };
std::optional<InputKind> classify(const std::filesystem::path& file);

struct ReadOptions {
  std::string python = "python3";
  std::filesystem::path kit_script;  // adapters/python/src/accumcheck_adapter/saved_run.py
};

// One run from a file or a folder (every recognised file in it and below it, in path order), added to `given`
// (what the command line already states).
RunConfiguration read_run(const std::filesystem::path& path, const ReadOptions& options, RunConfiguration given = {});

// The runs under `path`: a file is one run; a folder with recognised files of its own (or in its checkpoint
// folders, global_step*/ and checkpoint-*/) is one run; otherwise each subfolder is searched the same way, in name
// order. Throws AuditInputError when nothing is recognised.
std::vector<std::filesystem::path> find_runs(const std::filesystem::path& path);

}  // namespace accumcheck::surface
