// The defects audit decides on, their trigger conditions, and the damage measured on our models (audit.h).
#include "surface/audit.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "fuzz/campaign.h"
#include "fuzz/finding.h"
#include "properties/membership.h"
#include "sim/external/adapter_target.h"
#include "surface/reproducer.h"
#include "sim/deepspeed_zero.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::surface {

using nlohmann::json;

namespace {

// Membership digits grow as 10^(micro-batches); past this the probe is cut to a window this long and a rank
// count this large, which keeps every pattern the models have (first, last and middle micro-batches, several
// ranks) and a run of milliseconds.
constexpr int kProbeAccumulationStepsMax = 64;
constexpr int kProbeRanksMax = 4;
// --confirm runs the real release: a short window keeps it to seconds and still holds first, middle and last.
constexpr int kConfirmWindowMax = 5;  // two windows: ids 0..9, and 10^9 is exact in fp32
constexpr std::string_view kConfirmProperty = "accumulated_update_equals_full_batch_update";

AuditCondition known(std::string what, std::string value, std::string source, bool holds) {
  return {std::move(what), std::move(value), std::move(source), holds};
}
AuditCondition unknown(std::string what, std::string hint) {
  return {std::move(what), "unknown" + (hint.empty() ? std::string() : " (" + hint + ")"), "", std::nullopt};
}

AuditStatus decide(const std::vector<AuditCondition>& conditions) {
  bool all = true;
  for (const auto& c : conditions) {
    if (c.holds == false) return AuditStatus::not_affected;
    if (!c.holds) all = false;
  }
  return all ? AuditStatus::affected : AuditStatus::cannot_tell;
}

bool trainer_family(Framework f) {
  return f == Framework::transformers || f == Framework::trl || f == Framework::llamafactory;
}

// The conditions shared by several defects.
AuditCondition uses_deepspeed(const RunConfiguration& run) {
  if (run.uses_deepspeed)
    return known("the run trained through DeepSpeed", run.uses_deepspeed->value ? "yes" : "no", run.uses_deepspeed->source,
                 run.uses_deepspeed->value);
  return unknown("the run trained through DeepSpeed", "no DeepSpeed config among the inputs");
}

// `what` names the band in words ("DeepSpeed 0.15.2 - 0.18.9"); [first, last] is the band itself.
AuditCondition version_in(const RunConfiguration& run, const std::string& package, const std::string& what,
                          std::string_view first, std::string_view last) {
  if (const auto* v = run.version(package))
    return known(what, v->value.text, v->source, v->value.in(first, last));
  return unknown(what, "give a freeze file or --package " + package + "==X.Y.Z");
}

AuditCondition zero_stage_is(const RunConfiguration& run, int stage) {
  const std::string what = fmt::format("ZeRO stage {}", stage);
  if (run.zero_stage) return known(what, std::to_string(run.zero_stage->value), run.zero_stage->source, run.zero_stage->value == stage);
  return unknown(what, "");
}

AuditCondition offload_is(const RunConfiguration& run, bool wanted) {
  const std::string what = wanted ? "optimizer offloaded to the CPU" : "optimizer not offloaded";
  if (!run.optimizer_offload) return unknown(what, "");
  const OffloadDevice d = run.optimizer_offload->value;
  if (d == OffloadDevice::nvme)  // ZeRO-Infinity's NVMe path is not what the models follow
    return {what, "nvme (not modelled)", run.optimizer_offload->source, std::nullopt};
  return known(what, std::string(to_string(d)), run.optimizer_offload->source, (d == OffloadDevice::cpu) == wanted);
}

AuditCondition accumulation_at_least(const RunConfiguration& run, int g) {
  const std::string what = fmt::format("gradient accumulation G >= {}", g);
  if (run.accumulation_steps)
    return known(what, std::to_string(run.accumulation_steps->value), run.accumulation_steps->source,
                 run.accumulation_steps->value >= g);
  return unknown(what, "give --accumulation-steps");
}

AuditCondition world_at_least(const RunConfiguration& run, int w) {
  const std::string what = fmt::format("world size >= {}", w);
  if (run.world_size) return known(what, std::to_string(run.world_size->value), run.world_size->source, run.world_size->value >= w);
  return unknown(what, "give --world-size");
}

// G >= 2 or world size >= 2: a mean over more than one micro-batch of one rank.
AuditCondition several_micro_batches(const RunConfiguration& run) {
  const std::string what = "more than one micro-batch per optimizer step (G >= 2 or world size >= 2)";
  const bool g2 = run.accumulation_steps && run.accumulation_steps->value >= 2;
  const bool w2 = run.world_size && run.world_size->value >= 2;
  if (g2) return known(what, "G = " + std::to_string(run.accumulation_steps->value), run.accumulation_steps->source, true);
  if (w2) return known(what, "world size " + std::to_string(run.world_size->value), run.world_size->source, true);
  if (run.accumulation_steps && run.world_size)
    return known(what, "G = 1, world size 1", run.accumulation_steps->source + ", " + run.world_size->source, false);
  return unknown(what, "give --accumulation-steps and --world-size");
}

AuditCondition framework_in(const RunConfiguration& run, const std::string& what, const std::function<bool(Framework)>& in) {
  if (run.framework)
    return known(what, std::string(to_string(run.framework->value)), run.framework->source, in(run.framework->value));
  return unknown(what, "give --framework");
}

// --- the damage of an engine defect, measured on our model of the release -----------------------------------

struct ProbeOutcome {
  bool ran = false;
  std::string why_not;
  std::vector<int> reaching;  // micro-batch indices of window 0 whose gradient reached the optimizer once (rank 0)
  int window = 0, ranks = 0;
  std::string summary;
  bool clean = false;
  bool same_in_every_window = true;  // window 1 and every rank lose what window 0's rank 0 loses, nothing leaks
};

ProbeOutcome probe_engine(const RunConfiguration& run) {
  ProbeOutcome out;
  const auto* ds = run.version("deepspeed");
  if (!ds || !run.zero_stage || !run.optimizer_offload || !run.accumulation_steps) {
    out.why_not = "the DeepSpeed release, ZeRO stage, offload and G must all be known";
    return out;
  }
  if (run.optimizer_offload->value == OffloadDevice::nvme || run.zero_stage->value == 3) {
    out.why_not = "the models follow ZeRO stages 0 to 2 with CPU offload only";
    return out;
  }
  const auto version = sim::DeepSpeedVersion::parse(fmt::format("{}.{}.{}", ds->value.parts.size() > 0 ? ds->value.parts[0] : 0,
                                                                ds->value.parts.size() > 1 ? ds->value.parts[1] : 0,
                                                                ds->value.parts.size() > 2 ? ds->value.parts[2] : 0));
  out.window = std::min(run.accumulation_steps->value, kProbeAccumulationStepsMax);
  out.ranks = std::min(run.world_size ? run.world_size->value : 1, kProbeRanksMax);
  sim::Scenario base;
  base.engine.rank_count = out.ranks;
  base.engine.accumulation_steps = out.window;
  base.engine.zero_stage = run.zero_stage->value;
  base.engine.offload = run.optimizer_offload->value == OffloadDevice::cpu;
  // accelerate >= 1.8 (PR #3630) sets the boundary itself and steps once per window; before, and in OpenRLHF's
  // and DeepSpeed's documented loops, engine.step() follows every backward (docs/targets.md section 9).
  const auto* accelerate = run.version("accelerate");
  if (run.framework && trainer_family(run.framework->value) && accelerate && !(accelerate->value < *Release::parse("1.8"))) {
    base.engine.boundary = sim::BoundaryMode::manual;
    base.engine.step_after_every_backward = false;
  }
  base.steps.resize(2);  // two windows: leakage between optimizer steps shows too
  for (auto& step : base.steps) step.micro_batches.resize(static_cast<std::size_t>(out.window));
  const properties::MembershipProbe probe = properties::membership_probe(base);
  try {
    const auto target = sim::make_target("deepspeed@" + version->to_string());
    if (const std::string why = target->unsupported(probe.scenario); !why.empty()) {
      out.why_not = "our model refuses this configuration: " + why;
      return out;
    }
    const sim::RunResult result = target->run(probe.scenario, {.scalar = sim::ScalarKind::rational});
    const properties::MembershipReport report = properties::decode_membership(probe, result);
    out.ran = true;
    out.clean = report.wrong.empty();
    out.summary = report.summary;
    for (int k = 0; k < out.window; ++k) {
      bool reached = true;
      for (const auto& e : report.wrong)
        if (e.applied_in_step == 0 && e.micro_batch.step == 0 && e.micro_batch.micro_batch == k && e.micro_batch.rank == 0)
          reached = false;
      if (reached) out.reaching.push_back(k);
    }
    for (const auto& e : report.wrong) {
      const bool as_window0 = e.applied_in_step == e.micro_batch.step && e.multiplicity == 0 &&
                              std::find(out.reaching.begin(), out.reaching.end(), e.micro_batch.micro_batch) == out.reaching.end();
      if (!as_window0) out.same_in_every_window = false;
    }
    // Every dropped pattern must cover all ranks and both windows: count them.
    const std::size_t expected = static_cast<std::size_t>(out.window - static_cast<int>(out.reaching.size())) * 2u *
                                 static_cast<std::size_t>(out.ranks);
    if (report.wrong.size() != expected) out.same_in_every_window = false;
  } catch (const std::exception& e) {
    out.why_not = std::string("our model could not run it: ") + e.what();
  }
  return out;
}

std::string index_list(const std::vector<int>& xs) {
  std::vector<std::string> words;
  for (int x : xs) words.push_back(std::to_string(x));
  if (words.empty()) return "none";
  if (words.size() == 1) return words[0];
  std::string out;
  for (std::size_t i = 0; i + 1 < words.size(); ++i) out += (i ? ", " : "") + words[i];
  return out + " and " + words.back();
}

// Attaches the probe's measurement to an engine defect; an affected rule with a clean model (or the reverse)
// makes the verdict "cannot tell" and says why.
void measure(DefectVerdict& d, const ProbeOutcome& probe, const RunConfiguration& run) {
  if (d.status == AuditStatus::not_affected) return;
  if (!probe.ran) {
    d.damage += (d.damage.empty() ? "" : " ") + std::string("Not measured: ") + probe.why_not + ".";
    return;
  }
  const int g = run.accumulation_steps->value;
  const int survivors = static_cast<int>(probe.reaching.size());
  d.numbers["window_measured"] = probe.window;
  d.numbers["micro_batches_reaching_optimizer"] = probe.reaching;
  d.numbers["ranks_measured"] = probe.ranks;
  d.numbers["model"] = "deepspeed@" + run.version("deepspeed")->value.text;
  d.numbers["membership"] = probe.summary;
  if (d.status == AuditStatus::affected && probe.clean) {
    d.status = AuditStatus::cannot_tell;
    d.damage = fmt::format("The version rule says affected, but our model of DeepSpeed {} applies every micro-batch "
                           "once at G = {}: the two disagree, so this verdict is not given.",
                           run.version("deepspeed")->value.text, probe.window);
    return;
  }
  const std::string measured_at = probe.window == g ? fmt::format("G = {}", g)
                                                    : fmt::format("G = {} (measured on a window of {})", g, probe.window);
  d.damage = fmt::format("At {} only micro-batch{} {} of each window reach{} the optimizer: {}/{} of the gradient signal{}. "
                         "Measured on our model of DeepSpeed {} with the membership probe ({} rank{}, two windows){}.",
                         measured_at, survivors == 1 ? "" : "es", index_list(probe.reaching), survivors == 1 ? "es" : "",
                         survivors, probe.window,
                         survivors == 2 && probe.reaching.front() == 0 && probe.reaching.back() == probe.window - 1
                             ? ", biased toward the window's ends"
                             : "",
                         run.version("deepspeed")->value.text,
                         run.world_size && run.world_size->value > probe.ranks
                             ? fmt::format("{} of the {}", probe.ranks, run.world_size->value)
                             : std::to_string(probe.ranks),
                         probe.ranks == 1 && !(run.world_size && run.world_size->value > 1) ? "" : "s",
                         probe.same_in_every_window ? "; every window and rank alike" : "; other windows or ranks differ (see the JSON)");
  d.numbers["fraction_of_signal"] = fmt::format("{}/{}", survivors, probe.window);
}

// --- the defects --------------------------------------------------------------------------------------------

DefectVerdict zero2_offload_drop(const RunConfiguration& run, const ProbeOutcome& probe) {
  DefectVerdict d{.id = "deepspeed-zero2-offload-drop",
                  .title = "DeepSpeed ZeRO-2 with the optimizer on the CPU drops the middle micro-batches of every window",
                  .where = "docs/targets.md 7.3-7.4; introduced by PR #6550 (v0.15.2), fixed by PR #7967 (v0.19.0)",
                  .evidence = "measured on the real releases 0.15.1, 0.15.2, 0.16.4, 0.17.6, 0.18.9, 0.19.0, 0.19.8"};
  d.conditions = {uses_deepspeed(run), version_in(run, "deepspeed", "DeepSpeed 0.15.2 - 0.18.9", "0.15.2", "0.18.9"),
                  zero_stage_is(run, 2), offload_is(run, true), accumulation_at_least(run, 3)};
  d.status = decide(d.conditions);
  measure(d, probe, run);
  if (d.status != AuditStatus::not_affected)
    d.damage += " The logged and clipping gradient norm comes from the same truncated sum; loss curves still fall.";
  return d;
}

DefectVerdict zero2_overwrite_without_offload(const RunConfiguration& run, const ProbeOutcome& probe) {
  DefectVerdict d{.id = "deepspeed-zero2-overwrite-without-offload",
                  .title = "DeepSpeed ZeRO-2 without offload keeps only the last micro-batch of every window",
                  .where = "docs/targets.md 7.5; PR #7509 (v0.17.6), fixed by PR #7665 (v0.18.3); issue #7718",
                  .evidence = "by reading the v0.17.6 - v0.18.2 source, reported upstream in issue #7718"};
  d.conditions = {uses_deepspeed(run), version_in(run, "deepspeed", "DeepSpeed 0.17.6 - 0.18.2", "0.17.6", "0.18.2"),
                  zero_stage_is(run, 2), offload_is(run, false), accumulation_at_least(run, 2)};
  d.status = decide(d.conditions);
  measure(d, probe, run);
  return d;
}

DefectVerdict zero1_offload_bf16(const RunConfiguration& run) {
  DefectVerdict d{.id = "deepspeed-zero1-offload-bf16-unreduced",
                  .title = "DeepSpeed ZeRO-1 + CPU offload in bf16 steps each rank's partition on that rank's own gradient",
                  .where = "docs/targets.md 7.6a; PR #2847 (v0.10.1) to v0.19.7, fixed in v0.19.8",
                  .evidence = "measured on the real releases"};
  AuditCondition precision = run.precision ? known("bf16", run.precision->value, run.precision->source, run.precision->value == "bf16")
                                           : unknown("bf16", "");
  // The fault is on the grad_accum attribute path, which fp32 gradient accumulation selects (docs/upstream/
  // deepspeed-bf16-zero1-offload-unreduced.md); the config states the dtype or leaves it to DeepSpeed.
  AuditCondition accum = run.grad_accum_dtype
                             ? known("data_types.grad_accum_dtype fp32", run.grad_accum_dtype->value, run.grad_accum_dtype->source,
                                     run.grad_accum_dtype->value == "fp32" || run.grad_accum_dtype->value == "float32")
                             : unknown("data_types.grad_accum_dtype fp32", "no DeepSpeed config among the inputs");
  d.conditions = {uses_deepspeed(run), version_in(run, "deepspeed", "DeepSpeed 0.10.1 - 0.19.7", "0.10.1", "0.19.7"),
                  zero_stage_is(run, 1), offload_is(run, true), precision, accum, world_at_least(run, 2)};
  d.status = decide(d.conditions);
  if (d.status != AuditStatus::not_affected) {
    const std::string r = run.world_size ? std::to_string(run.world_size->value) : "R";
    d.damage = fmt::format("The gradient reduction is computed and discarded: the parameters each rank owns (1/{} of "
                           "them) are stepped on that rank's own gradient sum, so the other ranks' data never reaches "
                           "them. Not measured here: the model needs a float run for bf16.", r);
  }
  return d;
}

DefectVerdict boundary_every_backward(const RunConfiguration& run) {
  DefectVerdict d{.id = "deepspeed-boundary-every-backward",
                  .title = "OpenRLHF's dynamic batching marks every backward a boundary under ZeRO-2",
                  .where = "docs/targets.md 7.7; docs/upstream-notes.md 1.8.2 and 2.4",
                  .evidence = "by reading only, unverified: never a verdict of affected"};
  AuditCondition dynamic = run.dynamic_batch ? known("OpenRLHF --use_dynamic_batch", run.dynamic_batch->value ? "yes" : "no",
                                                     run.dynamic_batch->source, run.dynamic_batch->value)
                                             : AuditCondition{"OpenRLHF --use_dynamic_batch", "no", "", false};
  if (!run.framework || run.framework->value != Framework::openrlhf) dynamic.value = "not an OpenRLHF run";
  d.conditions = {dynamic, zero_stage_is(run, 2)};
  d.status = decide(d.conditions);
  if (d.status == AuditStatus::affected) {
    d.status = AuditStatus::cannot_tell;
    d.damage = "Configured G = 1 with one step per window: by our reading each backward overwrites the last "
               "(offload, <= 0.18.9) or the window's first is lost (offload, 0.19.x); not run on a real release.";
  }
  return d;
}

std::string mean_of_means_words(const std::string& scope, const RunConfiguration& run) {
  const std::string g = run.accumulation_steps ? std::to_string(run.accumulation_steps->value) : "G";
  const std::string r = run.world_size ? std::to_string(run.world_size->value) : "R";
  return fmt::format("Each token of a micro-batch with T valid tokens ({}) weighs 1/({} x {} x T) instead of 1/N, N the "
                     "valid tokens of the whole window on every rank: its weight is N/({} x {} x T) times the correct "
                     "one, so tokens of short sequences are over-weighted. With micro-batches of 1 and 3 tokens (the "
                     "catalogue's smallest trigger) a token of the short one weighs 2 and of the long one 2/3 of its "
                     "correct weight: (a + b)/2 instead of (a + 3b)/4. Equal token counts everywhere hide it.",
                     scope, g, r, g, r);
}

DefectVerdict openrlhf_mean_of_means(const RunConfiguration& run) {
  DefectVerdict d{.id = "openrlhf-mean-of-micro-batch-means",
                  .title = "OpenRLHF averages per-micro-batch token means instead of the window's token mean",
                  .where = "docs/targets.md 8; PR #923 (v0.7.0) to v0.10.2; v0.10.3 global over ranks only; fixed by PR #1249 (v0.10.4)",
                  .evidence = "measured on the real 0.10.2, 0.10.3 and 0.10.4 (one rank); the cross-rank scope by reading"};
  const AuditCondition openrlhf = framework_in(run, "trained with OpenRLHF", [](Framework f) { return f == Framework::openrlhf; });
  AuditCondition trainer = run.openrlhf_trainer
                               ? AuditCondition{"a token-mean loss: SFT (SFTLoss) or PPO (PolicyLoss)", run.openrlhf_trainer->value,
                                                run.openrlhf_trainer->source, std::nullopt}
                               : unknown("a token-mean loss: SFT (SFTLoss) or PPO (PolicyLoss)", "");
  if (run.openrlhf_trainer) {
    const std::string& t = run.openrlhf_trainer->value;
    if (t.rfind("train_sft", 0) == 0 || t.rfind("train_ppo", 0) == 0) trainer.holds = true;
    else trainer.value += " (its loss is not modelled)";
  }
  const auto* v = run.version("openrlhf");
  const bool v0103 = v && v->value.in("0.10.3", "0.10.3.999");
  d.conditions = {openrlhf, trainer, version_in(run, "openrlhf", "OpenRLHF 0.7.0 - 0.10.3", "0.7.0", "0.10.3"),
                  v0103 ? accumulation_at_least(run, 2) : several_micro_batches(run)};
  if (!run.framework || run.framework->value != Framework::openrlhf) d.conditions = {openrlhf};
  d.status = decide(d.conditions);
  if (d.status != AuditStatus::not_affected)
    d.damage = v0103 ? "0.10.3 counts tokens over every rank but still per micro-batch: " +
                           mean_of_means_words("counted over every rank", run)
                     : mean_of_means_words("on its own rank", run);
  return d;
}

DefectVerdict transformers_mean_of_means(const RunConfiguration& run) {
  DefectVerdict d{.id = "transformers-mean-of-micro-batch-means",
                  .title = "The transformers Trainer before 4.46 averages per-micro-batch token means",
                  .where = "docs/targets.md 8; fixed in 4.46.0 by PRs #34191 and #34198 (num_items_in_batch)",
                  .evidence = "measured on the real 4.45.2"};
  d.conditions = {framework_in(run, "trained with the transformers Trainer (or TRL or LLaMA-Factory on it)", trainer_family),
                  version_in(run, "transformers", "transformers before 4.46", "0", "4.45.999"), several_micro_batches(run)};
  d.status = decide(d.conditions);
  if (d.status != AuditStatus::not_affected) d.damage = mean_of_means_words("on its own rank", run);
  return d;
}

DefectVerdict transformers_per_rank_count(const RunConfiguration& run) {
  DefectVerdict d{.id = "transformers-per-rank-token-count",
                  .title = "The transformers Trainer normalises by each rank's own token count (average_tokens_across_devices off)",
                  .where = "docs/targets.md 8; the default turned on in 4.54.0 (PR #39395)",
                  .evidence = "measured on the real 4.46.3 with two ranks"};
  const auto* v = run.version("transformers");
  AuditCondition flag = unknown("average_tokens_across_devices off", "");
  if (run.average_tokens_across_devices) {
    flag = known("average_tokens_across_devices off", run.average_tokens_across_devices->value ? "on" : "off",
                 run.average_tokens_across_devices->source, !run.average_tokens_across_devices->value);
  } else if (v) {
    const bool off_by_default = v->value < *Release::parse("4.54");
    flag = known("average_tokens_across_devices off", fmt::format("{} (the default of {})", off_by_default ? "off" : "on", v->value.text),
                 v->source, off_by_default);
  }
  d.conditions = {framework_in(run, "trained with the transformers Trainer (or TRL or LLaMA-Factory on it)", trainer_family),
                  version_in(run, "transformers", "transformers 4.46 or later", "4.46.0", "99999"), flag, world_at_least(run, 2)};
  d.status = decide(d.conditions);
  if (d.status != AuditStatus::not_affected) {
    const std::string r = run.world_size ? std::to_string(run.world_size->value) : "R";
    d.damage = fmt::format("Each token on rank r weighs 1/({} x N_r) instead of 1/N, N_r the rank's valid tokens in the "
                           "window and N all ranks' together: ranks that drew fewer tokens are over-weighted by N/({} x N_r).",
                           r, r);
  }
  return d;
}

DefectVerdict transformers_deepspeed_extra_division(const RunConfiguration& run) {
  DefectVerdict d{.id = "transformers-deepspeed-extra-division-by-g",
                  .title = "transformers 4.46 - 4.48 over DeepSpeed divide the loss by G twice",
                  .where = "docs/targets.md 8; fixed by PR #35808 (4.49.0, scale_wrt_gas=False)",
                  .evidence = "measured on the real 4.46.3 over DeepSpeed 0.16.4 and 0.19.8; 4.46.0 - 4.48.x by reading"};
  d.conditions = {framework_in(run, "trained with the transformers Trainer (or TRL or LLaMA-Factory on it)", trainer_family),
                  version_in(run, "transformers", "transformers 4.46 - 4.48", "4.46.0", "4.48.999"), uses_deepspeed(run),
                  accumulation_at_least(run, 2)};
  d.status = decide(d.conditions);
  if (d.status != AuditStatus::not_affected) {
    const std::string g = run.accumulation_steps ? std::to_string(run.accumulation_steps->value) : "G";
    d.damage = fmt::format("Every gradient the optimizer sees is 1/{} of the correct one: with SGD the learning rate is "
                           "effectively {} times smaller, gradient clipping acts {} times later, and Adam (nearly scale-"
                           "invariant) hides it apart from epsilon.", g, g, g);
    if (run.accumulation_steps) d.numbers["gradient_scale"] = "1/" + g;
  }
  return d;
}

void add_condition_json(json& out, const AuditCondition& c) {
  out.push_back({{"condition", c.what},
                 {"value", c.value},
                 {"source", c.source.empty() ? json(nullptr) : json(c.source)},
                 {"holds", c.holds ? json(*c.holds) : json(nullptr)}});
}

std::string status_word(AuditStatus s) {
  switch (s) {
    case AuditStatus::affected: return "AFFECTED";
    case AuditStatus::not_affected: return "not affected";
    case AuditStatus::cannot_tell: return "cannot tell";
  }
  return "?";
}

template <class T, class F>
json stated_json(const std::optional<Stated<T>>& field, F words) {
  if (!field) return nullptr;
  return {{"value", words(field->value)}, {"source", field->source}};
}

}  // namespace

