// Storage rounding for mixed precision: a value kept in a 16-bit device buffer is the fp32 value rounded to
// that format (round to nearest even, overflow to inf for fp16), as the cast on a GPU does. Arithmetic itself
// stays in the run's scalar, as tensor-core GEMMs accumulate in fp32.
#pragma once

#include <type_traits>

#include <Eigen/Core>

#include "models/float_bound.h"
#include "models/tensor.h"
#include "sim/scenario.h"

namespace accumcheck::sim {

template <class S>
S round_to_storage(const S& x, Precision precision) {
  if constexpr (std::is_floating_point_v<S>) {
    switch (precision) {
      case Precision::full: return x;
      case Precision::bf16: return static_cast<S>(static_cast<float>(Eigen::bfloat16(static_cast<float>(x))));
      case Precision::fp16: return static_cast<S>(static_cast<float>(Eigen::half(static_cast<float>(x))));
    }
    return x;
  } else if constexpr (std::is_same_v<S, models::FloatBound<models::FloatFormatKind::bf16>>) {
    // A run in FloatBound<bf16> charges every operation two bf16 roundings where the real one rounds once to
    // fp32 and at most once more to bf16 on storing; inputs are charged as bf16 inputs, and a certified-exact
    // value is exact in bf16. So its bound already covers this cast, which keeps the exact value.
    ACCUMCHECK_ASSERT_MSG(precision != Precision::fp16, "fp16 storage in a bf16 bound");
    return x;
  } else {
    ACCUMCHECK_ASSERT_MSG(precision == Precision::full, "16-bit storage needs a float scalar");
    return x;
  }
}

template <class S>
void round_to_storage(std::vector<models::Matrix<S>>& tensors, Precision precision) {
  if (precision == Precision::full) return;
  for (auto& t : tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = round_to_storage(t(i), precision);
}

}  // namespace accumcheck::sim
