// Conversions between the exact scenario (Rational) and the scalar a target computes in, and back.
// Into S: models::from_rational<S> (exact for exact types, the documented rounding otherwise).
// Back: models::to_rational (exact value of whatever S holds).
#pragma once

#include "models/optimizer.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::sim {

template <class To, class From>
std::vector<models::Matrix<To>> convert_tensors(const std::vector<models::Matrix<From>>& tensors) {
  std::vector<models::Matrix<To>> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    if constexpr (std::is_same_v<From, models::Rational>)
      out.push_back(models::convert_matrix<To>(t, models::from_rational<To>));
    else
      out.push_back(models::convert_matrix<To>(t, models::to_rational<From>));
  }
  return out;
}

template <class S>
models::Parameters<S> to_scalar(const models::Parameters<models::Rational>& p) {
  return {convert_tensors<S>(p.tensors)};
}

template <class S>
models::Sequence<S> to_scalar(const models::Sequence<models::Rational>& seq) {
  return {convert_tensors<S>(std::vector<models::Matrix<models::Rational>>{seq.features})[0], seq.token_ids,
          seq.expert_index, convert_tensors<S>(std::vector<models::Matrix<models::Rational>>{seq.targets})[0],
          seq.loss_mask};
}

// Every sequence of every batch converted by `convert` (to_scalar<S>, or another scalar's own conversion).
template <class S, class Convert>
std::vector<std::vector<models::Sequence<S>>> convert_batches(const std::vector<std::vector<models::Sequence<models::Rational>>>& batches,
                                                               Convert convert) {
  std::vector<std::vector<models::Sequence<S>>> out;
  out.reserve(batches.size());
  for (const auto& batch : batches) {
    std::vector<models::Sequence<S>> converted;
    converted.reserve(batch.size());
    for (const auto& seq : batch) converted.push_back(convert(seq));
    out.push_back(std::move(converted));
  }
  return out;
}

template <class S>
models::Parameters<models::Rational> to_exact(const models::Parameters<S>& p) {
  return {convert_tensors<models::Rational>(p.tensors)};
}

template <class S>
models::Gradient<models::Rational> to_exact(const models::Gradient<S>& g) {
  return {convert_tensors<models::Rational>(g.tensors), g.present};
}

template <class S>
models::OptimizerState<models::Rational> to_exact(const models::OptimizerState<S>& s) {
  return {convert_tensors<models::Rational>(s.first_moment), convert_tensors<models::Rational>(s.second_moment),
          s.step_count, s.has_momentum_buffer};
}

}  // namespace accumcheck::sim
