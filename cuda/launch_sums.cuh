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

// A view of the tokens `r` of a batch already on the device: its token arrays advanced to r.begin, r.count tokens. The
// parameters and the sums' shape are the batch's. View: the linear model's or the MLP's (features [N][I], targets
// [N][O]), exact or fp32.
template <class View>
View dense_tokens_of(View v, TokenRange r) {
  const auto begin = static_cast<std::size_t>(r.begin);
  v.features += begin * static_cast<std::size_t>(v.input_size);
  v.targets += begin * static_cast<std::size_t>(v.output_size);
  v.group += begin, v.mask += begin;
  v.token_count = r.count;
  return v;
}
// The tied embedding's (targets [N][V], token ids), exact or fp32.
template <class View>
View tied_tokens_of(View v, TokenRange r) {
  const auto begin = static_cast<std::size_t>(r.begin);
  v.targets += begin * static_cast<std::size_t>(v.vocab_size);
  v.token_id += begin, v.group += begin, v.mask += begin;
  v.token_count = r.count;
  return v;
}
inline BatchView tokens_of(BatchView v, TokenRange r) {
  v = dense_tokens_of(v, r);
  v.expert += r.begin;
  return v;
}
template <class T>
LinearView<T> tokens_of(LinearView<T> v, TokenRange r) {
  v = dense_tokens_of(v, r);
  v.expert += r.begin;
  return v;
}
inline MlpView tokens_of(const MlpView& v, TokenRange r) { return dense_tokens_of(v, r); }
template <class T>
MlpFloatView<T> tokens_of(const MlpFloatView<T>& v, TokenRange r) { return dense_tokens_of(v, r); }
inline TiedView tokens_of(const TiedView& v, TokenRange r) { return tied_tokens_of(v, r); }
template <class T>
TiedFloatView<T> tokens_of(const TiedFloatView<T>& v, TokenRange r) { return tied_tokens_of(v, r); }

// The sums kernel of a view, whichever model and arithmetic.
inline void launch_view_sums(const BatchView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_exact_sums(v, sums, launch, stream);
}
inline void launch_view_sums(const MlpView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_mlp_sums(v, sums, launch, stream);
}
inline void launch_view_sums(const TiedView& v, Int128* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_tied_sums(v, sums, launch, stream);
}
template <class View>
void launch_view_sums(const View& v, float* sums, LaunchConfig launch, cudaStream_t stream) {
  launch_float_sums(v, sums, launch, stream);
}

}  // namespace accumcheck::cuda
