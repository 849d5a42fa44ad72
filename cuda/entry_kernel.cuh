// What the MLP and tied-embedding kernels share (exact_mlp.cu, exact_tied.cu, float_models.cu): a grid-stride kernel
// that writes sums[i] = Entry::sum(view, i) for every sum of a batch (Int128 for the exact kernels, float for the float
// ones), its launch, and the round trip of one batch (upload, launch, copy back) that device_mlp_sums,
// device_tied_sums and their float twins are.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/exact_batch.h"

namespace accumcheck::cuda {

template <class Entry, class View, class Out>
__global__ void entry_sums_kernel(View v, Out* sums) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < v.sum_count;
       index += stride)
    sums[index] = Entry::sum(v, index);
}

// One thread per sum, 128 to a block unless `launch` says otherwise; the caller checks cudaGetLastError.
template <class Entry, class View, class Out>
void launch_entry_sums(const View& v, Out* sums, LaunchConfig launch, cudaStream_t stream) {
  if (v.sum_count == 0) return;
  const LaunchShape shape = launch_shape(v.sum_count, launch, 128);
  entry_sums_kernel<Entry><<<shape.grid, shape.block, 0, stream>>>(v, sums);
}

// The sums of `batch` computed on the device: uploaded as DeviceBatch, launched, copied back.
template <class DeviceBatch, class Out = Int128, class Batch, class Launch>
std::vector<Out> device_entry_sums(const Batch& batch, LaunchConfig launch, Launch launch_sums, const char* what) {
  const std::size_t n = batch.sum_count();
  if (n == 0) return {};
  DeviceBatch device(batch);
  DeviceBuffer<Out> sums(n);
  launch_sums(device.view(), sums.data(), launch, nullptr);
  check(cudaGetLastError(), what);
  std::vector<Out> out(n);
  check(cudaMemcpy(out.data(), sums.data(), n * sizeof(Out), cudaMemcpyDeviceToHost), what);
  return out;
}

}  // namespace accumcheck::cuda
