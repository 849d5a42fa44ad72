// The float kernels' sums (float_linear_batch.h, float_models_batch.h) as a micro-batch's gradient on the host, in
// fp32: each entry sum over groups g, in order, of c_g S[g], every operation rounded once. The float counterparts of
// to_gradient, to_mlp_gradient and to_tied_gradient, with their present flags (the linear model's experts where a
// token was routed; every tensor of the MLP and the tied embedding when the batch has a token). The
// cuda-offload-fp32 targets use them (offload_engine.h). std::invalid_argument when the sums or coefficients do not
// fit the batch.
#pragma once

#include <span>

#include "cuda/float_linear_batch.h"
#include "cuda/float_models_batch.h"
#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

models::Gradient<float> to_float_gradient(const models::ModelSpec& spec, const FloatLinearBatch& batch,
                                          std::span<const float> sums, std::span<const float> group_coefficients);
models::Gradient<float> to_float_gradient(const models::ModelSpec& spec, const FloatMlpBatch& batch,
                                          std::span<const float> sums, std::span<const float> group_coefficients);
models::Gradient<float> to_float_gradient(const models::ModelSpec& spec, const FloatTiedBatch& batch,
                                          std::span<const float> sums, std::span<const float> group_coefficients);

}  // namespace accumcheck::cuda
