// The host side of the exact tied-embedding kernel: laying a micro-batch of models/ values out as integers
// (exact_tied_batch.h), the same sums on the CPU, and the gradient they make.
//
// lay_out_tied refuses, with ExactRangeError naming the value or the limit, what the kernel cannot run exactly: a
// value that takes the common denominator above 2^30 or needs 31 bits over it, a vocabulary above 256, more than
// 2^16 tokens, or a batch whose sums could reach 2^120 (bounded from its largest values).
#pragma once

#include <span>
#include <vector>

#include "cuda/exact_linear.h"
#include "cuda/exact_tied_batch.h"

namespace accumcheck::cuda {

ExactTiedBatch lay_out_tied(const models::ModelSpec& spec, const models::Parameters<models::Rational>& params,
                            std::span<const models::Sequence<models::Rational>> sequences,
                            std::span<const int> sequence_group, int group_count);

// exact_tied_batch.h's sums on the CPU: the kernel's twin, the same function (tied_entry_sum) for every sum.
std::vector<Int128> host_tied_sums(const ExactTiedBatch& batch);

// The gradient sum_g c_g S[g] of `sums` over their denominators, as models/ writes it: both tensors present when the
// batch has a token (supervised or not), as the model's backward leaves it.
models::Gradient<models::Rational> to_tied_gradient(const models::ModelSpec& spec, const ExactTiedBatch& batch,
                                                    std::span<const Int128> sums,
                                                    std::span<const models::Rational> group_coefficients);

}  // namespace accumcheck::cuda
