// surface/audit.h and surface/run_configuration.h: the verdicts on configurations taken from the frameworks'
// shipped examples (audit_runs/, README.md there says where each came from), with buggy and fixed releases; the
// damage measured on our DeepSpeed models; and the readers' refusals of malformed and contradictory input.
#include "surface/audit.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

namespace accumcheck::surface {
namespace {

namespace fs = std::filesystem;

const fs::path kRuns = ACCUMCHECK_AUDIT_RUNS_DIR;

std::map<std::string, AuditStatus> statuses(const RunAudit& audit) {
  std::map<std::string, AuditStatus> out;
  for (const auto& d : audit.defects) out[d.id] = d.status;
  return out;
}

const DefectVerdict& defect(const RunAudit& audit, const std::string& id) {
  for (const auto& d : audit.defects)
    if (d.id == id) return d;
  throw std::logic_error("no defect " + id);
}

RunAudit audit_folder(const std::string& name, std::optional<int> world_size = std::nullopt) {
  RunConfiguration given;
  if (world_size) given.world_size = Stated<int>{*world_size, "--world-size"};
  return audit_run(read_run(kRuns / name, ReadOptions{.kit_script = ACCUMCHECK_SAVED_RUN_SCRIPT}, given));
}

constexpr auto A = AuditStatus::affected;
constexpr auto N = AuditStatus::not_affected;
constexpr auto T = AuditStatus::cannot_tell;

// Every defect's verdict for every row, so that a rule that starts firing where it should not fails here too.
struct Row {
  std::string folder;
  std::optional<int> world_size;
  std::map<std::string, AuditStatus> want;
  AuditStatus overall;
};

std::map<std::string, AuditStatus> all(AuditStatus s) {
  return {{"deepspeed-zero2-offload-drop", s},
          {"deepspeed-zero2-overwrite-without-offload", s},
          {"deepspeed-zero1-offload-bf16-unreduced", s},
          {"deepspeed-boundary-every-backward", s},
          {"openrlhf-mean-of-micro-batch-means", s},
          {"transformers-mean-of-micro-batch-means", s},
          {"transformers-per-rank-token-count", s},
          {"transformers-deepspeed-extra-division-by-g", s}};
}

std::map<std::string, AuditStatus> with(std::map<std::string, AuditStatus> base, const std::map<std::string, AuditStatus>& changes) {
  for (const auto& [k, v] : changes) base[k] = v;
  return base;
}

TEST(Audit, DecidesTheShippedConfigurationsWithBuggyAndFixedReleases) {
  const std::vector<Row> rows = {
      // LLaMA-Factory's ds_z2_offload_config.json under its SFT example at G = 8: 0.9.3 (transformers 4.52.4,
      // DeepSpeed 0.16.4) drops; the per-rank count needs the world size, which a LLaMA-Factory YAML does not say.
      {"llamafactory-z2-offload-g8", std::nullopt,
       with(all(N), {{"deepspeed-zero2-offload-drop", A}, {"transformers-per-rank-token-count", T}}), A},
      {"llamafactory-z2-offload-g8", 1, with(all(N), {{"deepspeed-zero2-offload-drop", A}}), A},
      {"llamafactory-z2-offload-g8", 8,
       with(all(N), {{"deepspeed-zero2-offload-drop", A}, {"transformers-per-rank-token-count", A}}), A},
      // The same files on 0.9.5 (transformers 5.6.0, DeepSpeed 0.19.8): clean on any world size.
      {"llamafactory-z2-offload-g8-fixed", std::nullopt, all(N), N},
      // The shipped example's own G = 2: both micro-batches of a window survive.
      {"llamafactory-z2-offload-g2", 1, all(N), N},
      // TRL's zero2.yaml (8 processes) with offload_optimizer_device cpu: 0.12.2 on transformers 4.46.3 and
      // DeepSpeed 0.16.4 meets three defects; 1.14.2 on 5.24.0 and 0.19.8 none.
      {"trl-zero2-offload", std::nullopt,
       with(all(N), {{"deepspeed-zero2-offload-drop", A},
                     {"transformers-per-rank-token-count", A},
                     {"transformers-deepspeed-extra-division-by-g", A}}),
       A},
      {"trl-zero2-offload-fixed", std::nullopt, all(N), N},
      // OpenRLHF's shipped SFT script with --adam_offload, launched on 8 GPUs: G = 256 / (2 x 8) = 16.
      {"openrlhf-sft-adam-offload", std::nullopt,
       with(all(N), {{"deepspeed-zero2-offload-drop", A}, {"openrlhf-mean-of-micro-batch-means", A}}), A},
      {"openrlhf-sft-adam-offload-fixed", std::nullopt, all(N), N},
      // A real DeepSpeed 0.16.4 checkpoint (make_deepspeed_checkpoint.py): its model states alone say ZeRO-2,
      // offload, G = 3, one rank; they do not say which framework drove the engine.
      {"deepspeed-checkpoint-zero2-offload", std::nullopt,
       with(all(T), {{"deepspeed-zero2-offload-drop", A},
                     {"deepspeed-zero2-overwrite-without-offload", N},
                     {"deepspeed-zero1-offload-bf16-unreduced", N},
                     {"deepspeed-boundary-every-backward", N},
                     {"transformers-per-rank-token-count", N}}),
       A},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.folder + (row.world_size ? " --world-size " + std::to_string(*row.world_size) : ""));
    const RunAudit audit = audit_folder(row.folder, row.world_size);
    EXPECT_EQ(statuses(audit), row.want);
    EXPECT_EQ(audit.overall, row.overall);
  }
}

TEST(Audit, MeasuresTheDropOnTheModelOfTheRunsRelease) {
  const RunAudit audit = audit_folder("llamafactory-z2-offload-g8", 1);
  const DefectVerdict& d = defect(audit, "deepspeed-zero2-offload-drop");
  EXPECT_EQ(d.numbers["micro_batches_reaching_optimizer"], nlohmann::json({0, 7}));
  EXPECT_EQ(d.numbers["fraction_of_signal"], "2/8");
  EXPECT_EQ(d.numbers["model"], "deepspeed@0.16.4");
  EXPECT_NE(d.damage.find("only micro-batches 0 and 7 of each window reach the optimizer: 2/8 of the gradient signal"),
            std::string::npos)
      << d.damage;
  // Each condition names the file that stated it.
  for (const auto& c : d.conditions) EXPECT_FALSE(c.source.empty()) << c.what;
  EXPECT_EQ(d.conditions[4].source, "llama3_full_sft.yaml");
  EXPECT_EQ(d.conditions[2].source, "examples/deepspeed/ds_z2_offload_config.json");
}

TEST(Audit, TheNonOffloadOverwriteLeavesOnlyTheLastMicroBatch) {
  RunConfiguration run;
  read_deepspeed_config(run, {{"zero_optimization", {{"stage", 2}}}, {"gradient_accumulation_steps", 4}}, "ds.json");
  read_package_versions(run, "deepspeed==0.18.0\n", "freeze.txt");
  run.world_size = Stated<int>{2, "--world-size"};
  const RunAudit audit = audit_run(run);
  const DefectVerdict& d = defect(audit, "deepspeed-zero2-overwrite-without-offload");
  EXPECT_EQ(d.status, A);
  EXPECT_EQ(d.numbers["micro_batches_reaching_optimizer"], nlohmann::json({3}));
  EXPECT_EQ(defect(audit, "deepspeed-zero2-offload-drop").status, N);
  // 0.18.3 reads the other test: correct.
  RunConfiguration fixed = run;
  fixed.versions.clear();
  read_package_versions(fixed, "deepspeed==0.18.3\n", "freeze.txt");
  EXPECT_EQ(defect(audit_run(fixed), "deepspeed-zero2-overwrite-without-offload").status, N);
}

TEST(Audit, UnknownConditionsGiveCannotTellNeverNotAffected) {
  RunConfiguration run;
  read_deepspeed_config(run, {{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}}}}, "ds.json");
  read_package_versions(run, "deepspeed==0.17.0\n", "freeze.txt");
  // No G anywhere: the drop can neither be confirmed nor ruled out.
  const RunAudit audit = audit_run(run);
  EXPECT_EQ(defect(audit, "deepspeed-zero2-offload-drop").status, T);
  EXPECT_EQ(audit.overall, T);
  EXPECT_EQ(audit_exit_code({audit}), kExitAuditCannotTell);
  // No version: the same.
  RunConfiguration no_version;
  read_deepspeed_config(no_version, {{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}}},
                                     {"gradient_accumulation_steps", 8}},
                        "ds.json");
  EXPECT_EQ(defect(audit_run(no_version), "deepspeed-zero2-offload-drop").status, T);
  // G = 2 rules it out whatever the version.
  RunConfiguration g2;
  read_deepspeed_config(g2, {{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}}},
                             {"gradient_accumulation_steps", 2}},
                        "ds.json");
  EXPECT_EQ(defect(audit_run(g2), "deepspeed-zero2-offload-drop").status, N);
}

