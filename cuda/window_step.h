// The accumulation over a window and the optimizer step, as the device computes them for the cuda-resident targets
// (resident.h): what a GPU without offload does at a boundary, with the gradient accumulated in device memory and
// the optimizer stepping the parameters there. Compiled for the device (window_step.cu) and for the host, where the
// same functions are the kernels' CPU twins (window_step.cpp). C++17, no models/ header.
//
// A window is laid out as one batch (the exact or fp32 layouts), each micro-batch's sequences a group of their own,
// so every group's sums S[g] are one sequence's, computed by the models' kernels in one launch. Then:
//
// Exact accumulation (exact_window_entry). Entry e of a group's sums sits at the denominator D^k(e), k its
// exponent (exact_batch.h and its siblings say which); the host turns each group's coefficient c_g into an integer
// M[g][k] = c_g L_k / D^k over the window's one denominator L_k per exponent (plan_exact_window, resident.h), so
//   A[e] = sum over groups g of M[g][k(e)] S[g][e]     and the window's gradient entry is A[e] / L_k(e),
// an Int256. |M| < 2^63 and |S| < 2^122 bound each product below 2^185, so up to 2^69 groups cannot overflow 2^255:
// the sums are exact integers, the same in any order and launch configuration.
//
// fp32 accumulation (float_window_entry). For each micro-batch m in order, its gradient's entry is
// sum over its groups in order of c_g S[g][e], from +0, each operation rounded once; the accumulator adds it:
// acc = acc + grad_m, from +0. That is the fp32 offload engine's host arithmetic to the bit (float_gradient.h: its
// per-micro-batch gradient, its accumulator), so a resident run equals an offload run bit for bit.
//
// fp32 optimizer step (float_step_element). One element of models::update_element<float> (models/optimizer-inl.h),
// the operations in its order, each rounded once: __fadd_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn on the device (IEEE
// round to nearest, as the host's + * / and std::sqrt(float)), never contracted. Clipping multiplies the gradient by
// the clip coefficient first, as models::clip_grad_norm does. The per-parameter constants come from the host's
// bookkeeping (host_optimizer.h): models::step_constants<float>, unchanged.
// Determinism: exact sums are exact; the fp32 functions are bit-identical to their twins and across launches (one
// thread per entry or element, nothing shared).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cuda/exact_batch.h"
#include "cuda/float_linear_batch.h"
#include "cuda/host_device.h"

#ifndef __CUDA_ARCH__
#include <cmath>
#endif