std::string_view to_string(AuditStatus status) {
  switch (status) {
    case AuditStatus::affected: return "affected";
    case AuditStatus::not_affected: return "not affected";
    case AuditStatus::cannot_tell: return "cannot tell";
  }
  return "?";
}

namespace {
AuditStatus overall_of(const std::vector<DefectVerdict>& defects) {
  bool any_affected = false, any_unknown = false;
  for (const auto& d : defects) {
    any_affected |= d.status == AuditStatus::affected;
    any_unknown |= d.status == AuditStatus::cannot_tell;
  }
  return any_affected ? AuditStatus::affected : any_unknown ? AuditStatus::cannot_tell : AuditStatus::not_affected;
}
}  // namespace

RunAudit audit_run(const RunConfiguration& run) {
  RunAudit audit;
  audit.run = run;
  const ProbeOutcome probe = probe_engine(run);
  audit.defects = {zero2_offload_drop(run, probe),  zero2_overwrite_without_offload(run, probe),
                   zero1_offload_bf16(run),          boundary_every_backward(run),
                   openrlhf_mean_of_means(run),      transformers_mean_of_means(run),
                   transformers_per_rank_count(run), transformers_deepspeed_extra_division(run)};
  audit.overall = overall_of(audit.defects);
  return audit;
}

