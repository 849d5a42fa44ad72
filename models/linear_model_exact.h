// The linear model's gradient in exact integers, for FastRational values with power-of-two denominators.
//
// Why: the generator draws dyadic data and parameters (and powers of two for learning rates), so before a step
// divides by a token count every value the linear model reads is n / 2^e. The generic loop (linear_model-inl.h)
// multiplies each token's residual by its sequence coefficient and reduces a fraction by gcd at every operation;
// here the same sums run in __int128 over one power-of-two denominator, and the coefficient multiplies each
// sum once per run of sequences that share it.
//
// Method, with K the largest exponent of any value read (every parameter, and the features and targets of
// every supervised token), and a value v scaled to the integer v 2^K:
//   R_t  = sum_k W(o,k) x_t(k) 2^(2K) + (b(o) - y_t(o)) 2^(2K)     the residual r_t(o) times 2^(2K)
//   dW  += c * (sum_t R_t x_t(k) 2^K) / 2^(3K)                      db += c * (sum_t R_t) / 2^(2K)
// with c the coefficient shared by a run of consecutive sequences. Exact arithmetic makes the regrouping
// equal to the generic loop's value, and FastRational's canonical form makes it the same representation.
// Bounds: with every scaled value below 2^B in magnitude (B <= 62 is checked), T supervised tokens and
// I inputs, every partial sum is below T (I + 2) 2^M with M the largest of 2^(Bp + Bx), 2^(Bp + K),
// 2^(By + K) times 2^Bx for dW; that is checked to stay below 2^126 before anything is written. Where it stays
// below 2^62 (the generator's small dyadics before a step has divided them), the sums run in int64 instead.
//
// Anything else (a promoted value, a denominator that is not a power of two, a bound that does not hold) is
// left to the generic loop: the function then returns false and has not touched `grad`. The engine and the
// oracle both reach this through models::accumulate_gradient, as they reach the generic loop: it is the
// model's backward, not an accumulation step of the engine, and properties/models/linear_model_exact_test.cpp
// checks it against the generic loop in Rational.
#pragma once

#include <span>

#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::models {
class FastRational;
}

namespace accumcheck::models::linear_model {

// linear_model::accumulate_gradient for FastRational where every value it reads is an inline dyadic and the
// sums stay in range (above); false, with `grad` untouched, otherwise.
bool accumulate_gradient_dyadic(const ModelSpec& spec, const Parameters<FastRational>& params,
                                std::span<const Sequence<FastRational>> sequences,
                                std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad);

// The same where the data are inline dyadics but the parameters are not (after an SGD step they carry a token
// count's divisor; Adam's updates put them on the 2^-64 grid, past int64): the parameters over their least
// common denominator D as GMP integers, the sums of r D 2^K x 2^K in GMP integers, one gcd per entry at the end
// instead of one per operation. Parameters of more than 1024 bits are declined, so that neither this nor the
// generic loop comes near the exact size limit. False, with `grad` untouched, where it does not apply.
bool accumulate_gradient_integer(const ModelSpec& spec, const Parameters<FastRational>& params,
                                 std::span<const Sequence<FastRational>> sequences,
                                 std::span<const FastRational> sequence_coefficients, Gradient<FastRational>& grad);

}  // namespace accumcheck::models::linear_model
