// Deterministic parallel campaigns with atomic findings and resumable state.
#include "fuzz/campaign.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "fuzz/build_info.h"
#include "fuzz/shrink.h"
#include "fuzz/trial_runs.h"
#include "properties/trial_oracle.h"
#include "sim/external/adapter_target.h"
#include "sim/sequence_pool.h"

namespace accumcheck::fuzz {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

void PairResult::add_cannot_run_reason(const std::string& why) {
  std::string key = why.size() > kReasonLength ? why.substr(0, kReasonLength) + "..." : why;
  if (!cannot_run_reasons.contains(key) && cannot_run_reasons.size() >= kReasonsKept) key = "(other reasons)";
  cannot_run_reasons[key] += 1;
}

std::vector<std::pair<std::string, std::uint64_t>> PairResult::top_cannot_run_reasons(std::size_t n) const {
  std::vector<std::pair<std::string, std::uint64_t>> all(cannot_run_reasons.begin(), cannot_run_reasons.end());
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (all.size() > n) all.resize(n);
  return all;
}

std::size_t CampaignReport::findings() const {
  return static_cast<std::size_t>(std::count_if(pairs.begin(), pairs.end(), [](const PairResult& p) { return p.finding.has_value(); }));
}

sim::ScalarKind scalar_for(const sim::Target& target, sim::ScalarKind requested) {
  return target.fixed_scalar().value_or(requested);
}

namespace {

// What the differential property can check: what the target and its behavioural model both run, in full
// precision or bf16 storage, without loss scaling (the model's own bounded run, Target::run_bounded, has no
// fp16 bound yet).
class BothRun final : public sim::Target {
 public:
  BothRun(const sim::Target& a, const sim::Target& b) : a_(a), b_(b) {}
  std::string name() const override { return a_.name() + " and " + b_.name(); }
  std::string description() const override { return name(); }
  std::string unsupported(const sim::Scenario& s) const override {
    if (std::string why = a_.unsupported(s); !why.empty()) return why;
    if (std::string why = b_.unsupported(s); !why.empty()) return why;
    if (s.engine.precision == sim::Precision::fp16 || s.engine.loss_scaler)
      return "the differential check bounds the model's own run in full precision and bf16 storage only";
    return {};
  }
  sim::RunResult run(const sim::Scenario&, const sim::RunOptions&) const override {
    throw std::logic_error("BothRun only fits scenarios");
  }