void confirm_run(RunAudit& audit, const std::filesystem::path& findings_dir) {
  Confirmation c;
  const RunConfiguration& run = audit.run;
  const auto* ds = run.version("deepspeed");
  auto done = [&](std::string why) {
    c.why_not = std::move(why);
    audit.confirmation = c;
  };
  if (run.uses_deepspeed && !run.uses_deepspeed->value) return done("the run did not train through DeepSpeed");
  if (!ds || !run.zero_stage || !run.optimizer_offload || !run.accumulation_steps)
    return done("the DeepSpeed release, ZeRO stage, offload and G must all be known");
  if (run.zero_stage->value > 2 || run.optimizer_offload->value == OffloadDevice::nvme)
    return done("the DeepSpeed adapter runs ZeRO stages 0 to 2 with CPU offload");
  c.target = "adapter:deepspeed-" + ds->value.text;
  bool shipped = false, installed = false;
  std::string hint;
  for (const auto& a : sim::external::shipped_adapters())
    if ("adapter:" + a.name == c.target) {
      shipped = true;
      installed = a.installed;
      hint = a.install_hint;
    }
  if (!shipped) return done("no adapter runs DeepSpeed " + ds->value.text + " (accumcheck list targets shows the releases it runs)");
  if (!installed) return done("DeepSpeed " + ds->value.text + " is not installed: run " + hint);
  sim::Scenario base;
  const int window = std::min(run.accumulation_steps->value, kConfirmWindowMax);
  base.engine.rank_count = 1;
  base.engine.accumulation_steps = window;
  base.engine.zero_stage = run.zero_stage->value;
  base.engine.offload = run.optimizer_offload->value == OffloadDevice::cpu;
  base.steps.resize(2);
  for (auto& step : base.steps) step.micro_batches.resize(static_cast<std::size_t>(window));
  const sim::Scenario scenario = properties::membership_probe(base).scenario;
  c.scenario = fmt::format("ZeRO stage {}, offload {}, G = {}{}, one rank, two windows, micro-batch gradients 10^k, SGD",
                           base.engine.zero_stage, base.engine.offload ? "cpu" : "none", window,
                           window < run.accumulation_steps->value ? fmt::format(" (of the run's {})", run.accumulation_steps->value) : "");
  const properties::Property* property = properties::find_property(kConfirmProperty);
  try {
    const auto real = sim::make_target(c.target);
    const auto model = sim::make_target("deepspeed@" + sim::DeepSpeedVersion::parse(fmt::format(
                                            "{}.{}.{}", ds->value.parts.at(0), ds->value.parts.size() > 1 ? ds->value.parts[1] : 0,
                                            ds->value.parts.size() > 2 ? ds->value.parts[2] : 0))->to_string());
    const auto real_verdict = fuzz::check_pair(*real, *property, scenario, fuzz::scalar_for(*real, sim::ScalarKind::fast_rational));
    if (real_verdict.outcome == properties::Outcome::cannot_run || real_verdict.outcome == properties::Outcome::target_fault)
      return done("the real release could not run it: " + real_verdict.message);
    const auto model_verdict = fuzz::check_pair(*model, *property, scenario, sim::ScalarKind::rational);
    if (model_verdict.outcome == properties::Outcome::cannot_run || model_verdict.outcome == properties::Outcome::target_fault)
      return done("our model could not run it: " + model_verdict.message);
    c.ran = true;
    c.real_shows_defect = real_verdict.outcome == properties::Outcome::fail;
    c.model_shows_defect = model_verdict.outcome == properties::Outcome::fail;
    c.real_message = c.real_shows_defect ? real_verdict.message : "every micro-batch reached the optimizer once";
    if (c.real_shows_defect && !real_verdict.mismatches.empty()) {
      const auto& m = real_verdict.mismatches.front();
      c.real_message += fmt::format(" ({}: expected {}, actual {})", m.where, m.expected.to_string(), m.actual.to_string());
    }
    if (c.real_shows_defect) {
      const fuzz::Finding finding = fuzz::make_finding(*real, *property, scenario, fuzz::scalar_for(*real, sim::ScalarKind::fast_rational),
                                                       /*campaign_seed=*/0, /*trial=*/0, /*trial_seed=*/0, /*shrink_budget=*/0);
      c.finding_file = fuzz::write_finding(findings_dir, finding).string();
      const std::filesystem::path script = findings_dir / (std::filesystem::path(c.finding_file).stem().string() +
                                                           std::string(file_suffix(ExportFormat::deepspeed)));
      fuzz::write_text_atomically(script, export_deepspeed(finding));
      c.reproducer_file = script.string();
    }
  } catch (const sim::TargetFault& e) {
    return done(std::string("the real release misbehaved: ") + e.what());
  } catch (const std::exception& e) {
    return done(std::string("could not run: ") + e.what());
  }
  if (c.real_shows_defect != c.model_shows_defect) {
    for (auto& d : audit.defects)
      if (d.id == "deepspeed-zero2-offload-drop" || d.id == "deepspeed-zero2-overwrite-without-offload") {
        if (d.status == AuditStatus::not_affected) continue;
        d.status = AuditStatus::cannot_tell;
        d.damage = fmt::format("--confirm: the real DeepSpeed {} {} where our model {}; this verdict is not given. ",
                               ds->value.text, c.real_shows_defect ? "fails" : "passes", c.model_shows_defect ? "fails" : "passes") + d.damage;
      }
    if (c.real_shows_defect) {
      DefectVerdict unknown_defect{.id = "deepspeed-real-release-disagrees",
                                   .title = "The real release fails where our model of it passes",
                                   .where = "docs/audit.md, --confirm",
                                   .evidence = "run on the installed release",
                                   .status = AuditStatus::cannot_tell};
      unknown_defect.damage = c.real_message;
      audit.defects.push_back(std::move(unknown_defect));
    }
  }
  audit.overall = overall_of(audit.defects);
  audit.confirmation = c;
}

