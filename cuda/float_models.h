// The host side of the fp32 and bf16 kernels of the MLP and the tied embedding (float_models_batch.h): laying a
// micro-batch of models/ values out in floats, the same sums on the CPU, and the bound any float evaluation of them
// keeps to. The linear model's are in float_linear.h; FloatSumBound is described there.
#pragma once

#include <span>
#include <vector>

#include "cuda/float_linear.h"
#include "cuda/float_models_batch.h"
#include "models/model_spec.h"
#include "models/rational.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

// The micro-batch `sequences` of the MLP (or the tied embedding) at `params`, sequence i in group sequence_group[i],
// every value rounded to the nearest fp32 (or bf16, stored as the fp32 that holds it exactly). std::invalid_argument
// as lay_out, and for more than 64 hidden units or outputs (a vocabulary above 256), which a thread keeps in local
// memory.
FloatMlpBatch lay_out_float_mlp(const models::ModelSpec& spec, const models::Parameters<models::Rational>& params,
                                std::span<const models::Sequence<models::Rational>> sequences,
                                std::span<const int> sequence_group, int group_count, FloatStorage storage);
FloatTiedBatch lay_out_float_tied(const models::ModelSpec& spec, const models::Parameters<models::Rational>& params,
                                  std::span<const models::Sequence<models::Rational>> sequences,
                                  std::span<const int> sequence_group, int group_count, FloatStorage storage);

// The sums on the CPU: the kernels' twins, the same functions (mlp_float_sum, tied_float_sum) in the same order.
std::vector<float> host_float_mlp_sums(const FloatMlpBatch& batch);
std::vector<float> host_float_tied_sums(const FloatTiedBatch& batch);

// What a float evaluation of each sum must keep to (FloatSumBound, float_linear.h), derived by models::FloatBound
// over the stored values, the storage gap apart.
std::vector<FloatSumBound> float_mlp_sum_bounds(const models::ModelSpec& spec,
                                                const models::Parameters<models::Rational>& params,
                                                std::span<const models::Sequence<models::Rational>> sequences,
                                                std::span<const int> sequence_group, int group_count,
                                                FloatStorage storage);
std::vector<FloatSumBound> float_tied_sum_bounds(const models::ModelSpec& spec,
                                                 const models::Parameters<models::Rational>& params,
                                                 std::span<const models::Sequence<models::Rational>> sequences,
                                                 std::span<const int> sequence_group, int group_count,
                                                 FloatStorage storage);

}  // namespace accumcheck::cuda
