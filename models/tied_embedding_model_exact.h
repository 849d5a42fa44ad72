// The tied-embedding model's gradient over GMP integers, for FastRational targets with power-of-two denominators:
// as the MLP's (mlp_model_exact.h), one common denominator Q for the parameters and one exponent K for the data,
// every token's sums in GMP integers, one gcd per entry and run of sequences instead of one per operation.
//
// Method, with every parameter scaled to the integer v Q and every target to y 2^K, for token id with e = E[id]:
//   R      = (E e + b Q) 2^K - y Q^2         = r Q^2 2^K       (E e: two scaled parameters, so Q^2)
//   dE[v] += c sum R_v e / (Q^3 2^K)         (output use)      dE[id] += c sum E^T R / (Q^3 2^K)   (input use)
//   db    += c sum R / (Q^2 2^K)
// with c the coefficient a run of consecutive sequences shares; the two uses of E add into one sum, as they
// must. It declines (false, `grad` untouched) where a target is not an inline dyadic, a coefficient is promoted,
// or a parameter takes more than 512 bits; the engine and the oracle reach it, as the generic loop
// (tied_embedding_model-inl.h), through models::accumulate_gradient. properties/models/
// tied_embedding_model_exact_test.cpp checks it against the generic loop in Rational.
#pragma once

#include <span>

#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::models {
class FastRational;
}

namespace accumcheck::models::tied_embedding_model {

bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad);

}  // namespace accumcheck::models::tied_embedding_model