std::string audit_text(const std::vector<RunAudit>& audits) {
  std::string out;
  for (const RunAudit& a : audits) {
    const RunConfiguration& run = a.run;
    out += fmt::format("run {}: {}\n", run.name, status_word(a.overall));
    out += "  read: " + (run.inputs.empty() ? std::string("(flags only)") : fmt::format("{}", fmt::join(run.inputs, ", "))) + "\n";
    std::vector<std::string> versions;
    for (const auto& [name, v] : run.versions) versions.push_back(name + " " + v.value.text);
    out += "  versions: " + (versions.empty() ? std::string("none known") : fmt::format("{}", fmt::join(versions, ", "))) + "\n";
    for (const auto& note : run.notes) out += "  note: " + note + "\n";
    for (const DefectVerdict& d : a.defects) {
      out += fmt::format("  {:<13} {}: {}\n", status_word(d.status), d.id, d.title);
      if (d.status == AuditStatus::not_affected) {
        for (const auto& c : d.conditions)
          if (c.holds == false) {
            out += fmt::format("                because: {} is {} ({})\n", c.what, c.value, c.source.empty() ? "default" : c.source);
            break;
          }
        continue;
      }
      for (const auto& c : d.conditions)
        out += fmt::format("                {} {}: {}{}\n", c.holds == true ? "yes" : c.holds == false ? "no " : "?  ", c.what,
                           c.value, c.source.empty() ? "" : " [" + c.source + "]");
      if (!d.damage.empty()) out += "                damage: " + d.damage + "\n";
      out += "                evidence: " + d.evidence + "; " + d.where + "\n";
    }
    if (a.confirmation) {
      const Confirmation& c = *a.confirmation;
      if (!c.ran) {
        out += "  confirm: not run: " + c.why_not + "\n";
      } else {
        out += fmt::format("  confirm: {} ({}): {}; our model {}: {}\n", c.target, c.scenario,
                           c.real_shows_defect ? "the defect shows: " + c.real_message : c.real_message,
                           c.model_shows_defect ? "fails" : "passes",
                           c.real_shows_defect == c.model_shows_defect ? "they agree" : "they DISAGREE");
        if (!c.finding_file.empty())
          out += fmt::format("  reproducer: {} (replay it with accumcheck replay; run {} with the release's Python)\n",
                             c.finding_file, c.reproducer_file);
      }
    }
  }
  if (audits.size() > 1) {
    out += "\nrun | verdict | affected by\n";
    for (const RunAudit& a : audits) {
      std::vector<std::string> ids;
      for (const auto& d : a.defects)
        if (d.status == AuditStatus::affected) ids.push_back(d.id);
      out += fmt::format("{} | {} | {}\n", a.run.name, to_string(a.overall), ids.empty() ? "-" : fmt::format("{}", fmt::join(ids, ", ")));
    }
  }
  return out;
}

