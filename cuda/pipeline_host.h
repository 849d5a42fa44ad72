// The host half of the offload pipeline (offload_pipeline.cu), in plain C++ so that it is built and tested without a
// device: the add of a copied buffer into the window's sums, and the schedule drawn from a seed.
#pragma once

#include <cstdint>
#include <cstddef>

#include "cuda/device.h"
#include "cuda/exact_batch.h"

namespace accumcheck::cuda {

// total[i] += source[i] for i < n, split over oneTBB's threads (integers: the split changes nothing). C++17
// (offload_pipeline.cu calls it).
void add_into(Int128* total, const Int128* source, std::size_t n);

}  // namespace accumcheck::cuda
