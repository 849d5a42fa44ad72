// ExactMemoScope: the innermost scope's memos, per thread.
#include "sim/exact_memos.h"

namespace accumcheck::sim {

namespace {
thread_local ExactMemos* current_memos = nullptr;
}  // namespace

ExactMemoScope::ExactMemoScope(ExactMemos* memos) : previous_(current_memos) { current_memos = memos; }
ExactMemoScope::~ExactMemoScope() { current_memos = previous_; }
ExactMemos* ExactMemoScope::current() noexcept { return current_memos; }

}  // namespace accumcheck::sim