json audit_json(const std::vector<RunAudit>& audits) {
  json runs = json::array();
  for (const RunAudit& a : audits) {
    const RunConfiguration& run = a.run;
    json versions = json::object();
    for (const auto& [name, v] : run.versions) versions[name] = {{"value", v.value.text}, {"source", v.source}};
    auto same = [](const auto& v) { return v; };
    auto word = [](const auto& v) { return std::string(to_string(v)); };
    json configuration = {
        {"framework", stated_json(run.framework, word)},
        {"uses_deepspeed", stated_json(run.uses_deepspeed, same)},
        {"zero_stage", stated_json(run.zero_stage, same)},
        {"optimizer_offload", stated_json(run.optimizer_offload, word)},
        {"accumulation_steps", stated_json(run.accumulation_steps, same)},
        {"world_size", stated_json(run.world_size, same)},
        {"precision", stated_json(run.precision, same)},
        {"average_tokens_across_devices", stated_json(run.average_tokens_across_devices, same)},
        {"openrlhf_trainer", stated_json(run.openrlhf_trainer, same)},
        {"dynamic_batch", stated_json(run.dynamic_batch, same)},
        {"versions", versions}};
    json defects = json::array();
    for (const DefectVerdict& d : a.defects) {
      json conditions = json::array();
      for (const auto& c : d.conditions) add_condition_json(conditions, c);
      defects.push_back({{"id", d.id},
                         {"title", d.title},
                         {"status", to_string(d.status)},
                         {"conditions", conditions},
                         {"damage", d.damage.empty() ? json(nullptr) : json(d.damage)},
                         {"numbers", d.numbers},
                         {"evidence", d.evidence},
                         {"where", d.where}});
    }
    json confirmation = nullptr;
    if (a.confirmation) {
      const Confirmation& c = *a.confirmation;
      confirmation = {{"ran", c.ran},
                      {"target", c.target},
                      {"why_not", c.ran ? json(nullptr) : json(c.why_not)},
                      {"scenario", c.scenario},
                      {"real_shows_defect", c.ran ? json(c.real_shows_defect) : json(nullptr)},
                      {"model_shows_defect", c.ran ? json(c.model_shows_defect) : json(nullptr)},
                      {"agree", c.ran ? json(c.real_shows_defect == c.model_shows_defect) : json(nullptr)},
                      {"real_message", c.real_message},
                      {"finding", c.finding_file.empty() ? json(nullptr) : json(c.finding_file)},
                      {"reproducer", c.reproducer_file.empty() ? json(nullptr) : json(c.reproducer_file)}};
    }
    runs.push_back({{"run", run.name},
                    {"verdict", to_string(a.overall)},
                    {"confirmation", confirmation},
                    {"inputs", run.inputs},
                    {"notes", run.notes},
                    {"configuration", configuration},
                    {"defects", defects}});
  }
  return {{"audit", 1}, {"runs", runs}, {"exit_code", audit_exit_code(audits)}};
}

int audit_exit_code(const std::vector<RunAudit>& audits) {
  bool unknown = false;
  for (const RunAudit& a : audits) {
    if (a.overall == AuditStatus::affected) return 1;
    unknown |= a.overall == AuditStatus::cannot_tell;
  }
  return unknown ? kExitAuditCannotTell : 0;
}

}  // namespace accumcheck::surface
