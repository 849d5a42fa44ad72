// What the exact MLP and tied-embedding kernels share (exact_mlp.cu, exact_tied.cu): a grid-stride kernel that writes
// sums[i] = Entry::sum(view, i) for every sum of a batch, its launch, and the round trip of one batch (upload, launch,
// copy back) that device_mlp_sums and device_tied_sums are.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/exact_batch.h"

namespace accumcheck::cuda {

template <class Entry, class View>
__global__ void entry_sums_kernel(View v, Int128* sums) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t index = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < v.sum_count;
       index += stride)
    sums[index] = Entry::sum(v, index);
}

// One thread per sum, 128 to a block unless `launch` says otherwise; the caller checks cudaGetLastError.
template <class Entry, class View>
void launch_entry_sums(const View& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  if (v.sum_count == 0) return;
  const LaunchShape shape = launch_shape(v.sum_count, launch, 128);
  entry_sums_kernel<Entry><<<shape.grid, shape.block, 0, stream>>>(v, sums);
}

// The sums of `batch` computed on the device: uploaded as DeviceBatch, launched, copied back.
template <class DeviceBatch, class Batch, class Launch>
std::vector<Int128> device_entry_sums(const Batch& batch, LaunchConfig launch, Launch launch_sums, const char* what) {
  const std::size_t n = batch.sum_count();
  if (n == 0) return {};
  DeviceBatch device(batch);
  DeviceBuffer<Int128> sums(n);
  launch_sums(device.view(), sums.data(), launch, nullptr);
  check(cudaGetLastError(), what);
  std::vector<Int128> out(n);
  check(cudaMemcpy(out.data(), sums.data(), n * sizeof(Int128), cudaMemcpyDeviceToHost), what);
  return out;
}

}  // namespace accumcheck::cuda
