// The tokens `r` of a laid-out window as a batch of their own, on the host: the parameters and the sums' shape (group
// count, denominator) are the window's, the token arrays the range's. What the device does by advancing a view's
// token pointers (launch_sums.cuh's tokens_of), for the offload pipeline's CPU twin.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda/device.h"

namespace accumcheck::cuda {

namespace detail {
template <class T>
std::vector<T> token_rows(const std::vector<T>& v, TokenRange r, int width) {
  const auto w = static_cast<std::size_t>(width);
  return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.begin) * w),
                        v.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.begin + r.count) * w));
}
// Batch: the linear model's (expert, features [N][I], targets [N][O]) or the MLP's (features, targets) batches.
template <class Batch>
Batch dense_tokens_of(Batch b, TokenRange r) {
  b.features = token_rows(b.features, r, b.input_size);
  b.targets = token_rows(b.targets, r, b.output_size);
  b.group = token_rows(b.group, r, 1);
  b.mask = token_rows(b.mask, r, 1);
  return b;
}
template <class Batch>
Batch tied_tokens_of(Batch b, TokenRange r) {
  b.targets = token_rows(b.targets, r, b.vocab_size);
  b.token_id = token_rows(b.token_id, r, 1);
  b.group = token_rows(b.group, r, 1);
  b.mask = token_rows(b.mask, r, 1);
  return b;
}
}  // namespace detail

inline ExactLinearBatch tokens_of(const ExactLinearBatch& b, TokenRange r) {
  ExactLinearBatch out = detail::dense_tokens_of(b, r);
  out.expert = detail::token_rows(b.expert, r, 1);
  return out;
}
inline FloatLinearBatch tokens_of(const FloatLinearBatch& b, TokenRange r) {
  FloatLinearBatch out = detail::dense_tokens_of(b, r);
  out.expert = detail::token_rows(b.expert, r, 1);
  return out;
}
inline ExactMlpBatch tokens_of(const ExactMlpBatch& b, TokenRange r) { return detail::dense_tokens_of(b, r); }
inline FloatMlpBatch tokens_of(const FloatMlpBatch& b, TokenRange r) { return detail::dense_tokens_of(b, r); }
inline ExactTiedBatch tokens_of(const ExactTiedBatch& b, TokenRange r) { return detail::tied_tokens_of(b, r); }
inline FloatTiedBatch tokens_of(const FloatTiedBatch& b, TokenRange r) { return detail::tied_tokens_of(b, r); }

}  // namespace accumcheck::cuda
