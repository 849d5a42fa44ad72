// FloatLinearBatch: one micro-batch of the linear model in fp32, the form the float kernel (float_linear.cu) and its
// CPU twin (host_float_sums, float_linear.cpp) read: the sums of exact_batch.h,
//   S[g][e][o][k] = sum over the supervised tokens t of group g routed to e of  r_t[o] x_t[k]   (x_t[I] = 1),
//   r_t[o] = ((b_e[o] + W_e[o][0] x_t[0]) + ... + W_e[o][I-1] x_t[I-1]) - y_t[o],
// each evaluated in fp32 by one thread in exactly that order, every operation rounded once to nearest (the device
// uses __fadd_rn and __fmul_rn, which nvcc never contracts into a fused multiply-add; the host compiles the same
// function without contraction). So the device's sums are bit-identical to the twin's whatever the launch
// configuration. Storage is fp32, or bf16 (the values rounded to bf16 on the host, the arithmetic in fp32, as
// mixed-precision kernels do).
// Determinism: bit-identical across launch configurations. Accuracy: within the bound FloatBound derives for any
// fp32 (or bf16) evaluation of the same computation (float_linear.h's float_sum_bounds), never asserted to be exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/exact_batch.h"
#include "cuda/host_device.h"

namespace accumcheck::cuda {

enum class FloatStorage { fp32, bf16 };

struct FloatLinearBatch {
  int input_size = 1, output_size = 1, expert_count = 1, group_count = 1;
  FloatStorage storage = FloatStorage::fp32;
  // Row-major as in exact_batch.h: weights [E][O][I], biases [E][O], features [N][I], targets [N][O].
  std::vector<float> weights, biases, features, targets;
  std::vector<std::int32_t> expert, group;
  std::vector<std::uint8_t> mask;

  int token_count() const { return static_cast<int>(mask.size()); }
  std::size_t sum_count() const { return linear_sum_count(group_count, expert_count, output_size, input_size); }
};

// A batch's arrays in type T: float on the device and in the twin, models::FloatBound on the host for the bound.
template <class T>
struct LinearView {
  int input_size, output_size, expert_count, token_count;
  const T *weights, *biases, *features, *targets;
  const std::int32_t *expert, *group;
  const std::uint8_t* mask;
  std::size_t sum_count;
};

// One rounding each, never contracted. T other than float (the host's FloatBound) uses its own operators.
ACCUMCHECK_HOST_DEVICE inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
ACCUMCHECK_HOST_DEVICE inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
ACCUMCHECK_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class T>
T add_rn(const T& a, const T& b) { return a + b; }
template <class T>
T sub_rn(const T& a, const T& b) { return a - b; }
template <class T>
T mul_rn(const T& a, const T& b) { return a * b; }

// Sum `index` ([g][e][o][k]) of the batch, in the order above.
template <class T>
ACCUMCHECK_HOST_DEVICE T linear_float_sum(const LinearView<T>& v, std::size_t index) {
  const int in = v.input_size, out = v.output_size;
  const auto [g, e, o, k] = linear_sum_index(index, in, out, v.expert_count);
  const std::size_t eo = static_cast<std::size_t>(e) * out + o;
  const T* w = v.weights + eo * in;
  T total = T(0);
  for (int t = 0; t < v.token_count; ++t) {
    if (!v.mask[t] || v.group[t] != g || v.expert[t] != e) continue;
    const T* x = v.features + static_cast<std::size_t>(t) * in;
    T r = v.biases[eo];
    for (int i = 0; i < in; ++i) r = add_rn(r, mul_rn(w[i], x[i]));
    r = sub_rn(r, v.targets[static_cast<std::size_t>(t) * out + o]);
    total = add_rn(total, k < in ? mul_rn(r, x[k]) : r);
  }
  return total;
}

}  // namespace accumcheck::cuda
