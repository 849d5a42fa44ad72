// CUDA error checking and RAII buffers for the .cu files of cuda/: every CUDA call goes through check(), which
// throws DeviceError naming the call and CUDA's error string; buffers free themselves.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "cuda/device.h"

namespace accumcheck::cuda {

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw DeviceError(std::string(call) + ": " + cudaGetErrorString(status));
}

// The block and grid a grid-stride kernel over `count` items is launched with: `launch`'s where set, else
// `default_block` threads per block and enough blocks for one item per thread (at most 65535).
struct LaunchShape {
  int block, grid;
};
inline LaunchShape launch_shape(std::size_t count, LaunchConfig launch, int default_block) {
  const int block = launch.block_size > 0 ? launch.block_size : default_block;
  const std::size_t needed = (count + static_cast<std::size_t>(block) - 1) / static_cast<std::size_t>(block);
  return {block, launch.grid_size > 0 ? launch.grid_size : static_cast<int>(needed < 65535 ? needed : 65535)};
}

// `count` elements of T in device memory.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) check(cudaMalloc(reinterpret_cast<void**>(&data_), count_ * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  void upload(const T* host) {
    if (count_ > 0) check(cudaMemcpy(data_, host, count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy upload");
  }
  // Uploads `host` (of this buffer's size) and returns the device pointer, for filling a view in one expression.
  const T* upload(const std::vector<T>& host) {
    upload(host.data());
    return data_;
  }

 private:
  std::size_t count_;
  T* data_ = nullptr;
};

// `count` elements of T in pinned (page-locked) host memory, which cudaMemcpyAsync copies into asynchronously.
template <class T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t count) : count_(count) {
    check(cudaMallocHost(reinterpret_cast<void**>(&data_), (count_ > 0 ? count_ : 1) * sizeof(T)), "cudaMallocHost");
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_) cudaFreeHost(data_);
  }
  T* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  std::size_t count_;
  T* data_ = nullptr;
};

}  // namespace accumcheck::cuda
