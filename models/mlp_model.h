// Two-layer MLP with ReLU, per token, forward and hand-written backward.
//
//   z_t = W1 x_t + b1   [H]      h_t = relu(z_t)      y_hat_t = W2 h_t + b2   [O]
//   l_t = 1/2 |y_hat_t - y_t|^2
// Backward with w = c_i M_it and r = w (y_hat_t - y_t):
//   dW2 += r h^T,  db2 += r,  dz = (W2^T r) * [z > 0],  dW1 += dz x^T,  db1 += dz.
// relu'(0) = 0, as in PyTorch. The function is piecewise quadratic in the parameters, so it stays exact in
// rationals; finite-difference checks must not straddle a kink.
#pragma once

#include <span>

#include "models/mlp_model_exact.h"
#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::models::mlp_model {

template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients);

template <class S>
void accumulate_gradient(const ModelSpec& spec, const Parameters<S>& params,
                         std::span<const Sequence<S>> sequences, std::span<const S> sequence_coefficients,
                         Gradient<S>& grad);

}  // namespace accumcheck::models::mlp_model

#include "models/mlp_model-inl.h"