TEST(Audit, ZeroOneOffloadInBf16NeedsFp32AccumulationAndSeveralRanks) {
  auto run_with = [](nlohmann::json types, int ranks) {
    RunConfiguration run;
    nlohmann::json config = {{"zero_optimization", {{"stage", 1}, {"offload_optimizer", {{"device", "cpu"}}}}},
                             {"bf16", {{"enabled", true}}},
                             {"gradient_accumulation_steps", 2}};
    if (!types.is_null()) config["data_types"] = types;
    read_deepspeed_config(run, config, "ds.json");
    read_package_versions(run, "deepspeed==0.19.7\n", "freeze.txt");
    run.world_size = Stated<int>{ranks, "--world-size"};
    return defect(audit_run(run), "deepspeed-zero1-offload-bf16-unreduced").status;
  };
  EXPECT_EQ(run_with({{"grad_accum_dtype", "fp32"}}, 2), A);
  EXPECT_EQ(run_with({{"grad_accum_dtype", "fp32"}}, 1), N);
  EXPECT_EQ(run_with(nullptr, 2), N);  // not the default
  RunConfiguration fixed;
  read_deepspeed_config(fixed, {{"zero_optimization", {{"stage", 1}, {"offload_optimizer", {{"device", "cpu"}}}}},
                                {"bf16", {{"enabled", true}}}, {"data_types", {{"grad_accum_dtype", "fp32"}}}},
                        "ds.json");
  read_package_versions(fixed, "deepspeed==0.19.8\n", "freeze.txt");
  fixed.world_size = Stated<int>{4, "--world-size"};
  EXPECT_EQ(defect(audit_run(fixed), "deepspeed-zero1-offload-bf16-unreduced").status, N);
}