 private:
  const sim::Target& a_;
  const sim::Target& b_;
};

// fit_to_target for the pair: for the differential property, to what the target and its model both run.
bool fit_for(sim::Scenario& scenario, const sim::Target& target, const properties::Property& property) {
  if (property.name() == properties::kDifferentialProperty)
    if (const auto model_name = target.behavioural_model()) {
      std::unique_ptr<sim::Target> model;
      try {
        model = sim::make_target(*model_name);
      } catch (const std::invalid_argument&) {
        return fit_to_target(scenario, target);  // the property says why it cannot run
      }
      return fit_to_target(scenario, BothRun(target, *model));
    }
  return fit_to_target(scenario, target);
}

}  // namespace

properties::Verdict check_pair(const sim::Target& target, const properties::Property& property, const sim::Scenario& scenario,
                               sim::ScalarKind scalar, const CheckedCallback& checked, properties::TrialOracle* oracle) {
  scalar = scalar_for(target, scalar);
  // fit_for leaves a scenario the target runs unchanged; the differential property fits to two targets at once.
  std::optional<sim::Scenario> adjusted;
  if (property.name() == properties::kDifferentialProperty || !target.unsupported(scenario).empty()) {
    adjusted = scenario;
    if (!fit_for(*adjusted, target, property))
      return properties::Verdict::cannot_run("the target runs no configuration close to this one: " + target.unsupported(*adjusted));
  }
  const sim::Scenario& as_checked = adjusted ? *adjusted : scenario;
  properties::Verdict verdict = property.check(target, as_checked, sim::RunOptions{.scalar = scalar}, oracle);
  if (checked) checked(as_checked, verdict);
  return verdict;
}

properties::Verdict check_pair(const sim::Target& target, const properties::Property& property, const sim::Scenario& scenario,
                               sim::ScalarKind scalar, sim::Scenario* fitted) {
  if (!fitted) return check_pair(target, property, scenario, scalar, CheckedCallback{});
  return check_pair(target, property, scenario, scalar, [&](const sim::Scenario& s, const properties::Verdict&) { *fitted = s; });
}

Finding make_finding(const sim::Target& target, const properties::Property& property, const sim::Scenario& failing,
                     sim::ScalarKind scalar, std::uint64_t campaign_seed, std::int64_t trial, std::uint64_t trial_seed,
                     std::size_t shrink_budget) {
  scalar = scalar_for(target, scalar);
  sim::Scenario fitted = failing;
  fit_for(fitted, target, property);
  const ShrinkResult shrunk = shrink(
      fitted,
      [&](const sim::Scenario& s) {
        return target.unsupported(s).empty() &&
               property.check(target, s, sim::RunOptions{.scalar = scalar}).outcome == properties::Outcome::fail;
      },
      shrink_budget);
  Finding f;
  f.made_by = build_record();
  f.target = target.name();
  f.property = std::string(property.name());
  f.scalar = scalar;
  f.campaign_seed = campaign_seed;
  f.trial = trial;
  f.trial_seed = trial_seed;
  f.scenario = target.as_run(shrunk.scenario);  // the configuration the target really ran (presets applied)
  f.original_size = scenario_size(fitted);
  f.shrunk_size = scenario_size(shrunk.scenario);
  f.shrink_attempts = shrunk.attempts;
  f.shrink_accepted = shrunk.accepted;
  f.verdict = property.check(target, f.scenario, sim::RunOptions{.scalar = scalar});
  if (f.target.starts_with(sim::external::kAdapterPrefix)) {
    // An external program can change its mind (a flaky loop, a fault on the last run): then the finding keeps
    // the verdict it failed with while shrinking, and says so.
    const auto adapter = sim::external::adapter_target(f.target.substr(sim::external::kAdapterPrefix.size()));
    const auto& spec = adapter->spec();
    f.adapter = nlohmann::json{{"name", spec.name},
                               {"command", spec.command},
                               {"working_directory", spec.working_directory.empty() ? std::filesystem::current_path().string()
                                                                                   : std::filesystem::absolute(spec.working_directory).string()},
                               {"dtype", std::string(sim::external::to_string(adapter->dtype()))},
                               {"origin", spec.origin}};
    if (!spec.model.empty()) (*f.adapter)["model"] = spec.model;
    if (f.verdict.outcome != properties::Outcome::fail)
      throw sim::TargetFault("the adapter's shrunk failure did not fail again when re-checked (" +
                             std::string(properties::to_string(f.verdict.outcome)) + ": " + f.verdict.message +
                             "): the target is not deterministic");
  }
  ACCUMCHECK_ASSERT_MSG(f.verdict.outcome == properties::Outcome::fail, "a shrunk scenario must still fail");
  return f;
}

namespace {

struct Pair {
  std::unique_ptr<sim::Target> target;
  const properties::Property* property;
  PairResult result;
  bool open = true;
};

json fingerprint(const CampaignConfig& c) {
  return json{{"seed", std::to_string(c.seed)},
              {"targets", c.targets},
              {"properties", c.properties},
              {"scalar", std::string(sim::to_string(c.scalar))},
              {"generator", to_json(c.generator)}};
}

void save_state(const CampaignConfig& c, std::uint64_t next_trial, const std::vector<Pair>& pairs,
                const std::vector<CorpusReplay>& corpus) {
  if (!c.state_path) return;
  json ps = json::array();
  for (const auto& p : pairs)
    ps.push_back({{"target", p.result.target},
                  {"property", p.result.property},
                  {"trials", p.result.trials},
                  {"cannot_run", p.result.cannot_run},
                  {"cannot_run_reasons", p.result.cannot_run_reasons},
                  {"exercised", p.result.exercised},
                  {"open", p.open},
                  {"from_corpus", p.result.from_corpus},
                  {"corpus_file", p.result.corpus_file},
                  // Absolute, so that the campaign resumes from any folder.
                  {"finding_file", p.result.finding_path ? std::filesystem::absolute(*p.result.finding_path).string() : std::string()}});
  json replays = json::array();
  for (const auto& r : corpus)
    replays.push_back({{"file", r.file}, {"target", r.target}, {"property", r.property}, {"outcome", std::string(properties::to_string(r.outcome))}});
  write_json_atomically(*c.state_path,
                        json{{"campaign", fingerprint(c)}, {"next_trial", next_trial}, {"pairs", ps}, {"corpus", std::move(replays)}});
}

// Returns the next trial to run.
std::uint64_t load_state_unchecked(const CampaignConfig& c, std::vector<Pair>& pairs, std::vector<CorpusReplay>& corpus) {
  const json state = read_json_file(*c.state_path);
  if (!state.contains("campaign") || state.at("campaign") != fingerprint(c))
    throw std::invalid_argument("state file " + c.state_path->string() +
                                " belongs to a different campaign (seed, targets, properties, scalar or model differ); "
                                "remove it or pass another --state");
  const json& ps = state.at("pairs");
  if (!ps.is_array() || ps.size() != pairs.size()) throw std::invalid_argument("state file " + c.state_path->string() + " is damaged");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    Pair& p = pairs[i];
    p.result.trials = ps[i].at("trials").get<std::uint64_t>();
    p.result.cannot_run = ps[i].at("cannot_run").get<std::uint64_t>();
    if (ps[i].contains("cannot_run_reasons"))
      p.result.cannot_run_reasons = ps[i].at("cannot_run_reasons").get<std::map<std::string, std::uint64_t>>();
    if (ps[i].contains("exercised")) p.result.exercised = ps[i].at("exercised").get<std::map<std::string, std::uint64_t>>();
    p.open = ps[i].at("open").get<bool>();
    p.result.from_corpus = ps[i].value("from_corpus", false);
    p.result.corpus_file = ps[i].value("corpus_file", std::string());
    const std::string file = ps[i].value("finding_file", std::string());
    if (!file.empty()) {
      p.result.finding_path = file;
      p.result.finding = finding_from_json(read_json_file(file));
    }
  }
  if (state.contains("corpus") && state.at("corpus").is_array())
    for (const auto& r : state.at("corpus"))
      corpus.push_back({r.at("file").get<std::string>(), r.at("target").get<std::string>(), r.at("property").get<std::string>(),
                        outcome_from_string(r.at("outcome").get<std::string>())});
  return state.at("next_trial").get<std::uint64_t>();
}

// A state file that is not what save_state wrote is an input error naming the file, never a library's exception.
std::uint64_t load_state(const CampaignConfig& c, std::vector<Pair>& pairs, std::vector<CorpusReplay>& corpus) {
  try {
    return load_state_unchecked(c, pairs, corpus);
  } catch (const json::exception& e) {
    throw std::invalid_argument("state file " + c.state_path->string() + " is damaged (" + e.what() +
                                "); remove it to start the campaign again");
  }
}

void record_finding(const CampaignConfig& c, Pair& p, Finding finding) {
  if (c.findings_dir) {
    p.result.finding_path = write_finding(*c.findings_dir, finding);
  }
  p.result.finding = std::move(finding);
  p.open = false;
}

void replay_corpus(const CampaignConfig& c, std::vector<Pair>& pairs, CampaignReport& report,
                   const std::function<double()>& elapsed) {
  if (!c.corpus_dir || !std::filesystem::exists(*c.corpus_dir)) return;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(*c.corpus_dir))
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const Finding past = finding_from_json(read_json_file(file));  // a bad corpus file is an input error
    for (auto& p : pairs) {
      if (p.result.property != past.property) continue;
      const properties::Verdict v = check_pair(*p.target, *p.property, past.scenario, c.scalar);
      report.corpus.push_back({file.filename().string(), p.result.target, p.result.property, v.outcome});
      if (v.outcome == properties::Outcome::fail && p.open) {
        const double found_at = elapsed();
        const auto start = Clock::now();
        try {
          Finding f = make_finding(*p.target, *p.property, past.scenario, c.scalar, c.seed, -1, past.trial_seed, c.shrink_budget);
          p.result.shrink_seconds = std::chrono::duration<double>(Clock::now() - start).count();
          p.result.from_corpus = true;
          p.result.corpus_file = file.filename().string();
          p.result.seconds_to_first_failure = found_at;
          record_finding(c, p, std::move(f));
        } catch (const sim::TargetFault& e) {
          p.result.target_faults += 1;
          if (p.result.first_fault.empty()) p.result.first_fault = "corpus " + file.filename().string() + ": " + e.what();
        }
      }
    }
  }
}

