// offload_pipeline.cu: a real device-to-host gradient offload pipeline on CUDA streams, as DeepSpeed's ZeRO offload
// runs one: per micro-batch the device computes its gradient sums (exact_linear_kernel.cuh) into a device buffer, an
// event marks them done, an asynchronous copy moves them into one of two pinned host buffers (double buffering: the
// copy of micro-batch j + 1 overlaps the host's work on micro-batch j), a second event marks the copy done, and the
// host reads the buffer once that event has fired: it adds the sums into the window's (oneTBB), or, as the
// cuda-offload target does (offload_engine.h), turns them into the micro-batch's gradient and adds that into the
// host's gradient accumulator.
// Determinism: exact when synchronised. The sums are integers; the host adds each micro-batch's buffer after its copy
// event, and the device reuses a buffer only after the host has read it (the copy of micro-batch j + 2 is queued
// after the host's add of j), so the window's sums equal the sum of each micro-batch's whatever the stream
// assignment and the injected delays. The unsynchronised variant (wait_for_copy false) skips the wait on the copy
// event: the host reads a pinned buffer that still holds an older micro-batch's sums, or half of a copy, whenever
// the device is late, which the injected delays make it. That is the race a missing synchronisation is.
// Its reference is the sum of host_sums over the window (exact_linear.cpp), never anything in this file.
#include <cuda_runtime.h>

#include <exception>
#include <memory>
#include <stdexcept>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/launch_sums.cuh"
#include "cuda/pipeline_host.h"

