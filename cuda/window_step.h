// The accumulation over a window and the optimizer step, as the device computes them for the cuda-resident targets
// (resident.h): what a GPU without offload does at a boundary, with the gradient accumulated in device memory and
// the optimizer stepping the parameters there. Compiled for the device (window_step.cu) and for the host, where the
// same functions are the kernels' CPU twins (resident.cpp). C++17, no models/ header.
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
//
// Exact SGD step (exact_sgd_step_at, below): SGD's update in integers over one denominator per tensor, every product
// and sum checked in 256 bits. Exact Adam steps on the host: its rounded square root is no such integer form.
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

// |x| of a two's-complement Int256 into four limbs; whether x is negative.
ACCUMCHECK_HOST_DEVICE inline bool magnitude_of(const Int256& x, std::uint64_t (&mag)[4]) {
  const bool negative = (x.limb[3] >> 63) != 0;
  std::uint64_t carry = 1;
  for (int i = 0; i < 4; ++i) {
    if (negative) {
      const UInt128 t = static_cast<UInt128>(~x.limb[i]) + carry;
      mag[i] = static_cast<std::uint64_t>(t);
      carry = static_cast<std::uint64_t>(t >> 64);
    } else {
      mag[i] = x.limb[i];
    }
  }
  return negative;
}

// The Int256 of magnitude `mag` (below 2^255) and sign `negative`.
ACCUMCHECK_HOST_DEVICE inline Int256 from_magnitude(const std::uint64_t (&mag)[4], bool negative) {
  Int256 out;
  std::uint64_t carry = 1;  // -x = ~x + 1
  for (int i = 0; i < 4; ++i) {
    if (negative) {
      const UInt128 t = static_cast<UInt128>(~mag[i]) + carry;
      out.limb[i] = static_cast<std::uint64_t>(t);
      carry = static_cast<std::uint64_t>(t >> 64);
    } else {
      out.limb[i] = mag[i];
    }
  }
  return out;
}

// acc += m x, checked: false (acc unchanged) when m x or the sum leaves the signed 256-bit range. The exact SGD step's
// arithmetic, whose operands (a momentum buffer's numerators, a multiplier over a large denominator) have no bound
// known in advance.
ACCUMCHECK_HOST_DEVICE inline bool add_scaled(Int256& acc, const Int256& m, const Int256& x) {
  std::uint64_t a[4], b[4];
  const bool negative = magnitude_of(m, a) != magnitude_of(x, b);
  std::uint64_t product[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    UInt128 carry = 0;
    for (int j = 0; j < 4; ++j) {
      const UInt128 t = static_cast<UInt128>(a[i]) * b[j] + product[i + j] + carry;
      product[i + j] = static_cast<std::uint64_t>(t);
      carry = t >> 64;
    }
    product[i + 4] = static_cast<std::uint64_t>(carry);
  }
  if (product[4] | product[5] | product[6] | product[7] || (product[3] >> 63) != 0) return false;  // |m x| >= 2^255
  if (!(product[0] | product[1] | product[2] | product[3])) return true;
  // m x as two's complement, then the sum, whose sign says whether it overflowed.
  const Int256 term = from_magnitude({product[0], product[1], product[2], product[3]}, negative);
  Int256 sum;
  UInt128 c = 0;
  for (int i = 0; i < 4; ++i) {
    const UInt128 t = static_cast<UInt128>(acc.limb[i]) + term.limb[i] + c;
    sum.limb[i] = static_cast<std::uint64_t>(t);
    c = t >> 64;
  }
  const bool a_sign = (acc.limb[3] >> 63) != 0, t_sign = (term.limb[3] >> 63) != 0, s_sign = (sum.limb[3] >> 63) != 0;
  if (a_sign == t_sign && s_sign != a_sign) return false;
  acc = sum;
  return true;
}

ACCUMCHECK_HOST_DEVICE inline Int256 int256_of(std::int64_t v) {
  Int256 out;
  const std::uint64_t fill = v < 0 ? ~static_cast<std::uint64_t>(0) : 0;
  out.limb[0] = static_cast<std::uint64_t>(v);
  out.limb[1] = out.limb[2] = out.limb[3] = fill;
  return out;
}

// The exact SGD step (models::update_element for SGD: decay, momentum, dampening, Nesterov, in Rational) of one
// element, in integers. Each result is linear in the element's parameter p = P / D (the window's layout), gradient
// g = A / L_k (the window's exact accumulation) and momentum buffer b = B / B_t (the tensor's buffer over its common
// denominator): the host folds the step's constants, the clip coefficient and those denominators into integer
// multipliers (below 2^255) over one output denominator per tensor and result (plan_exact_sgd_step, resident.h), so that
//   p' = (m.p P + m.g A + m.b B) / Q_p        b' = (n.p P + n.g A + n.b B) / Q_b
// with every product and sum checked in 256 bits: an element that leaves the range sets its overflow flag, and the
// host refuses the run, never wraps.
struct ExactStepTerms {
  Int256 p, g, b;
};
struct ExactSgdStepView {
  const std::int64_t* param;  // P [element]
  const Int256* gradient;     // A [entry of a group]
  const Int256* buffer;       // B [element]
  const std::int32_t *entry_of, *terms_of;  // [element]
  const ExactStepTerms *param_terms, *buffer_terms;  // [terms_of]
  Int256 *param_out, *buffer_out;  // [element]
  std::uint8_t* overflow;          // [element]
  std::size_t elements;
};

ACCUMCHECK_HOST_DEVICE inline void exact_sgd_step_at(const ExactSgdStepView& v, std::size_t i) {
  const Int256 P = int256_of(v.param[i]);
  const Int256& A = v.gradient[v.entry_of[i]];
  const Int256& B = v.buffer[i];
  const ExactStepTerms& m = v.param_terms[v.terms_of[i]];
  const ExactStepTerms& n = v.buffer_terms[v.terms_of[i]];
  Int256 p, b;
  const bool ok = add_scaled(p, m.p, P) && add_scaled(p, m.g, A) && add_scaled(p, m.b, B) && add_scaled(b, n.p, P) &&
                  add_scaled(b, n.g, A) && add_scaled(b, n.b, B);
  v.param_out[i] = p;
  v.buffer_out[i] = b;
  v.overflow[i] = ok ? 0 : 1;
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
struct ExactSgdStep {
  std::vector<std::int64_t> param;   // [stepped element]
  std::vector<Int256> buffer;        // [stepped element]
  std::vector<std::int32_t> entry_of, terms_of;  // [stepped element]
  std::vector<ExactStepTerms> param_terms, buffer_terms;
};
struct ExactSgdResult {
  std::vector<Int256> param, buffer;  // numerators over the plan's denominators, [stepped element]
  std::vector<std::uint8_t> overflow;
};
// Given the window's accumulated gradient (one value per entry of a group), the clip coefficient to apply, if any:
// the host's global norm and clipping, between the accumulation and the step.
using ClipOf = std::function<std::optional<float>(const std::vector<float>& gradient)>;
// Given the exact window's sums A, the SGD step to run on them on the device, if any (the host's norm, clipping and
// bookkeeping in between; no step for Adam, which the host steps).
using ExactStepOf = std::function<std::optional<ExactSgdStep>(const std::vector<Int256>& sums)>;

}  // namespace accumcheck::cuda
