// The host side of the fp32 and bf16 linear-model kernel (float_linear_batch.h): laying a micro-batch of models/
// values out in floats, the same sums on the CPU, and the bound any float evaluation of them keeps to.
#pragma once

#include <span>
#include <vector>

#include "cuda/device.h"
#include "cuda/float_linear_batch.h"
#include "models/model_spec.h"
#include "models/rational.h"
#include "models/float_bound.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

// The micro-batch `sequences` of the linear model at `params`, sequence i in group sequence_group[i], every value
// rounded to the nearest fp32 (or bf16, stored as the fp32 that holds it exactly). std::invalid_argument as lay_out.
FloatLinearBatch lay_out_float(const models::ModelSpec& spec, const models::Parameters<models::Rational>& params,
                               std::span<const models::Sequence<models::Rational>> sequences,
                               std::span<const int> sequence_group, int group_count, FloatStorage storage);

// The sums on the CPU: the kernel's twin, the same function (linear_float_sum) in the same order.
std::vector<float> host_float_sums(const FloatLinearBatch& batch);

// What a float evaluation of one sum must keep to. The kernel computes over the values it stores (rounded to fp32 or
// bf16), so it is held to the exact sum over those: `exact`, with `bound` the bound models::FloatBound derives on
// |computed - exact| for any fp32 evaluation of the same computation. What storing cost is exact and apart:
// `storage_gap` = exact - (the exact sum over the unrounded values), reported, never charged to the kernel. A sum
// without a bound (FloatBound poisons one whose terms are too many for fp32's unit roundoff, or that overflows) has
// bounded false: a check counts it as unchecked, never as within its bound.
// A sum with a comparison that a float evaluation may decide either way (the MLP's ReLU with z within its rounding of
// 0, float_models_batch.h) has bounded false and ambiguous true: no bound covers a discontinuity. Its `exact` is then
// the exact sum over the stored values, taking the exact branch.
struct FloatSumBound {
  models::Rational exact, storage_gap;
  long double bound = 0;
  bool bounded = true;
  bool ambiguous = false;
};

// A value as the float kernels store it: rounded to the nearest fp32, or to bf16 (held in the fp32 that is exactly
// it).
float to_float_storage(const models::Rational& q, FloatStorage storage);

namespace detail {
// One sum's FloatSumBound, from the float kernels' per-sum function evaluated three ways: `bounded` in
// models::FloatBound over the stored values, `stored` in Rational over the stored values (used only where FloatBound
// finds a comparison ambiguous), `unrounded` in Rational over the values before storage.
template <class Bounded, class Stored, class Unrounded>
FloatSumBound sum_bound(Bounded bounded, Stored stored, Unrounded unrounded);
}  // namespace detail
std::vector<FloatSumBound> float_sum_bounds(const models::ModelSpec& spec,
                                            const models::Parameters<models::Rational>& params,
                                            std::span<const models::Sequence<models::Rational>> sequences,
                                            std::span<const int> sequence_group, int group_count, FloatStorage storage);

template <class Bounded, class Stored, class Unrounded>
FloatSumBound detail::sum_bound(Bounded bounded, Stored stored, Unrounded unrounded) {
  FloatSumBound out;
  try {
    const auto sum = bounded();
    out.exact = sum.exact().to_rational();
    const auto error = sum.error();
    out.bounded = error.has_value();
    out.bound = error.value_or(0);
  } catch (const models::AmbiguousComparison&) {
    out.exact = stored();
    out.bounded = false;
    out.ambiguous = true;
  }
  out.storage_gap = out.exact - unrounded();
  return out;
}

}  // namespace accumcheck::cuda