namespace accumcheck::cuda {

namespace {

__global__ void spin_kernel(std::int64_t ns) {
  std::uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (static_cast<std::int64_t>(now - start) < ns);
}

class Stream {
 public:
  Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_{};
};

class Event {
 public:
  Event() { check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_{};
};

// The window through the pipeline, for any kernel: Sum is Int128 for the exact kernels, float for the fp32 ones.
// launch_sums(j, out, stream) queues micro-batch j's kernel into the device array `out` (n sums) on `stream`.
template <class Sum, class LaunchSums, class Reader>
void run_pipeline(std::size_t count, std::size_t n, const PipelineSchedule& schedule, const LaunchSums& launch_sums,
                  const Reader& read) {
  if (count == 0) return;
  if (schedule.delay_ns.size() != count)
    throw std::invalid_argument("run_offload_pipeline: the schedule has " + std::to_string(schedule.delay_ns.size()) +
                                " delays for " + std::to_string(count) + " micro-batches");

  Stream compute, copy_stream;
  const cudaStream_t copy = schedule.separate_copy_stream ? copy_stream.get() : compute.get();
  DeviceBuffer<Sum> device_sums_0(n), device_sums_1(n);
  PinnedBuffer<Sum> host_0(n), host_1(n);
  Sum* device_slot[2] = {device_sums_0.data(), device_sums_1.data()};
  Sum* host_slot[2] = {host_0.data(), host_1.data()};
  for (Sum* h : host_slot)
    for (std::size_t i = 0; i < n; ++i) h[i] = Sum(0);
  std::vector<Event> computed(count), copied(count);

  const auto enqueue = [&](std::size_t j) {
    const int slot = static_cast<int>(j % 2);
    if (schedule.delay_ns[j] > 0) spin_kernel<<<1, 1, 0, compute.get()>>>(schedule.delay_ns[j]);
    launch_sums(j, device_slot[slot], compute.get());
    check(cudaGetLastError(), "sums launch");
    check(cudaEventRecord(computed[j].get(), compute.get()), "cudaEventRecord computed");
    check(cudaStreamWaitEvent(copy, computed[j].get(), 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(host_slot[slot], device_slot[slot], n * sizeof(Sum), cudaMemcpyDeviceToHost, copy),
          "cudaMemcpyAsync");
    check(cudaEventRecord(copied[j].get(), copy), "cudaEventRecord copied");
  };
  const auto accumulate = [&](std::size_t j) {
    if (schedule.wait_for_copy) check(cudaEventSynchronize(copied[j].get()), "cudaEventSynchronize");
    read(j, host_slot[j % 2]);
  };
  // Micro-batch j + 1 is queued before the host adds micro-batch j, so that the device works while the host adds.
  // The queue reaches micro-batch j + 2's copy into j's buffer only after that add.
  std::exception_ptr failure;
  try {
    enqueue(0);
    for (std::size_t j = 0; j < count; ++j) {
      if (j + 1 < count) enqueue(j + 1);
      accumulate(j);
    }
  } catch (...) {
    failure = std::current_exception();  // a failed launch, or `read` threw: drain the streams before the rethrow
  }
  // Buffers are freed only after every copy has landed, in either variant, and after a failure too.
  const cudaError_t compute_done = cudaStreamSynchronize(compute.get());
  const cudaError_t copy_done = cudaStreamSynchronize(copy);
  if (failure) std::rethrow_exception(failure);
  check(compute_done, "cudaStreamSynchronize compute");
  check(copy_done, "cudaStreamSynchronize copy");
}

// A window of separately laid-out micro-batches: each uploaded as its own batch.
template <class Device, class Sum, class Batch, class Reader>
void run_pipeline(const std::vector<Batch>& window, const PipelineSchedule& schedule, LaunchConfig launch,
                  const Reader& read) {
  if (window.empty()) return;
  const std::size_t n = window.front().sum_count();
  for (const auto& b : window)
    if (b.sum_count() != n)
      throw std::invalid_argument("run_offload_pipeline: every micro-batch of a window must have the same number of sums");
  std::vector<std::unique_ptr<Device>> batches;
  for (const auto& b : window) batches.push_back(std::make_unique<Device>(b));
  run_pipeline<Sum>(window.size(), n, schedule,
                    [&](std::size_t j, Sum* out, cudaStream_t stream) { launch_sums(*batches[j], out, launch, stream); },
                    read);
}

// A window laid out once: uploaded once, each micro-batch's kernel over its own tokens.
template <class Device, class Sum, class Batch, class Reader>
void run_pipeline(const Batch& window, const std::vector<TokenRange>& micro_batches, const PipelineSchedule& schedule,
                  LaunchConfig launch, const Reader& read) {
  for (const TokenRange& r : micro_batches)
    if (r.begin < 0 || r.count < 0 || r.begin + r.count > window.token_count())
      throw std::invalid_argument("run_offload_pipeline: a micro-batch's tokens lie outside the window's");
  if (micro_batches.empty()) return;
  const Device device(window);
  run_pipeline<Sum>(micro_batches.size(), window.sum_count(), schedule,
                    [&](std::size_t j, Sum* out, cudaStream_t stream) {
                      launch_view_sums(tokens_of(device.view(), micro_batches[j]), out, launch, stream);
                    },
                    read);
}

}  // namespace

void run_offload_pipeline(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const HostReader& read) {
  run_pipeline<DeviceBatch, Int128>(window, schedule, launch, read);
}

void run_offload_pipeline(const std::vector<ExactMlpBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const HostReader& read) {
  run_pipeline<DeviceMlpBatch, Int128>(window, schedule, launch, read);
}

void run_offload_pipeline(const std::vector<ExactTiedBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const HostReader& read) {
  run_pipeline<DeviceTiedBatch, Int128>(window, schedule, launch, read);
}

void run_offload_pipeline(const std::vector<FloatLinearBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const FloatHostReader& read) {
  run_pipeline<DeviceFloatLinearBatch, float>(window, schedule, launch, read);
}

void run_offload_pipeline(const std::vector<FloatMlpBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const FloatHostReader& read) {
  run_pipeline<DeviceFloatMlpBatch, float>(window, schedule, launch, read);
}

void run_offload_pipeline(const std::vector<FloatTiedBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const FloatHostReader& read) {
  run_pipeline<DeviceFloatTiedBatch, float>(window, schedule, launch, read);
}

void run_offload_pipeline(const ExactLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const HostReader& read) {
  run_pipeline<DeviceBatch, Int128>(window, micro_batches, schedule, launch, read);
}

void run_offload_pipeline(const ExactMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const HostReader& read) {
  run_pipeline<DeviceMlpBatch, Int128>(window, micro_batches, schedule, launch, read);
}

void run_offload_pipeline(const ExactTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const HostReader& read) {
  run_pipeline<DeviceTiedBatch, Int128>(window, micro_batches, schedule, launch, read);
}

void run_offload_pipeline(const FloatLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const FloatHostReader& read) {
  run_pipeline<DeviceFloatLinearBatch, float>(window, micro_batches, schedule, launch, read);
}

void run_offload_pipeline(const FloatMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const FloatHostReader& read) {
  run_pipeline<DeviceFloatMlpBatch, float>(window, micro_batches, schedule, launch, read);
}

void run_offload_pipeline(const FloatTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const FloatHostReader& read) {
  run_pipeline<DeviceFloatTiedBatch, float>(window, micro_batches, schedule, launch, read);
}

std::vector<Int128> run_offload_pipeline(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& schedule,
                                         LaunchConfig launch) {
  std::vector<Int128> total(window.empty() ? 0 : window.front().sum_count(), 0);
  run_offload_pipeline(window, schedule, launch,
                       [&](std::size_t, const Int128* sums) { add_into(total.data(), sums, total.size()); });
  return total;
}

}  // namespace accumcheck::cuda
