// Token-embedding model whose input embedding and output projection share one parameter.
//
//   e_t     = E[id_t]           [D]     (row id_t of E [V, D]: the input use, a sparse gradient row)
//   y_hat_t = E e_t + b         [V]     (the output projection: every row of E)
//   l_t     = 1/2 |y_hat_t - y_t|^2
// Backward with r = w (y_hat_t - y_t):
//   dE[v, :] += r_v e_t  for every v   (output use)
//   dE[id_t, :] += E^T r               (input use)
//   db += r
// E is used twice per forward, so the two contributions must add, never overwrite: the shape of a tied-weight
// bug. The loss is a quartic polynomial in E, which is why the finite-difference check uses a 5-point stencil.
#pragma once

#include <span>

#include "models/model_spec.h"
#include "models/tied_embedding_model_exact.h"
#include "models/tensor.h"

namespace accumcheck::models::tied_embedding_model {

template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients);

template <class S>
void accumulate_gradient(const ModelSpec& spec, const Parameters<S>& params,
                         std::span<const Sequence<S>> sequences, std::span<const S> sequence_coefficients,
                         Gradient<S>& grad);

}  // namespace accumcheck::models::tied_embedding_model

#include "models/tied_embedding_model-inl.h"
