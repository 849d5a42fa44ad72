// Template bodies for update_memo.h, included at the end of exact_memos.h (they need ExactMemoScope).
#pragma once

#include <type_traits>

namespace accumcheck::sim {

template <class S>
ElementUpdate<S>::ElementUpdate(const models::OptimizerSpec& spec, const models::StepConstants<S>& k) : spec_(&spec), k_(&k) {
  if constexpr (std::is_same_v<S, models::FastRational>) {
    if (ExactMemos* memos = ExactMemoScope::current()) {
      memo_ = &memos->update;
      id_ = memo_->intern(spec, k);
    }
  }
}

template <class S>
void ElementUpdate<S>::operator()(S& theta, const S& g, S& first, S& second) const {
  if constexpr (std::is_same_v<S, models::FastRational>) {
    if (memo_) {
      memo_->update(id_, *spec_, *k_, theta, g, first, second);
      return;
    }
  }
  models::update_element(*spec_, *k_, theta, g, first, second);
}

}  // namespace accumcheck::sim
