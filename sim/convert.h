// Conversions between the exact scenario (Rational) and the scalar a target computes in, and back.
// Into S: models::from_rational<S> (exact for exact types, the documented rounding otherwise).
// Back: models::to_rational (exact value of whatever S holds).
#pragma once

#include <type_traits>
#include <vector>

#include "models/optimizer.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::sim {

// Into To from Rational with from_rational<To>, or back to Rational with to_rational<From>.
template <class To, class From>
models::Matrix<To> convert_tensor(const models::Matrix<From>& tensor) {
  // Lambdas, not function pointers, so that the element conversion inlines (two words for an inline value).
  if constexpr (std::is_same_v<From, models::Rational>)
    return models::convert_matrix<To>(tensor, [](const models::Rational& q) { return models::from_rational<To>(q); });
  else
    return models::convert_matrix<To>(tensor, [](const From& x) { return models::to_rational<From>(x); });
}

template <class To, class From>
std::vector<models::Matrix<To>> convert_tensors(const std::vector<models::Matrix<From>>& tensors) {
  std::vector<models::Matrix<To>> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(convert_tensor<To>(t));
  return out;
}

// The same into `out`, in its storage where its tensors already have these shapes (a thread's next run of a model
// of the same sizes): no allocation then.
template <class To, class From>
void convert_tensors_into(const std::vector<models::Matrix<From>>& tensors, std::vector<models::Matrix<To>>& out) {
  out.resize(tensors.size());
  for (std::size_t p = 0; p < tensors.size(); ++p) {
    const models::Matrix<From>& t = tensors[p];
    models::Matrix<To>& o = out[p];
    o.resize(t.rows(), t.cols());
    const From* in = t.data();
    To* to = o.data();
    for (Eigen::Index i = 0; i < t.size(); ++i) {
      if constexpr (std::is_same_v<From, models::Rational>) to[i] = models::from_rational<To>(in[i]);
      else to[i] = models::to_rational<From>(in[i]);
    }
  }
}

template <class S>
models::Parameters<S> to_scalar(const models::Parameters<models::Rational>& p) {
  return {convert_tensors<S>(p.tensors)};
}

template <class S>
models::Sequence<S> to_scalar(const models::Sequence<models::Rational>& seq) {
  return {convert_tensor<S>(seq.features), seq.token_ids, seq.expert_index, convert_tensor<S>(seq.targets), seq.loss_mask};
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
