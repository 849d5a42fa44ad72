// One trial's memo: a value computed at most once per key by whichever task asks first, shared with every later
// caller, or the exception it threw, rethrown to each. Behind fuzz::TrialRuns (a target's runs of the trial's
// scenario) and properties::TrialOracle (the trial's oracle).
// Thread-safe without waiting: the checks of a trial are parallel tasks. A task that misses computes outside the
// lock; two tasks may both compute, and the first value stored is the one shared (the callers' computations are
// deterministic, so they are equal). No task ever waits for another's, so work stealing cannot deadlock on it.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace accumcheck::properties {

template <class Key, class Value>
class TrialMemo {
 public:
  TrialMemo() = default;
  TrialMemo(const TrialMemo&) = delete;
  TrialMemo& operator=(const TrialMemo&) = delete;

  // The value stored for `key`, or compute()'s, stored for the next caller.
  template <class Compute>
  std::shared_ptr<const Value> get(const Key& key, Compute&& compute) {
    {
      const std::lock_guard lock(mutex_);
      if (const Entry* e = find(key)) {
        counts_.shared += 1;
        return answer(*e);
      }
      counts_.computed += 1;
    }
    Entry made{key, nullptr, nullptr};
    try {
      made.value = std::make_shared<const Value>(std::forward<Compute>(compute)());
    } catch (...) {
      made.error = std::current_exception();
    }
    const std::lock_guard lock(mutex_);
    const Entry* stored = find(key);
    if (!stored) {
      entries_.push_back(std::move(made));
      stored = &entries_.back();
    }
    return answer(*stored);
  }

  // Counts a computation that was not memoised (the caller's own, for another scenario).
  void count_unshared() {
    const std::lock_guard lock(mutex_);
    counts_.computed += 1;
  }

  // How many answers came from a stored value, and how many values were computed: for tests and the bench.
  struct Counts {
    std::size_t shared = 0;
    std::size_t computed = 0;
  };
  Counts counts() const {
    const std::lock_guard lock(mutex_);
    return counts_;
  }

 private:
  struct Entry {
    Key key;
    std::shared_ptr<const Value> value;  // exactly one of value and error
    std::exception_ptr error;
  };
  const Entry* find(const Key& key) const {  // under mutex_; a handful of entries per trial: a linear search
    for (const Entry& e : entries_)
      if (e.key == key) return &e;
    return nullptr;
  }
  static std::shared_ptr<const Value> answer(const Entry& e) {
    if (e.error) std::rethrow_exception(e.error);
    return e.value;
  }

  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  Counts counts_;
};

}  // namespace accumcheck::properties
