// The MLP's gradient over GMP integers, for FastRational data with power-of-two denominators: as the linear
// model's second path (linear_model_exact.h), one common denominator for the parameters and one exponent for
// the data, every token's sums in GMP integers, one gcd per entry and run of sequences instead of one per
// operation.
//
// Method, with D the parameters' least common denominator and K the data's largest exponent, every parameter
// scaled to the integer v D and every feature and target to v 2^K:
//   Z  = W1 x + b1 2^K             = z D 2^K          H = relu(Z) = h D 2^K (relu'(0) = 0, as z > 0 decides)
//   R  = W2 H + b2 D 2^K - y D^2   = r D^2 2^K        dZ = [Z > 0] (W2^T R) = dz D^3 2^K
//   dW2 += c sum R H / (D^3 2^(2K))    db2 += c sum R / (D^2 2^K)
//   dW1 += c sum dZ x / (D^3 2^(2K))   db1 += c sum dZ / (D^3 2^K)
// with c the coefficient a run of consecutive sequences shares. Exact arithmetic makes the regrouping equal to
// the generic loop's value (mlp_model-inl.h), and FastRational's canonical form makes it the same representation.
// It declines (false, `grad` untouched) where a feature or target is not an inline dyadic, a coefficient is
// promoted, or a parameter takes more than 512 bits; the engine and the oracle reach it, as the generic loop,
// through models::accumulate_gradient. properties/models/mlp_model_exact_test.cpp checks it against the generic
// loop in Rational.
#pragma once

#include <span>

#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::models {
class FastRational;
}

namespace accumcheck::models::mlp_model {

bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad);

}  // namespace accumcheck::models::mlp_model