TEST(Audit, TransformersBandsFollowTheReleases) {
  auto trainer = [](const std::string& version, int g, int ranks, std::optional<bool> across) {
    RunConfiguration run;
    nlohmann::json args = {{"per_device_train_batch_size", 4}, {"gradient_accumulation_steps", g}};
    if (across) args["average_tokens_across_devices"] = *across;
    read_training_arguments(run, args, "training_args.json", ".");
    read_package_versions(run, "transformers==" + version + "\n", "freeze.txt");
    run.world_size = Stated<int>{ranks, "--world-size"};
    run.uses_deepspeed = Stated<bool>{false, "--deepspeed"};
    return statuses(audit_run(run));
  };
  EXPECT_EQ(trainer("4.45.2", 4, 1, std::nullopt)["transformers-mean-of-micro-batch-means"], A);
  EXPECT_EQ(trainer("4.45.2", 1, 2, std::nullopt)["transformers-mean-of-micro-batch-means"], A);  // across ranks too
  EXPECT_EQ(trainer("4.45.2", 1, 1, std::nullopt)["transformers-mean-of-micro-batch-means"], N);
  EXPECT_EQ(trainer("4.46.0", 4, 1, std::nullopt)["transformers-mean-of-micro-batch-means"], N);
  EXPECT_EQ(trainer("4.53.3", 4, 2, std::nullopt)["transformers-per-rank-token-count"], A);
  EXPECT_EQ(trainer("4.53.3", 4, 2, true)["transformers-per-rank-token-count"], N);
  EXPECT_EQ(trainer("4.54.0", 4, 2, std::nullopt)["transformers-per-rank-token-count"], N);
  EXPECT_EQ(trainer("5.24.0", 4, 2, false)["transformers-per-rank-token-count"], A);  // turned off by hand
  EXPECT_EQ(trainer("4.46.3", 4, 1, std::nullopt)["transformers-deepspeed-extra-division-by-g"], N);  // no DeepSpeed
}

TEST(Audit, OpenRlhfReadsBothFlagSpellingsAndComputesG) {
  RunConfiguration old_style;
  read_openrlhf_command(old_style,
                        "deepspeed --include localhost:0,1,2,3 --module openrlhf.cli.train_sft --zero_stage 2 "
                        "--adam_offload --train_batch_size 64 --micro_train_batch_size 2",
                        "cmd.sh");
  ASSERT_TRUE(old_style.accumulation_steps);
  EXPECT_EQ(old_style.world_size->value, 4);
  EXPECT_EQ(old_style.accumulation_steps->value, 8);
  EXPECT_EQ(old_style.optimizer_offload->value, OffloadDevice::cpu);
  RunConfiguration new_style;
  read_openrlhf_command(new_style,
                        "torchrun --nproc_per_node 8 -m openrlhf.cli.train_sft --ds.zero_stage 1 --ds.adam_offload "
                        "--train.batch_size 128 --train.micro_batch_size 4 --ds.ring_attn_size 2 --ds.param_dtype bf16",
                        "cmd.sh");
  EXPECT_EQ(new_style.zero_stage->value, 1);
  EXPECT_EQ(new_style.world_size->value, 4);                // 8 processes in ring groups of 2
  EXPECT_EQ(new_style.accumulation_steps->value, 128 * 2 / (4 * 8));  // OpenRLHF's strategy
  EXPECT_EQ(new_style.precision->value, "bf16");
  // Defaults: ZeRO-2, no offload.
  RunConfiguration defaults;
  read_openrlhf_command(defaults, "deepspeed --module openrlhf.cli.train_sft --pretrain m", "cmd.sh");
  EXPECT_EQ(defaults.zero_stage->value, 2);
  EXPECT_EQ(defaults.optimizer_offload->value, OffloadDevice::none);
  EXPECT_FALSE(defaults.accumulation_steps);
  // A DPO run: its loss is not a token mean we model, so the mean-of-means rule cannot decide.
  RunConfiguration dpo;
  read_openrlhf_command(dpo, "deepspeed --num_gpus 2 --module openrlhf.cli.train_dpo --train_batch_size 8 --micro_train_batch_size 1", "cmd.sh");
  read_package_versions(dpo, "openrlhf==0.10.2\ndeepspeed==0.18.9\n", "freeze.txt");
  EXPECT_EQ(defect(audit_run(dpo), "openrlhf-mean-of-micro-batch-means").status, T);
}

