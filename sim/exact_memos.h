// ExactMemos: one trial's memos of the exact arithmetic its runs repeat (sim/backward_memo.h, sim/update_memo.h),
// and the scope that hands them to the engines' code on one thread.
//
// fuzz::TrialRuns owns one and installs it around every run of its trial. Scopes nest: the previous memos are back
// when a scope ends, so a task that runs inside another task's wait keeps to its own.
#pragma once

#include "sim/backward_memo.h"
#include "sim/update_memo.h"

namespace accumcheck::sim {

struct ExactMemos {
  BackwardMemo backward;
  UpdateMemo update;
};

// While alive, rank_gradient_into and ElementUpdate on this thread read and fill `memos` (nullptr: none).
class ExactMemoScope {
 public:
  explicit ExactMemoScope(ExactMemos* memos);
  ~ExactMemoScope();
  ExactMemoScope(const ExactMemoScope&) = delete;
  ExactMemoScope& operator=(const ExactMemoScope&) = delete;
  // The memos of the innermost live scope on this thread, or nullptr.
  static ExactMemos* current() noexcept;

 private:
  ExactMemos* previous_;
};

}  // namespace accumcheck::sim

#include "sim/update_memo-inl.h"