// A chunk's optional per-trial objects (its scenarios, and TrialRuns and TrialOracle, which can be neither copied nor
// moved), in storage kept between chunks as run_campaign keeps its vectors'. fresh(n) makes the first n slots empty.
// A scenario is moved into its slot once and destroyed there by its trial's last check: held in a vector, each was
// built empty, then assigned the generated one and assigned an empty one again (a Scenario's move assignment is
// member by member, about 370 instructions; 2.4% of a trial at the smallest scenario).
template <class T>
class ChunkSlots {
 public:
  void fresh(std::size_t n) {
    if (n > capacity_) {
      slots_ = std::make_unique<std::optional<T>[]>(n);
      capacity_ = n;
    } else {
      for (std::size_t i = 0; i < n; ++i) slots_[i].reset();
    }
  }
  std::optional<T>& operator[](std::size_t i) { return slots_[i]; }

 private:
  std::unique_ptr<std::optional<T>[]> slots_;
  std::size_t capacity_ = 0;
};

}  // namespace

CampaignReport run_campaign(const CampaignConfig& c, const std::function<void(const Progress&)>& progress) {
  auto stop_requested = [&] { return c.stop != nullptr && c.stop->load(std::memory_order_relaxed); };
  if (c.targets.empty()) throw std::invalid_argument("no target: pass --target (accumcheck list targets)");
  if (!c.trials && !c.seconds) throw std::invalid_argument("no budget: pass --trials N or --time SECONDS");
  if (c.jobs < 1) throw std::invalid_argument("--jobs must be at least 1");
  if (c.first_chunk_trials < 1) throw std::invalid_argument("the first chunk needs at least one trial");
  std::vector<const properties::Property*> props;
  if (c.properties.empty()) {
    for (const auto& p : properties::all_properties()) props.push_back(p.get());
  } else {
    for (const auto& name : c.properties) {
      const auto* p = properties::find_property(name);
      if (!p) throw std::invalid_argument("unknown property '" + name + "' (accumcheck list properties)");
      props.push_back(p);
    }
  }
  std::vector<Pair> pairs;
  for (const auto& t : c.targets)
    for (const auto* p : props) {
      Pair pair{sim::make_target(t), p, {}, true};
      pair.result.target = pair.target->name();
      pair.result.property = std::string(p->name());
      pairs.push_back(std::move(pair));
    }

  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  CampaignReport report;
  report.seed = c.seed;
  report.generator = c.generator;
  report.jobs = c.jobs;
  std::uint64_t next = 0;
  if (c.state_path && std::filesystem::exists(*c.state_path)) {
    next = load_state(c, pairs, report.corpus);
    report.resumed = true;
  } else {
    replay_corpus(c, pairs, report, elapsed);
    save_state(c, 0, pairs, report.corpus);
  }
  auto open_count = [&] { return static_cast<std::size_t>(std::count_if(pairs.begin(), pairs.end(), [](const Pair& p) { return p.open; })); };
  auto found_count = [&] { return static_cast<std::size_t>(std::count_if(pairs.begin(), pairs.end(), [](const Pair& p) { return p.result.finding.has_value(); })); };
  if (progress) progress({next, c.trials, elapsed(), found_count(), open_count()});
  if (c.stop_at_first_finding && found_count() > 0) report.stopped_at_first_finding = true;

  tbb::task_arena arena(c.jobs);
  // outcomes[(trial - begin) * pairs + pair]
  std::vector<properties::Outcome> outcomes;
  // A chunk's per-task and per-trial state, kept between chunks so that its storage is reused: made anew, a chunk
  // of 65,536 trials faulted its pages in again (at the peer's sizes 167,000 page faults in 900,000 trials, 3% of
  // the CPU time, in the kernel). fresh() clears and resizes one at a chunk's start: every element a new one.
  std::vector<std::string> fault_messages;                // of target faults and cannot-runs
  std::vector<properties::RoundingGap> gaps;              // of float targets
  std::vector<std::optional<ScenarioFeatures>> features;  // of the checks that passed or failed
  std::vector<double> checked_at;                         // seconds since the start when each failing check returned
  std::vector<char> not_run;                              // skipped because the campaign was asked to stop
  ChunkSlots<sim::Scenario> scenarios;
  ChunkSlots<TrialRuns> trial_runs;  // the runs a trial's properties share
  ChunkSlots<properties::TrialOracle> trial_oracles;
  const auto fresh = [](auto& v, std::size_t n) {
    v.clear();
    v.resize(n);
  };
  // The labels of each distinct set of features a check exercised, written once per campaign rather than once per
  // chunk (at the peer's sizes that was 1% of a trial's instructions).
  std::map<ScenarioFeatures, std::vector<std::string>> labels_of;
  std::uint64_t chunk_trials = c.first_chunk_trials;  // grows while chunks end quickly (campaign.h)
  while (open_count() > 0 && !report.stopped_at_first_finding && !report.interrupted) {
    if (stop_requested()) {
      report.interrupted = true;
      break;
    }
    if (c.trials && next >= *c.trials) break;
    if (c.seconds && elapsed() >= *c.seconds) break;
    const auto chunk_start = Clock::now();
    const std::uint64_t begin = next;
    const std::uint64_t end = c.trials ? std::min(*c.trials, begin + chunk_trials) : begin + chunk_trials;
    const std::size_t P = pairs.size();
    outcomes.assign(static_cast<std::size_t>(end - begin) * P, properties::Outcome::pass);
    // Per task like the outcomes.
    fresh(fault_messages, outcomes.size());
    fresh(gaps, outcomes.size());
    fresh(features, outcomes.size());
    fresh(checked_at, outcomes.size());
    fresh(not_run, outcomes.size());
    std::vector<bool> open(P);
    for (std::size_t i = 0; i < P; ++i) open[i] = pairs[i].open;
    // Every (trial, open pair) check is its own task, so that one slow trial does not hold a core idle at the end
    // of the chunk; the first task of a trial generates its scenario, which the trial's other pairs wait for.
    const auto trial_count = static_cast<std::size_t>(end - begin);
    scenarios.fresh(trial_count);
    // The runs a trial's properties share, released by the trial's last check: chunks grow to many trials.
    trial_runs.fresh(trial_count);
    trial_oracles.fresh(trial_count);
    const auto checks_left = std::make_unique<std::atomic<std::size_t>[]>(trial_count);
    const auto generated = std::make_unique<std::once_flag[]>(trial_count);
    std::vector<std::size_t> open_pairs;
    for (std::size_t i = 0; i < P; ++i)
      if (open[i]) open_pairs.push_back(i);
    // A run is shared only where another open pair checks the same target: alone, storing it would be a copy for nothing.
    std::vector<char> shares(P, 0);
    if (c.share_runs)
      for (const std::size_t i : open_pairs)
        for (const std::size_t j : open_pairs)
          if (i != j && pairs[i].result.target == pairs[j].result.target) shares[i] = 1;
    // Likewise the oracle, where two or more open pairs read it (properties 1 and 9, on any targets).
    const bool share_oracle =
        c.share_runs && std::count_if(open_pairs.begin(), open_pairs.end(), [&](std::size_t i) { return pairs[i].property->reads_oracle(); }) >= 2;
    for (std::size_t t = 0; t < trial_count; ++t) checks_left[t] = open_pairs.size();
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, trial_count * open_pairs.size(), [&](std::size_t task) {
        const std::size_t t = task / open_pairs.size(), i = open_pairs[task % open_pairs.size()];
        if (stop_requested()) {
          not_run[t * P + i] = true;
          return;
        }
        const auto generate = [&] {
          scenarios[t].emplace(generate_scenario(trial_seed(c.seed, begin + t), c.generator));
          trial_runs[t].emplace(*scenarios[t]);
          if (share_oracle) trial_oracles[t].emplace(*scenarios[t]);
        };
        // With one open pair a trial is one task, which nothing waits for: std::call_once's first call on a fresh
        // flag takes glibc's slow path (1.4% of a one-property campaign's CPU time).
        if (open_pairs.size() == 1) generate();
        else std::call_once(generated[t], generate);
        const SharedRunsTarget shared(*pairs[i].target, *trial_runs[t]);
        const sim::Target& target = shares[i] ? static_cast<const sim::Target&>(shared) : *pairs[i].target;
        properties::Verdict v = check_pair(target, *pairs[i].property, *scenarios[t], c.scalar,
                                           CheckedCallback{[&](const sim::Scenario& checked, const properties::Verdict& verdict) {
                                             if (verdict.outcome == properties::Outcome::pass || verdict.outcome == properties::Outcome::fail)
                                               features[t * P + i] = features_of(checked);
                                           }},
                                           trial_oracles[t] ? &*trial_oracles[t] : nullptr);
        if (checks_left[t].fetch_sub(1) == 1) {
          // The trial's last check: its scenario, runs and oracle are freed here, in parallel, not at the chunk's end.
          trial_runs[t].reset();
          trial_oracles[t].reset();
          // Its sequences' storage to this thread's pool, for the sequences of a trial generated later.
          sim::SequencePool<models::Rational>& pool = sim::SequencePool<models::Rational>::local();
          for (auto& step : scenarios[t]->steps)
            for (auto& micro_batch : step.micro_batches) pool.give_all(micro_batch.rank_sequences);
          scenarios[t].reset();
        }
        // A fault once the user has asked to stop is most likely the interrupt reaching an adapter: not a result.
        if (v.outcome == properties::Outcome::target_fault && stop_requested()) {
          not_run[t * P + i] = true;
          return;
        }
        outcomes[t * P + i] = v.outcome;
        if (v.outcome == properties::Outcome::fail) checked_at[t * P + i] = elapsed();
        if (v.outcome == properties::Outcome::target_fault || v.outcome == properties::Outcome::cannot_run)
          fault_messages[t * P + i] = std::move(v.message);
        gaps[t * P + i] = std::move(v.rounding);
      });
    });
    // Fold in trial order: each open pair counts trials up to its first failure.
    std::vector<std::optional<std::uint64_t>> first_failure(P);
    std::uint64_t folded_end = end;  // under stop_at_first_finding: one past the first trial on which a pair failed
    // Interrupted: the results end before the first trial with a check that did not run, so that a resumed
    // campaign starts there and ends as an uninterrupted one would.
    for (std::uint64_t trial = begin; trial < end && folded_end == end; ++trial)
      for (std::size_t i = 0; i < P; ++i)
        if (open[i] && not_run[static_cast<std::size_t>(trial - begin) * P + i]) {
          folded_end = trial;
          report.interrupted = true;
          break;
        }
    // Features are counted per distinct value and named once per chunk.
    std::vector<std::map<ScenarioFeatures, std::uint64_t>> exercised(P);
    for (std::uint64_t trial = begin; trial < folded_end; ++trial)
      for (std::size_t i = 0; i < P; ++i) {
        if (!open[i] || first_failure[i]) continue;
        const std::size_t task = static_cast<std::size_t>(trial - begin) * P + i;
        const auto outcome = outcomes[task];
        pairs[i].result.trials += 1;
        if (outcome == properties::Outcome::cannot_run) {
          pairs[i].result.cannot_run += 1;
          pairs[i].result.add_cannot_run_reason(fault_messages[task]);
        }
        if (outcome == properties::Outcome::target_fault) {
          pairs[i].result.target_faults += 1;
          if (pairs[i].result.first_fault.empty())
            pairs[i].result.first_fault = "trial " + std::to_string(trial) + ": " + fault_messages[task];
        }
        pairs[i].result.rounding.add(gaps[task]);
        if (features[task]) exercised[i][*features[task]] += 1;
        if (outcome == properties::Outcome::fail) {
          first_failure[i] = trial;
          if (c.stop_at_first_finding) folded_end = trial + 1;
        }
      }
    for (std::size_t i = 0; i < P; ++i)
      for (const auto& [seen, count] : exercised[i]) {
        auto named = labels_of.find(seen);
        if (named == labels_of.end()) named = labels_of.emplace(seen, seen.labels()).first;
        for (const auto& label : named->second) pairs[i].result.exercised[label] += count;
      }
    // Shrink the new failures, in parallel across pairs (each shrink is deterministic on its own).
    std::vector<std::size_t> failed;
    for (std::size_t i = 0; i < P; ++i)
      if (first_failure[i]) failed.push_back(i);
    std::vector<std::optional<Finding>> findings(failed.size());
    std::vector<double> shrink_seconds(failed.size());
    std::vector<std::string> shrink_faults(failed.size());
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, failed.size(), [&](std::size_t j) {
        const std::size_t i = failed[j];
        const std::uint64_t trial = *first_failure[i];
        const auto t0 = Clock::now();
        try {
          findings[j] = make_finding(*pairs[i].target, *pairs[i].property, generate_scenario(trial_seed(c.seed, trial), c.generator),
                                     c.scalar, c.seed, static_cast<std::int64_t>(trial), trial_seed(c.seed, trial), c.shrink_budget);
        } catch (const sim::TargetFault& e) {
          shrink_faults[j] = "trial " + std::to_string(trial) + " (while shrinking): " + e.what();
        }
        shrink_seconds[j] = std::chrono::duration<double>(Clock::now() - t0).count();
      });
    });
    for (std::size_t j = 0; j < failed.size(); ++j) {
      Pair& p = pairs[failed[j]];
      if (!findings[j]) {
        // The failure could not be confirmed: a fault, never a finding and never a pass; the pair stays open.
        p.result.target_faults += 1;
        if (p.result.first_fault.empty()) p.result.first_fault = shrink_faults[j];
        continue;
      }
      p.result.seconds_to_first_failure = checked_at[static_cast<std::size_t>(*first_failure[failed[j]] - begin) * P + failed[j]];
      p.result.shrink_seconds = shrink_seconds[j];
      record_finding(c, p, std::move(*findings[j]));
      if (c.stop_at_first_finding) report.stopped_at_first_finding = true;
    }
    // Under stop_at_first_finding the trials after the first failure were not folded: a failure that could not
    // be confirmed leaves the campaign going, from the trial after it.
    next = folded_end;
    if (std::chrono::duration<double>(Clock::now() - chunk_start).count() < kChunkSeconds / 2 && chunk_trials < kChunkTrialsMax)
      chunk_trials *= 2;
    save_state(c, next, pairs, report.corpus);
    if (progress) progress({next, c.trials, elapsed(), found_count(), open_count()});
  }
  report.trials = next;
  report.seconds = elapsed();
  for (auto& p : pairs) report.pairs.push_back(std::move(p.result));
  return report;
}

