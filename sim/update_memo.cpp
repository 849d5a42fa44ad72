// UpdateMemo: constants interned once a step, elements hashed to find candidates and compared in full to answer.
#include "sim/update_memo.h"

#include "sim/memo_hash.h"

namespace accumcheck::sim {

namespace {

using S = models::FastRational;

bool same_constants(const models::StepConstants<S>& a, const models::StepConstants<S>& b) {
  return a.lr == b.lr && a.weight_decay == b.weight_decay && a.has_decay == b.has_decay && a.momentum == b.momentum &&
         a.one_minus_dampening == b.one_minus_dampening && a.has_momentum == b.has_momentum &&
         a.first_momentum_step == b.first_momentum_step && a.beta1 == b.beta1 && a.beta2 == b.beta2 &&
         a.one_minus_beta1 == b.one_minus_beta1 && a.one_minus_beta2 == b.one_minus_beta2 &&
         a.bias_correction2_sqrt == b.bias_correction2_sqrt && a.step_size == b.step_size && a.eps == b.eps &&
         a.decay_factor == b.decay_factor;
}

}  // namespace

std::size_t UpdateMemo::intern(const models::OptimizerSpec& spec, const models::StepConstants<S>& k) {
  const std::lock_guard lock(mutex_);
  for (std::size_t id = 0; id < constants_.size(); ++id)
    if (constants_[id].spec == spec && same_constants(constants_[id].k, k)) return id;
  constants_.push_back({spec, k});
  return constants_.size() - 1;
}

void UpdateMemo::update(std::size_t id, const models::OptimizerSpec& spec, const models::StepConstants<S>& k, S& theta,
                        const S& g, S& first, S& second) {
  detail::MemoHasher h;
  h.add(static_cast<std::uint64_t>(id));
  h.add(theta);
  h.add(g);
  h.add(first);
  h.add(second);
  {
    const std::lock_guard lock(mutex_);
    const auto [begin, end] = entries_.equal_range(h.h);
    for (auto it = begin; it != end; ++it) {
      const Entry& e = it->second;
      if (e.id == id && e.theta == theta && e.g == g && e.first == first && e.second == second) {
        ++counts_.hits;
        // Copied under the lock: simple, and only a trial's own checks ever wait on it.
        theta = e.theta_out;
        first = e.first_out;
        second = e.second_out;
        return;
      }
    }
    ++counts_.misses;
  }
  Entry entry{id, theta, g, first, second, {}, {}, {}};
  models::update_element(spec, k, theta, g, first, second);
  entry.theta_out = theta;
  entry.first_out = first;
  entry.second_out = second;
  const std::lock_guard lock(mutex_);
  if (entries_.size() < kEntriesMax) entries_.emplace(h.h, std::move(entry));
}

UpdateMemo::Counts UpdateMemo::counts() const {
  const std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace accumcheck::sim
