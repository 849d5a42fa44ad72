// The host side of the fp32 and bf16 linear-model kernel (float_linear_batch.h): laying a micro-batch of models/
// values out in floats, the same sums on the CPU, and the bound any float evaluation of them keeps to.
#pragma once

#include <span>
#include <vector>

#include "cuda/device.h"
#include "cuda/float_linear_batch.h"
#include "models/model_spec.h"
#include "models/rational.h"
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
struct FloatSumBound {
  models::Rational exact, storage_gap;
  long double bound = 0;
  bool bounded = true;
};
std::vector<FloatSumBound> float_sum_bounds(const models::ModelSpec& spec,
                                            const models::Parameters<models::Rational>& params,
                                            std::span<const models::Sequence<models::Rational>> sequences,
                                            std::span<const int> sequence_group, int group_count, FloatStorage storage);

}  // namespace accumcheck::cuda