json to_json(const CampaignReport& r) {
  json pairs = json::array();
  json timing_pairs = json::array();
  for (const auto& p : r.pairs) {
    json minimal = nullptr;
    if (p.finding) {
      const auto& s = p.finding->scenario;
      std::size_t micro_batches = 0;
      for (const auto& step : s.steps) micro_batches += step.micro_batches.size();
      minimal = json{{"steps", s.steps.size()},
                     {"micro_batches", micro_batches},
                     {"accumulation_steps", s.engine.accumulation_steps},
                     {"ranks", s.engine.rank_count},
                     {"zero_stage", s.engine.zero_stage},
                     {"offload", s.engine.offload},
                     {"parameters", models::trainable_value_count(s.training.model)},
                     {"outside_ordinary", outside_ordinary_features(s)},
                     {"message", p.finding->verdict.message},
                     {"file", p.finding_path ? p.finding_path->string() : std::string()}};
    }
    pairs.push_back({{"target", p.target},
                     {"property", p.property},
                     {"trials", p.trials},
                     {"cannot_run", p.cannot_run},
                     {"cannot_run_reasons",
                      [&] {
                        json reasons = json::array();
                        for (const auto& [why, count] : p.top_cannot_run_reasons(8)) reasons.push_back({{"reason", why}, {"count", count}});
                        return reasons;
                      }()},
                     {"exercised", p.exercised},
                     {"found", p.finding.has_value()},
                     {"from_corpus", p.from_corpus},
                     {"found_by", !p.finding ? json(nullptr) : p.from_corpus ? json("corpus") : json("generated trial")},
                     {"corpus_file", p.from_corpus ? json(p.corpus_file) : json(nullptr)},
                     {"trials_to_first_failure", p.finding && !p.from_corpus ? json(p.trials) : json(nullptr)},
                     {"target_faults", p.target_faults},
                     {"first_fault", p.first_fault.empty() ? json(nullptr) : json(p.first_fault)},
                     {"rounding_gap", p.rounding.worst_ratio > 0 ? json{{"largest_ratio_to_bound", p.rounding.worst_ratio},
                                                                        {"gap", p.rounding.gap.to_string()},
                                                                        {"bound", p.rounding.bound.to_string()},
                                                                        {"where", p.rounding.where}}
                                                                  : json(nullptr)},
                     {"minimal", std::move(minimal)}});
    timing_pairs.push_back({{"target", p.target},
                            {"property", p.property},
                            {"seconds_to_first_failure", p.finding ? json(p.seconds_to_first_failure) : json(nullptr)},
                            {"shrink_seconds", p.finding ? json(p.shrink_seconds) : json(nullptr)}});
  }
  json corpus = json::array();
  for (const auto& c : r.corpus)
    corpus.push_back({{"file", c.file}, {"target", c.target}, {"property", c.property}, {"outcome", std::string(properties::to_string(c.outcome))}});
  return json{{"format", "accumcheck-report"},
              {"version", 1},
              {"accumcheck", build_record()},
              {"results", {{"seed", std::to_string(r.seed)},
                           {"trials", r.trials},
                           {"findings", r.findings()},
                           {"stopped_at_first_finding", r.stopped_at_first_finding},
                           {"generator", to_json(r.generator)},
                           {"pairs", std::move(pairs)},
                           {"corpus", std::move(corpus)}}},
              {"timing",
               {{"seconds", r.seconds},
                {"jobs", r.jobs},
                {"resumed", r.resumed},
                {"interrupted", r.interrupted},
                {"trials_per_second", r.seconds > 0 ? static_cast<double>(r.trials) / r.seconds : 0.0},
                {"pairs", std::move(timing_pairs)}}},
              {"trials", r.trials},
              {"seconds", r.seconds},
              {"trials_per_second", r.seconds > 0 ? static_cast<double>(r.trials) / r.seconds : 0.0}};
}

}  // namespace accumcheck::fuzz
