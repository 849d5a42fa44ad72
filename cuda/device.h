// The GPU half of cuda/: what the .cu files export, in plain C++17 types, so that C++ translation units (tests, the
// benchmark) call it without CUDA headers. Every function throws DeviceError with the CUDA
// call and its error string when CUDA fails; none is called without a device (device_available first).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/exact_batch.h"
#include "cuda/exact_mlp_batch.h"
#include "cuda/exact_tied_batch.h"
#include "cuda/float_linear_batch.h"
#include "cuda/float_models_batch.h"
#include "cuda/window_step.h"

namespace accumcheck::cuda {

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether a CUDA device can run the kernels; when not, why (no driver, no device) in `why`.
bool device_available(std::string* why);
// The device's name and compute capability, e.g. "NVIDIA H200 (sm_90)".
std::string device_name();

// How the exact kernel is launched: threads per block, and blocks (0: enough for one sum per thread). Any values
// give the same sums (a grid-stride loop; each sum is one thread's, over its tokens in order, in integers).
struct LaunchConfig {
  int block_size = 256;
  int grid_size = 0;
};

// The sums of exact_batch.h for `batch`, computed on the device (exact_linear.cu).
std::vector<Int128> device_sums(const ExactLinearBatch& batch, LaunchConfig launch);
// The fp32 sums of float_linear_batch.h for `batch`, computed on the device (float_linear.cu).
std::vector<float> device_float_sums(const FloatLinearBatch& batch, LaunchConfig launch);
// The fp32 sums of float_models_batch.h for `batch`, computed on the device (float_models.cu).
std::vector<float> device_float_mlp_sums(const FloatMlpBatch& batch, LaunchConfig launch);
std::vector<float> device_float_tied_sums(const FloatTiedBatch& batch, LaunchConfig launch);
// The sums of exact_mlp_batch.h for `batch`, computed on the device (exact_mlp.cu).
std::vector<Int128> device_mlp_sums(const ExactMlpBatch& batch, LaunchConfig launch);
// The sums of exact_tied_batch.h for `batch`, computed on the device (exact_tied.cu).
std::vector<Int128> device_tied_sums(const ExactTiedBatch& batch, LaunchConfig launch);

// The offload pipeline (offload_pipeline.cu): for each micro-batch of a window, the sums are computed on the
// device on a compute stream, copied asynchronously into one of two pinned host buffers (on a copy stream, or the
// same stream, as `separate_copy_stream` says) after an event, and added on the host (oneTBB) into the window's
// sums while the device computes the next micro-batch: DeepSpeed's offload of gradients to the CPU optimizer.
struct PipelineSchedule {
  bool separate_copy_stream = true;
  // Nanoseconds the compute stream spins before each micro-batch's kernel (the fuzzer's injected delays).
  std::vector<std::int64_t> delay_ns;
  // Whether the host waits for each copy's event before reading its buffer. false is the deliberately
  // unsynchronised variant: the host reads a buffer the copy may not have filled yet.
  bool wait_for_copy = true;
};
// The schedule drawn from `seed` for `micro_batches` micro-batches: stream assignment and delays of 0 to 2 ms.
PipelineSchedule draw_schedule(std::uint64_t seed, int micro_batches, bool wait_for_copy);
// What the host does with micro-batch j's sums once it may read them (`sums`, sum_count() values in a pinned host
// buffer that the pipeline reuses after the call returns): add them into the window's gradient, say.
using HostReader = std::function<void(std::size_t micro_batch, const Int128* sums)>;
// The same for the fp32 kernels' sums (the cuda-offload-fp32 targets).
using FloatHostReader = std::function<void(std::size_t micro_batch, const float* sums)>;
// Runs the window through the pipeline, calling `read` for each micro-batch in order. Every micro-batch must have
// the same number of sums (the same shape and groups). The linear model's kernel, the MLP's or the tied embedding's.
void run_offload_pipeline(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const HostReader& read);
void run_offload_pipeline(const std::vector<ExactMlpBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const HostReader& read);
void run_offload_pipeline(const std::vector<ExactTiedBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const HostReader& read);
// The same pipeline with the fp32 kernels (float_linear.cu, float_models.cu): fp32 sums in the pinned buffers.
void run_offload_pipeline(const std::vector<FloatLinearBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const FloatHostReader& read);
void run_offload_pipeline(const std::vector<FloatMlpBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const FloatHostReader& read);
void run_offload_pipeline(const std::vector<FloatTiedBatch>& window, const PipelineSchedule& schedule,
                          LaunchConfig launch, const FloatHostReader& read);
// The same pipeline over a window laid out once (parameters and every micro-batch's tokens uploaded together): micro-batch
// j is the tokens micro_batches[j] of `window`, whose group ids count from 0 in each micro-batch, and its kernel runs
// over those tokens alone, into window.sum_count() sums. What the cuda-offload targets run.
struct TokenRange {
  int begin = 0, count = 0;
};
void run_offload_pipeline(const ExactLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const HostReader& read);
void run_offload_pipeline(const ExactMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const HostReader& read);
void run_offload_pipeline(const ExactTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const HostReader& read);
void run_offload_pipeline(const FloatLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const FloatHostReader& read);
void run_offload_pipeline(const FloatMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const FloatHostReader& read);
void run_offload_pipeline(const FloatTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                          const PipelineSchedule& schedule, LaunchConfig launch, const FloatHostReader& read);
// The window's sums as the host accumulated them (add_into, pipeline_host.h).
std::vector<Int128> run_offload_pipeline(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& schedule,
                                         LaunchConfig launch);

// The cuda-resident targets' window on the device (window_step.cu): the window laid out as one batch (a group per
// sequence), its sums computed in one launch and kept in device memory, then accumulated over the window there
// (window_step.h). Exact: the window's Int256 sums A[e] come back. fp32: the accumulated gradient comes back, the host
// says whether to clip it (clip_of), and the optimizer step runs on the device over `state`'s stepped elements, which
// come back stepped.
std::vector<Int256> device_exact_window(const ExactLinearBatch& batch, const ExactWindowMultipliers& m, LaunchConfig launch);
std::vector<Int256> device_exact_window(const ExactMlpBatch& batch, const ExactWindowMultipliers& m, LaunchConfig launch);
std::vector<Int256> device_exact_window(const ExactTiedBatch& batch, const ExactWindowMultipliers& m, LaunchConfig launch);
// The same, then `step_of`'s exact SGD step (window_step.h) on the device over the sums still there, into `result`
// (left empty when step_of says none).
std::vector<Int256> device_exact_window_step(const ExactLinearBatch& batch, const ExactWindowMultipliers& m,
                                             const ExactStepOf& step_of, ExactSgdResult& result, LaunchConfig launch);
std::vector<Int256> device_exact_window_step(const ExactMlpBatch& batch, const ExactWindowMultipliers& m,
                                             const ExactStepOf& step_of, ExactSgdResult& result, LaunchConfig launch);
std::vector<Int256> device_exact_window_step(const ExactTiedBatch& batch, const ExactWindowMultipliers& m,
                                             const ExactStepOf& step_of, ExactSgdResult& result, LaunchConfig launch);
std::vector<float> device_float_window_step(const FloatLinearBatch& batch, const FloatWindow& window,
                                            const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of,
                                            LaunchConfig launch);
std::vector<float> device_float_window_step(const FloatMlpBatch& batch, const FloatWindow& window,
                                            const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of,
                                            LaunchConfig launch);
std::vector<float> device_float_window_step(const FloatTiedBatch& batch, const FloatWindow& window,
                                            const FloatStepPlan& plan, FloatStepState& state, const ClipOf& clip_of,
                                            LaunchConfig launch);

}  // namespace accumcheck::cuda
