// The host side of the exact linear-model kernels: laying a micro-batch of models/ values out as integers
// (exact_batch.h), the same sums on the CPU, and the gradient they make.
//
// lay_out refuses what the kernels cannot run exactly, with ExactRangeError naming the value: one that takes the
// common denominator above 2^30, a raw value of 2^31 or more over the common denominator, more than 4096 inputs or
// 2^16 tokens. The loss coefficients (a token count's reciprocal) never enter the integers: they stay rational in
// the group coefficients (to_gradient).
#pragma once

#include <span>
#include <string>
#include <stdexcept>
#include <vector>

#include "cuda/exact_batch.h"
#include "models/model_spec.h"
#include "models/rational.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

// Which limit of the integers a value broke, as a sentence that does not name the value (a campaign counts the
// runs that could not run by reason, so the reason must not vary with the values).
enum class ExactLimit { denominator, magnitude, input_size, token_count, width, sums, multiplier, step };
const char* to_string(ExactLimit limit);

class ExactRangeError : public std::range_error {
 public:
  ExactRangeError(ExactLimit limit, const std::string& what) : std::range_error(what), limit_(limit) {}
  ExactLimit limit() const { return limit_; }

 private:
  ExactLimit limit_;
};

// The micro-batch `sequences` of the linear model `spec` at `params`, sequence i in group sequence_group[i] of
// `group_count`. Throws ExactRangeError (above), std::invalid_argument for another model kind or a bad group.
ExactLinearBatch lay_out(const models::ModelSpec& spec, const models::Parameters<models::Rational>& params,
                         std::span<const models::Sequence<models::Rational>> sequences,
                         std::span<const int> sequence_group, int group_count);

// exact_batch.h's sums on the CPU: the kernel's twin, the same integers by the same formula.
std::vector<Int128> host_sums(const ExactLinearBatch& batch);

// The gradient sum_g c_g S[g] / D^3 of `sums` (device_sums, host_sums or a pipeline's window), with c_g =
// group_coefficients[g], as models/ writes it: W_e and b_e per expert, present where a token (supervised or not)
// was routed to the expert, as autograd leaves it. `batch` gives the shapes and the routing.
models::Gradient<models::Rational> to_gradient(const models::ModelSpec& spec, const ExactLinearBatch& batch,
                                               std::span<const Int128> sums,
                                               std::span<const models::Rational> group_coefficients);

// The exact value of an Int128.
models::Rational to_rational(Int128 value);

}  // namespace accumcheck::cuda
