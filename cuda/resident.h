// The host side of the cuda-resident targets' window (window_step.h, window_step.cu): the exact window's
// multipliers over one denominator per exponent, the window's Int256 sums as models/'s gradient, the exact SGD
// step's integers and the fp32 step's element maps, and the CPU twins of the device's window (the same functions,
// on one host thread).
#pragma once

#include <array>
#include <span>
#include <vector>

#include "cuda/exact_batch.h"
#include "cuda/exact_mlp_batch.h"
#include "cuda/exact_tied_batch.h"
#include "cuda/float_linear_batch.h"
#include "cuda/float_models_batch.h"
#include "cuda/host_optimizer.h"
#include "cuda/window_step.h"
#include "models/fast_rational.h"
#include "models/model_spec.h"
#include "models/rational.h"
#include "models/tensor.h"

namespace accumcheck::cuda {

// The exact window's integers: M[g][k] = c_g L_k / D^k, L_k the least common denominator of every c_g / D^k, so
// that entry e's gradient is A[e] / L_k(e). Throws ExactRangeError (ExactLimit::multiplier) when an M does not fit
// an int64, std::invalid_argument when the coefficients do not fit the batch.
struct ExactWindowPlan {
  ExactWindowMultipliers device;
  std::array<models::Rational, kExponentCount> denominator;  // L_k
};
ExactWindowPlan plan_exact_window(const ExactLinearBatch& batch, std::span<const models::Rational> group_coefficients);
ExactWindowPlan plan_exact_window(const ExactMlpBatch& batch, std::span<const models::Rational> group_coefficients);
ExactWindowPlan plan_exact_window(const ExactTiedBatch& batch, std::span<const models::Rational> group_coefficients);

// The window's gradient A[e] / L_k(e), placed as models/ writes it (entry_slots.h); every present flag false (the
// engine knows which tensors the window reached).
models::Gradient<models::Rational> window_gradient(const models::ModelSpec& spec, const ExactLinearBatch& batch,
                                                   std::span<const Int256> sums, const ExactWindowPlan& plan);
models::Gradient<models::Rational> window_gradient(const models::ModelSpec& spec, const ExactMlpBatch& batch,
                                                   std::span<const Int256> sums, const ExactWindowPlan& plan);
models::Gradient<models::Rational> window_gradient(const models::ModelSpec& spec, const ExactTiedBatch& batch,
                                                   std::span<const Int256> sums, const ExactWindowPlan& plan);
// The window's accumulated fp32 gradient (one value per entry of a group) placed the same way, present flags false.
models::Gradient<float> window_gradient(const models::ModelSpec& spec, const FloatLinearBatch& batch,
                                        std::span<const float> gradient);
models::Gradient<float> window_gradient(const models::ModelSpec& spec, const FloatMlpBatch& batch,
                                        std::span<const float> gradient);
models::Gradient<float> window_gradient(const models::ModelSpec& spec, const FloatTiedBatch& batch,
                                        std::span<const float> gradient);

// The exact value of an Int256.
models::Rational to_rational(const Int256& value);

// The CPU twins of device_exact_window and device_float_window_step (device.h): the batch's sums by the kernels'
// twins, then window_step.h's functions entry by entry and element by element.
std::vector<Int256> host_exact_window(const ExactLinearBatch& batch, const ExactWindowMultipliers& m);
std::vector<Int256> host_exact_window(const ExactMlpBatch& batch, const ExactWindowMultipliers& m);
std::vector<Int256> host_exact_window(const ExactTiedBatch& batch, const ExactWindowMultipliers& m);
std::vector<Int256> host_exact_window_step(const ExactLinearBatch& batch, const ExactWindowMultipliers& m,
                                           const ExactStepOf& step_of, ExactSgdResult& result);
std::vector<Int256> host_exact_window_step(const ExactMlpBatch& batch, const ExactWindowMultipliers& m,
                                           const ExactStepOf& step_of, ExactSgdResult& result);
std::vector<Int256> host_exact_window_step(const ExactTiedBatch& batch, const ExactWindowMultipliers& m,
                                           const ExactStepOf& step_of, ExactSgdResult& result);
std::vector<float> host_float_window_step(const FloatLinearBatch& batch, const FloatWindow& window,
                                          const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of);
std::vector<float> host_float_window_step(const FloatMlpBatch& batch, const FloatWindow& window,
                                          const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of);
std::vector<float> host_float_window_step(const FloatTiedBatch& batch, const FloatWindow& window,
                                          const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of);

// What the fp32 step kernel reads for `plan` (host_optimizer.h's bookkeeping, already done): each stepped element's
// constants and the entry of a group's sums that holds its gradient, and its parameter and moments, flattened in
// plan order (column-major within a tensor, as Eigen stores it). store_float_step writes the stepped values back.
FloatStepConstants to_float_step_constants(const models::OptimizerSpec& spec, const models::StepConstants<float>& k);
template <class Batch>
FloatStepPlan float_step_plan(const models::OptimizerSpec& spec, const OptimizerPlan<float>& plan, const Batch& batch,
                              const models::Parameters<float>& params);
FloatStepState load_float_step(const OptimizerPlan<float>& plan, const models::Parameters<float>& params,
                               const models::OptimizerState<float>& state);
void store_float_step(const OptimizerPlan<float>& plan, const FloatStepState& stepped, models::Parameters<float>& params,
                      models::OptimizerState<float>& state);

// The exact SGD step of `plan` (host_optimizer.h's bookkeeping, already done) over the window's sums (`window`, over
// the batch's common denominator D): each stepped element's parameter as an integer over D, its momentum buffer over
// the tensor's least common denominator, and the int64 multipliers of window_step.h's exact_sgd_step_at with the
// output denominators they give (clip: the clip coefficient applied to the gradient, 1 when not clipped). Throws
// ExactRangeError (ExactLimit::multiplier) when a multiplier does not fit an int64 or a buffer's numerator 255
// bits, std::invalid_argument for an optimizer other than SGD.
struct ExactSgdPlan {
  ExactSgdStep device;
  std::vector<models::Rational> param_denominator, buffer_denominator;  // [stepped parameter]
};
template <class S, class Batch>
ExactSgdPlan plan_exact_sgd_step(const models::OptimizerSpec& spec, const OptimizerPlan<S>& plan, const Batch& batch,
                                 const ExactWindowPlan& window, const models::Parameters<S>& params,
                                 const models::OptimizerState<S>& state, const models::Rational& clip);
// The stepped parameters and (with momentum) buffers of `result` written into params and state; ExactRangeError
// (ExactLimit::step) when an element's integers left 256 bits.
template <class S>
void store_exact_sgd_step(const OptimizerPlan<S>& plan, const ExactSgdPlan& sgd,
                          const ExactSgdResult& result, models::Parameters<S>& params, models::OptimizerState<S>& state);

}  // namespace accumcheck::cuda
