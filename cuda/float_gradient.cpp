#include "cuda/float_gradient.h"

#include <algorithm>

#include "cuda/entry_slots.h"
#include "cuda/exact_values.h"
#include "models/model.h"

namespace accumcheck::cuda {

namespace {

// grad[slot(e)] += c_g S[g][e] for every group g in order and every entry e of a group.
template <class Batch, class SlotOf>
models::Gradient<float> weighted_sum(const char* who, const models::ModelSpec& spec, const Batch& b,
                                     std::span<const float> sums, std::span<const float> c, SlotOf slot_of) {
  detail::check_sums(who, sums.size(), b.sum_count(), c.size(), b.group_count);
  models::Gradient<float> grad = models::zero_gradient<float>(spec);
  const std::size_t per_group = b.sum_count() / static_cast<std::size_t>(b.group_count);
  for (int g = 0; g < b.group_count; ++g) {
    const float coefficient = c[static_cast<std::size_t>(g)];
    for (std::size_t e = 0; e < per_group; ++e) {
      const EntrySlot at = slot_of(e);
      grad.tensors[at.tensor](at.row, at.col) += coefficient * sums[static_cast<std::size_t>(g) * per_group + e];
    }
  }
  return grad;
}

}  // namespace

models::Gradient<float> to_float_gradient(const models::ModelSpec& spec, const FloatLinearBatch& b,
                                          std::span<const float> sums, std::span<const float> c) {
  models::Gradient<float> grad =
      weighted_sum("to_float_gradient", spec, b, sums, c, [&](std::size_t e) { return linear_entry_slot(b, e); });
  for (int e : b.expert) {
    grad.present[static_cast<std::size_t>(2 * e)] = true;
    grad.present[static_cast<std::size_t>(2 * e + 1)] = true;
  }
  return grad;
}

models::Gradient<float> to_float_gradient(const models::ModelSpec& spec, const FloatMlpBatch& b,
                                          std::span<const float> sums, std::span<const float> c) {
  models::Gradient<float> grad =
      weighted_sum("to_float_gradient", spec, b, sums, c, [&](std::size_t e) { return mlp_entry_slot(b, e); });
  if (b.token_count() > 0) std::fill(grad.present.begin(), grad.present.end(), true);
  return grad;
}

models::Gradient<float> to_float_gradient(const models::ModelSpec& spec, const FloatTiedBatch& b,
                                          std::span<const float> sums, std::span<const float> c) {
  models::Gradient<float> grad =
      weighted_sum("to_float_gradient", spec, b, sums, c, [&](std::size_t e) { return tied_entry_slot(b, e); });
  if (b.token_count() > 0) std::fill(grad.present.begin(), grad.present.end(), true);
  return grad;
}

}  // namespace accumcheck::cuda
