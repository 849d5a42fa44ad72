// One trial's shared runs: a short list under a mutex, filled by whichever task runs first.
#include "fuzz/trial_runs.h"

namespace accumcheck::fuzz {

namespace {

bool same_options(const sim::RunOptions& a, const sim::RunOptions& b) {
  return a.scalar == b.scalar && a.keep_trace_lines == b.keep_trace_lines && a.keep_step_parameters == b.keep_step_parameters;
}

}  // namespace

const TrialRuns::Entry* TrialRuns::find(const std::string& target, const sim::RunOptions& options) const {
  for (const Entry& e : entries_)
    if (e.target == target && same_options(e.options, options)) return &e;
  return nullptr;
}

sim::RunResult TrialRuns::run(const sim::Target& target, const sim::Scenario& scenario, const sim::RunOptions& options) {
  if (&scenario != &scenario_ || !target.deterministic()) {
    {
      const std::lock_guard lock(mutex_);
      counts_.run += 1;
    }
    return target.run(scenario, options);
  }
  const std::string name = target.name();
  {
    const std::lock_guard lock(mutex_);
    if (const Entry* e = find(name, options)) {
      counts_.shared += 1;
      if (e->error) std::rethrow_exception(e->error);
      return *e->result;
    }
    counts_.run += 1;
  }
  Entry made{name, options, nullptr, nullptr};
  try {
    made.result = std::make_shared<const sim::RunResult>(target.run(scenario, options));
  } catch (...) {
    made.error = std::current_exception();
  }
  const std::lock_guard lock(mutex_);
  const Entry* stored = find(name, options);
  if (!stored) {
    entries_.push_back(std::move(made));
    stored = &entries_.back();
  }
  if (stored->error) std::rethrow_exception(stored->error);
  return *stored->result;
}

TrialRuns::Counts TrialRuns::counts() const {
  const std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace accumcheck::fuzz
