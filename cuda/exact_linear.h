// The host side of the exact linear-model kernels: laying a micro-batch of models/ values out as integers
// (exact_batch.h), the same sums on the CPU, and the gradient they make.
//
// lay_out refuses what the kernels cannot run exactly, with ExactRangeError naming the value: a value that is not
// dyadic (its denominator not a power of two), a raw value of 2^31 or more at the common fraction width, a width
// above 30 bits, more than 4096 inputs or 2^16 tokens. The generator's values are dyadic; a learning rate or a token
// count divisor that is not enters through the group coefficients, which stay rational (to_gradient).
#pragma once

#include <span>
#include <stdexcept>
#include <vector>

#include "cuda/exact_batch.h"
#include "models/model_spec.h"
#include "models/rational.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

class ExactRangeError : public std::range_error {
 public:
  using std::range_error::range_error;
};

// The micro-batch `sequences` of the linear model `spec` at `params`, sequence i in group sequence_group[i] of
// `group_count`. Throws ExactRangeError (above), std::invalid_argument for another model kind or a bad group.
ExactLinearBatch lay_out(const models::ModelSpec& spec, const models::Parameters<models::Rational>& params,
                         std::span<const models::Sequence<models::Rational>> sequences,
                         std::span<const int> sequence_group, int group_count);

// exact_batch.h's sums on the CPU: the kernel's twin, the same integers by the same formula.
std::vector<Int128> host_sums(const ExactLinearBatch& batch);

// The gradient sum_g c_g S[g] / 2^(3F) of `sums` (device_sums, host_sums or a pipeline's window), with c_g =
// group_coefficients[g], as models/ writes it: W_e and b_e per expert, present where a token (supervised or not)
// was routed to the expert, as autograd leaves it. `batch` gives the shapes and the routing.
models::Gradient<models::Rational> to_gradient(const models::ModelSpec& spec, const ExactLinearBatch& batch,
                                               std::span<const Int128> sums,
                                               std::span<const models::Rational> group_coefficients);

// The exact value of an Int128.
models::Rational to_rational(Int128 value);

}  // namespace accumcheck::cuda
