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
