// The offload pipeline as a target: an engine model whose gradients are computed on the device and reach the host
// through offload_pipeline.cu, as DeepSpeed's ZeRO offload moves them to its CPU optimizer.
//
// The engine (offload_engine.cpp) follows sim/engine.h's contract for the three models, in exact arithmetic (the
// MLP and the tied embedding through their own kernels, exact_mlp.h and exact_tied.h, the same way):
//   backward(data, coefficients)  queues the micro-batch: every rank's sequences together, one group per sequence
//                                 with coefficient c_ri / (G R). One device holds all R ranks, and the average over
//                                 ranks is in the coefficients.
//   step() at a boundary          lays the window out once as integers (exact_linear.h's lay_out: the parameters
//                                 and every micro-batch's tokens over one common denominator, group ids counting
//                                 from 0 in each micro-batch) and uploads it once; then runs it through the
//                                 pipeline: per micro-batch the kernel on the device over that micro-batch's tokens,
//                                 an asynchronous copy into a pinned host buffer, and the host turning the copied
//                                 sums into the micro-batch's gradient (to_gradient) and adding it into its
//                                 accumulator. Then, on the host: the global norm, clipping, the optimizer step
//                                 (models/optimizer.h), and the parameters "copied back": the next window is laid
//                                 out, and uploaded, from the host's updated parameters.
// Every random choice of the pipeline (which stream copies, the delay injected before each micro-batch's kernel)
// is drawn from the run's schedule seed (sim::StreamId::offload_pipeline), one draw per window: the campaign seed
// decides it, and a finding replays with the same schedule.
//
// Variants, by name:
//   cuda-offload                  the pipeline on the device, synchronised: the host reads a buffer only after its
//                                 copy's event has fired. Exact, so it must equal the full-batch oracle.
//   cuda-offload-nosync           the same without that wait: the host reads a pinned buffer the copy may not have
//                                 filled yet, whenever the device is late. A missing synchronisation, on hardware;
//                                 the properties find it.
//   cuda-offload-host-twin        the pipeline's CPU twin (run_host_pipeline): no device, the same engine, for the
//   cuda-offload-host-twin-nosync tests of everything but the hardware. The unsynchronised twin reads what the
//                                 device leaves in a buffer when late: an older micro-batch's sums.
//   cuda-offload-fp32...          the four again in fp32 (`-fp32` after `cuda-offload`): the fp32 kernels
//                                 (float_linear.h, float_models.h) with fp32 storage, the coefficients rounded as the
//                                 simulated engines round them, an fp32 host accumulator and optimizer. They compute
//                                 in fp32 whatever a campaign asks (EngineModel::fixed_scalar), so every property
//                                 holds them to the oracle's rounding bound.
//   cuda-resident[-fp32][-host-twin]  no offload: a GPU that keeps its gradients, as DDP or ZeRO-0 without offload
//                                 does. backward() only queues; at the boundary the window is laid out once, as one
//                                 batch (a group per sequence: the parameters uploaded once a window), its sums
//                                 computed in one launch and accumulated over the window on the device
//                                 (window_step.h): exactly in Int256, or in fp32 with the offload engine's
//                                 arithmetic to the bit. Then the optimizer steps on the device: in fp32 every
//                                 optimizer (float_step_element, models::update_element<float>'s operations); exactly,
//                                 SGD (exact_sgd_step_at: integers over one denominator per tensor, checked in 256
//                                 bits), while exact Adam steps on the host, its rounded root not being an integer
//                                 operation. The host takes the norm and clips between the accumulation and the step.
// The host's optimizer step is host_optimizer.h's: the flat parameters' elements on oneTBB's threads.
// The device variants are unsupported without a CUDA device (every property says it could not run, never a pass);
// all of them refuse 16-bit storage and loss scaling, and the run refuses values the integers cannot hold (the
// layouts' ExactRangeError) as TargetUnsupported. The ZeRO stage, buckets and the
// offload flag change nothing the engine computes: it always offloads, and one device holds every rank.
#pragma once

#include <memory>
#include <vector>

#include "cuda/device.h"
#include "cuda/exact_batch.h"
#include "sim/target.h"

namespace accumcheck::cuda {

enum class OffloadBackend { device, host_twin };

struct OffloadVariant {
  OffloadBackend backend = OffloadBackend::device;
  bool synchronised = true;
  bool fp32 = false;  // the fp32 kernels and an fp32 host (cuda-offload-fp32...), not the exact integers
  bool resident = false;  // cuda-resident...: accumulated (and, in fp32, stepped) on the device; always synchronised
};

// The engine model of `variant`, named as above.
std::shared_ptr<const sim::EngineModel> make_offload_engine_model(OffloadVariant variant);
// The twelve variants (eight offload, four resident), for registration (sim::register_engine_model) at start-up.
std::vector<std::shared_ptr<const sim::EngineModel>> offload_engine_models();

// The CPU twin of run_offload_pipeline: micro-batch j's sums by host_sums, read in order. Synchronised, `read` sees
// exactly those sums. Unsynchronised (schedule.wait_for_copy false), a micro-batch the schedule delays (delay_ns > 0)
// is read before its copy lands, from the buffer it shares with micro-batch j - 2: that micro-batch's sums, or zeros.
void run_host_pipeline(const std::vector<ExactLinearBatch>& window, const PipelineSchedule& schedule,
                       const HostReader& read);
void run_host_pipeline(const std::vector<ExactMlpBatch>& window, const PipelineSchedule& schedule,
                       const HostReader& read);
void run_host_pipeline(const std::vector<ExactTiedBatch>& window, const PipelineSchedule& schedule,
                       const HostReader& read);
void run_host_pipeline(const std::vector<FloatLinearBatch>& window, const PipelineSchedule& schedule,
                       const FloatHostReader& read);
void run_host_pipeline(const std::vector<FloatMlpBatch>& window, const PipelineSchedule& schedule,
                       const FloatHostReader& read);
void run_host_pipeline(const std::vector<FloatTiedBatch>& window, const PipelineSchedule& schedule,
                       const FloatHostReader& read);
// The same over a window laid out once (run_offload_pipeline's overloads with token ranges): micro-batch j's sums are
// the kernels' twins over its tokens alone (token_slices.h).
void run_host_pipeline(const ExactLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const HostReader& read);
void run_host_pipeline(const ExactMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const HostReader& read);
void run_host_pipeline(const ExactTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const HostReader& read);
void run_host_pipeline(const FloatLinearBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const FloatHostReader& read);
void run_host_pipeline(const FloatMlpBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const FloatHostReader& read);
void run_host_pipeline(const FloatTiedBatch& window, const std::vector<TokenRange>& micro_batches,
                       const PipelineSchedule& schedule, const FloatHostReader& read);


}  // namespace accumcheck::cuda
