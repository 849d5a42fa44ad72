// The sums kernel of any batch already on the device (the linear model's, the MLP's or the tied embedding's, exact
// or fp32), launched into a device array on a stream, by the batch's device type: what the offload pipeline
// (offload_pipeline.cu) and the resident window (window_step.cu) launch. The caller checks cudaGetLastError.
#pragma once

#include <cuda_runtime.h>

#include "cuda/exact_linear_kernel.cuh"
#include "cuda/exact_mlp_kernel.cuh"
#include "cuda/exact_tied_kernel.cuh"
#include "cuda/float_kernel.cuh"

namespace accumcheck::cuda {

inline void launch_sums(const DeviceBatch& b, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_exact_sums(b.view(), sums, launch, stream);
}
inline void launch_sums(const DeviceMlpBatch& b, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_mlp_sums(b.view(), sums, launch, stream);
}
inline void launch_sums(const DeviceTiedBatch& b, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_tied_sums(b.view(), sums, launch, stream);
}
template <class DeviceFloat>
void launch_sums(const DeviceFloat& b, float* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_float_sums(b.view(), sums, launch, stream);
}

}  // namespace accumcheck::cuda