namespace accumcheck::cuda {

// A signed 256-bit integer, two's complement in four little-endian 64-bit limbs: the window's exact accumulator.
struct Int256 {
  std::uint64_t limb[4] = {0, 0, 0, 0};
  friend bool operator==(const Int256& a, const Int256& b) {
    return a.limb[0] == b.limb[0] && a.limb[1] == b.limb[1] && a.limb[2] == b.limb[2] && a.limb[3] == b.limb[3];
  }
};

// acc += m s, exactly: the product's magnitude (below 2^191) is formed from |m| and |s| in 64-bit halves, then added
// or subtracted with carries across the limbs.
ACCUMCHECK_HOST_DEVICE inline void add_product(Int256& acc, std::int64_t m, Int128 s) {
  if (m == 0 || s == 0) return;
  const bool negative = (m < 0) != (s < 0);
  const std::uint64_t um = m < 0 ? static_cast<std::uint64_t>(0) - static_cast<std::uint64_t>(m) : static_cast<std::uint64_t>(m);
  const UInt128 us = s < 0 ? static_cast<UInt128>(0) - static_cast<UInt128>(s) : static_cast<UInt128>(s);
  const UInt128 low = static_cast<UInt128>(um) * static_cast<std::uint64_t>(us);
  const UInt128 high = static_cast<UInt128>(um) * static_cast<std::uint64_t>(us >> 64) + (low >> 64);
  const std::uint64_t p[4] = {static_cast<std::uint64_t>(low), static_cast<std::uint64_t>(high),
                              static_cast<std::uint64_t>(high >> 64), 0};
  if (!negative) {
    UInt128 carry = 0;
    for (int i = 0; i < 4; ++i) {
      const UInt128 t = static_cast<UInt128>(acc.limb[i]) + p[i] + carry;
      acc.limb[i] = static_cast<std::uint64_t>(t);
      carry = t >> 64;
    }
  } else {
    std::uint64_t borrow = 0;
    for (int i = 0; i < 4; ++i) {
      const UInt128 subtrahend = static_cast<UInt128>(p[i]) + borrow;
      borrow = static_cast<UInt128>(acc.limb[i]) < subtrahend ? 1 : 0;
      acc.limb[i] = static_cast<std::uint64_t>(static_cast<UInt128>(acc.limb[i]) - subtrahend);
    }
  }
}

inline constexpr int kExponentCount = 6;  // the sums' denominators are D^0 .. D^5 (the MLP's dW1 and dW2: D^5)

// The window's exact accumulation: `groups` groups of `per_group` sums each ([g][e], the layouts' order),
// multipliers [g][kExponentCount], the exponent of each entry of a group.
struct ExactWindowView {
  const Int128* sums;
  const std::int64_t* multipliers;
  const std::uint8_t* exponent;
  std::size_t groups, per_group;
};

ACCUMCHECK_HOST_DEVICE inline Int256 exact_window_entry(const ExactWindowView& v, std::size_t e) {
  Int256 acc;
  const int k = v.exponent[e];
  for (std::size_t g = 0; g < v.groups; ++g)
    add_product(acc, v.multipliers[g * kExponentCount + static_cast<std::size_t>(k)], v.sums[g * v.per_group + e]);
  return acc;
}

// The window's fp32 accumulation: the groups of micro-batch m are [end[m - 1], end[m]) (end[-1] = 0); one coefficient
// per group.
struct FloatWindowView {
  const float* sums;
  const float* coefficients;
  const std::int32_t* micro_batch_end;
  std::size_t micro_batches, per_group;
};

ACCUMCHECK_HOST_DEVICE inline float float_window_entry(const FloatWindowView& v, std::size_t e) {
  float acc = 0.0f;
  std::size_t g = 0;
  for (std::size_t m = 0; m < v.micro_batches; ++m) {
    float grad = 0.0f;
    for (; g < static_cast<std::size_t>(v.micro_batch_end[m]); ++g)
      grad = add_rn(grad, mul_rn(v.coefficients[g], v.sums[g * v.per_group + e]));
    acc = add_rn(acc, grad);
  }
  return acc;
}

ACCUMCHECK_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
ACCUMCHECK_HOST_DEVICE inline float sqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

enum FloatOptimizerKind : std::int32_t { float_sgd = 0, float_adam = 1, float_adamw = 2 };

// models::StepConstants<float> with the spec's kind and nesterov flag, as a plain struct the device can read.
struct FloatStepConstants {
  std::int32_t kind = float_sgd;
  std::uint8_t nesterov = 0, has_decay = 0, has_momentum = 0, first_momentum_step = 0;
  float lr = 0, weight_decay = 0, momentum = 0, one_minus_dampening = 1;
  float beta1 = 0, beta2 = 0, one_minus_beta1 = 0, one_minus_beta2 = 0;
  float bias_correction2_sqrt = 1, step_size = 0, eps = 0, decay_factor = 1;
};

ACCUMCHECK_HOST_DEVICE inline void float_step_element(const FloatStepConstants& k, float& theta, float g, float& first,
                                                      float& second) {
  if (k.kind == float_sgd) {
    float d = g;
    if (k.has_decay) d = add_rn(d, mul_rn(k.weight_decay, theta));
    if (k.has_momentum) {
      first = k.first_momentum_step ? d : add_rn(mul_rn(k.momentum, first), mul_rn(k.one_minus_dampening, d));
      d = k.nesterov ? add_rn(d, mul_rn(k.momentum, first)) : first;
    }
    theta = sub_rn(theta, mul_rn(k.lr, d));
    return;
  }
  float g_eff = g;
  if (k.has_decay) {
    if (k.kind == float_adam) g_eff = add_rn(g_eff, mul_rn(k.weight_decay, theta));
    else theta = mul_rn(theta, k.decay_factor);
  }
  first = add_rn(mul_rn(k.beta1, first), mul_rn(k.one_minus_beta1, g_eff));
  second = add_rn(mul_rn(k.beta2, second), mul_rn(mul_rn(k.one_minus_beta2, g_eff), g_eff));
  const float denom = add_rn(div_rn(sqrt_rn(second), k.bias_correction2_sqrt), k.eps);
  theta = sub_rn(theta, div_rn(mul_rn(k.step_size, first), denom));
}

// The stepped elements, flat: element i steps theta[i], first[i], second[i] with constants[constants_of[i]] and the
// window's gradient entry gradient[entry_of[i]], times `clip` when `clipped`.
struct FloatStepView {
  float *theta, *first, *second;
  const float* gradient;
  const FloatStepConstants* constants;
  const std::int32_t *constants_of, *entry_of;
  std::size_t elements;
  float clip;
  std::uint8_t clipped;
};

ACCUMCHECK_HOST_DEVICE inline void float_step_at(const FloatStepView& v, std::size_t i) {
  float g = v.gradient[v.entry_of[i]];
  if (v.clipped) g = mul_rn(g, v.clip);
  float_step_element(v.constants[v.constants_of[i]], v.theta[i], g, v.first[i], v.second[i]);
}

// What the host hands the device for a window (resident.h builds them).
struct ExactWindowMultipliers {
  std::vector<std::int64_t> multipliers;  // [group][kExponentCount]
  std::vector<std::uint8_t> exponent;     // [entry of a group]
};
struct FloatWindow {
  std::vector<float> coefficients;            // [group]
  std::vector<std::int32_t> micro_batch_end;  // [micro-batch]: one past its last group
};
struct FloatStepPlan {
  std::vector<FloatStepConstants> constants;
  std::vector<std::int32_t> constants_of, entry_of;  // [stepped element]
};
struct FloatStepState {
  std::vector<float> theta, first, second;  // [stepped element]
};
// Given the window's accumulated gradient (one value per entry of a group), the clip coefficient to apply, if any:
// the host's global norm and clipping, between the accumulation and the step.
using ClipOf = std::function<std::optional<float>(const std::vector<float>& gradient)>;

}  // namespace accumcheck::cuda
