// Per-token linear regression with optional routed experts, forward and hand-written backward.
//
// For token t of sequence i, routed to expert e = expert_index[t] (always 0 when E == 1):
//   y_hat_t = W_e x_t + b_e                     W_e [O, I], b_e [O, 1], x_t [I]
//   l_t     = 1/2 |y_hat_t - y_t|^2
// The objective is J = sum_i c_i sum_t M_it l_it, with sequence coefficients c_i from the loss aggregation.
// Backward with r = y_hat_t - y_t and w = c_i M_it:  dW_e += w r x_t^T,  db_e += w r.
// An expert that receives no token takes no part in the forward pass, so its gradient is absent (None).
#pragma once

#include <span>

#include "models/linear_model_exact.h"
#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::models::linear_model {

template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients);

template <class S>
void accumulate_gradient(const ModelSpec& spec, const Parameters<S>& params,
                         std::span<const Sequence<S>> sequences, std::span<const S> sequence_coefficients,
                         Gradient<S>& grad);

}  // namespace accumcheck::models::linear_model

#include "models/linear_model-inl.h"
