// The CPU twin of any batch's sums kernel, by the batch's type: what the pipeline's twin (offload_engine.cpp) and the
// resident window's twins (resident.cpp) compute in the device's place.
#pragma once

#include <vector>

#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/float_linear.h"
#include "cuda/float_models.h"

namespace accumcheck::cuda {

inline std::vector<Int128> twin_sums(const ExactLinearBatch& b) { return host_sums(b); }
inline std::vector<Int128> twin_sums(const ExactMlpBatch& b) { return host_mlp_sums(b); }
inline std::vector<Int128> twin_sums(const ExactTiedBatch& b) { return host_tied_sums(b); }
inline std::vector<float> twin_sums(const FloatLinearBatch& b) { return host_float_sums(b); }
inline std::vector<float> twin_sums(const FloatMlpBatch& b) { return host_float_mlp_sums(b); }
inline std::vector<float> twin_sums(const FloatTiedBatch& b) { return host_float_tied_sums(b); }

}  // namespace accumcheck::cuda
