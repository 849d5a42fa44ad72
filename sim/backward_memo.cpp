// BackwardMemo: the inputs hashed to find candidates, compared in full to answer, and stored with their gradient.
#include "sim/backward_memo.h"

#include "sim/memo_hash.h"

namespace accumcheck::sim {

namespace {

using S = models::FastRational;

std::uint64_t hash_of(const models::ModelSpec& spec, const models::Parameters<S>& params,
                      const std::vector<models::Sequence<S>>& sequences, const std::vector<S>& coefficients) {
  detail::MemoHasher h;
  h.add(static_cast<std::uint64_t>(spec.kind));
  for (const int d : {spec.input_size, spec.output_size, spec.hidden_size, spec.vocab_size, spec.embed_size, spec.expert_count})
    h.add(static_cast<std::uint64_t>(d));
  h.add(spec.frozen.size());
  for (const auto& t : params.tensors) h.add(t);
  h.add(sequences.size());
  for (const auto& seq : sequences) {
    h.add(seq.features);
    h.add_ints(seq.token_ids);
    h.add_ints(seq.expert_index);
    h.add(seq.targets);
    h.add_ints(seq.loss_mask);
  }
  for (const S& c : coefficients) h.add(c);
  return h.h;
}

bool same_sequences(const std::vector<models::Sequence<S>>& a, const std::vector<models::Sequence<S>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!models::matrices_equal(a[i].features, b[i].features) || a[i].token_ids != b[i].token_ids ||
        a[i].expert_index != b[i].expert_index || !models::matrices_equal(a[i].targets, b[i].targets) ||
        a[i].loss_mask != b[i].loss_mask)
      return false;
  return true;
}

std::size_t value_count(const std::vector<models::Matrix<S>>& tensors) {
  std::size_t n = 0;
  for (const auto& t : tensors) n += static_cast<std::size_t>(t.size());
  return n;
}

}  // namespace

void BackwardMemo::reuse_or_compute(const models::ModelSpec& spec, const models::Parameters<S>& params,
                                    const std::vector<models::Sequence<S>>& sequences, const std::vector<S>& coefficients,
                                    models::Gradient<S>& grad, const std::function<void(models::Gradient<S>&)>& compute) {
  const std::uint64_t hash = hash_of(spec, params, sequences, coefficients);
  std::shared_ptr<const Entry> found;
  {
    const std::lock_guard lock(mutex_);
    const auto [first, last] = entries_.equal_range(hash);
    for (auto it = first; it != last && !found; ++it) {
      const Entry& e = *it->second;
      if (e.spec == spec && e.coefficients.size() == coefficients.size() &&
          values_equal(e.coefficients.data(), coefficients.data(), coefficients.size()) &&
          models::tensor_lists_equal(e.params, params.tensors) &&
          same_sequences(e.sequences, sequences))
        found = it->second;
    }
    if (found) ++counts_.hits;
    else ++counts_.misses;
  }
  if (found) {
    // Copied outside the lock: an entry never changes once stored.
    grad.tensors = found->gradient.tensors;
    grad.present = found->gradient.present;
    return;
  }
  compute(grad);
  std::size_t values = 2 * value_count(params.tensors) + coefficients.size();
  for (const auto& seq : sequences)
    values += static_cast<std::size_t>(seq.features.size() + seq.targets.size()) + seq.loss_mask.size();
  {
    const std::lock_guard lock(mutex_);
    if (stored_values_ + values > kStoredValuesMax) return;
    stored_values_ += values;
  }
  // Built outside the lock (copies of every input), then inserted; a second thread that computed the same call
  // meanwhile inserts an equal entry, which answers alike.
  auto entry = std::make_shared<const Entry>(Entry{spec, params.tensors, sequences, coefficients, grad});
  const std::lock_guard lock(mutex_);
  entries_.emplace(hash, std::move(entry));
}

BackwardMemo::Counts BackwardMemo::counts() const {
  const std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace accumcheck::sim