TEST(Audit, RefusesMalformedAndContradictoryInput) {
  auto message_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const AuditInputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  RunConfiguration run;
  EXPECT_NE(message_of([&] { read_deepspeed_config(run, {{"zero_optimization", {{"stage", 5}}}}, "ds.json"); })
                .find("ds.json: zero_optimization.stage is 5"),
            std::string::npos);
  EXPECT_NE(message_of([&] { read_deepspeed_config(run, {{"gradient_accumulation_steps", "eight"}}, "ds.json"); })
                .find("not an integer"),
            std::string::npos);
  RunConfiguration two;
  read_deepspeed_config(two, {{"gradient_accumulation_steps", 4}}, "ds.json");
  EXPECT_NE(message_of([&] { read_training_arguments(two, {{"per_device_train_batch_size", 1}, {"gradient_accumulation_steps", 8}}, "args.json", "."); })
                .find("gradient_accumulation_steps is 8 in args.json but 4 in ds.json"),
            std::string::npos);
  RunConfiguration versions;
  read_package_versions(versions, "deepspeed==0.16.4\n", "a.txt");
  EXPECT_NE(message_of([&] { read_package_versions(versions, "DeepSpeed==0.19.8\n", "b.txt"); }).find("contradicts"),
            std::string::npos);
  EXPECT_NE(message_of([&] { read_package_versions(versions, "torch==banana\n", "c.txt"); }).find("not a release number"),
            std::string::npos);
  RunConfiguration cmd;
  EXPECT_NE(message_of([&] { read_openrlhf_command(cmd, "python train.py --zero_stage 2", "cmd.sh"); }).find("no openrlhf.cli module"),
            std::string::npos);
  EXPECT_NE(message_of([&] { read_openrlhf_command(cmd, "deepspeed --module openrlhf.cli.train_sft --pretrain 'm", "cmd.sh"); })
                .find("unterminated"),
            std::string::npos);
  const fs::path dir = fs::temp_directory_path() / "accumcheck_audit_test";
  fs::create_directories(dir);
  std::ofstream(dir / "bad.yaml") << "stage: sft\n  deepspeed: [unclosed\n";
  RunConfiguration yaml;
  EXPECT_NE(message_of([&] { read_llamafactory_yaml(yaml, dir / "bad.yaml"); }).find("not valid YAML"), std::string::npos);
  std::ofstream(dir / "ds_config.json") << "{\"zero_optimization\": ";
  // classify() reads the keys; a truncated JSON is not recognised as a config, so the folder holds nothing to read.
  EXPECT_NE(message_of([&] { (void)find_runs(dir / "nothing-here"); }).find("no such file or folder"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Audit, FindsOneRunPerFolderBelowAFolderOfRuns) {
  const auto runs = find_runs(kRuns);
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs.front().filename(), "deepspeed-checkpoint-zero2-offload");  // its global_step1/ is inside it
  EXPECT_EQ(runs.back().filename(), "trl-zero2-offload-fixed");
}

TEST(Audit, ReleasesCompareByTheirNumbers) {
  EXPECT_TRUE(Release::parse("4.46.0.dev0")->in("4.46.0", "4.48.999"));
  EXPECT_TRUE(*Release::parse("0.9") < *Release::parse("0.10.0"));
  EXPECT_FALSE(Release::parse("2.6.0+cu124")->in("2.7", "3"));
  EXPECT_FALSE(Release::parse("latest"));
  EXPECT_FALSE(Release::parse("1.2; rm -rf"));
}

}  // namespace
}  // namespace accumcheck::surface
