// The model interface every caller uses: shapes, zero parameters and gradients, input validation, and the
// weighted loss and its gradient, dispatched on ModelSpec::kind.
//
// Objective of one backward call: J = sum_i c_i sum_t M_it l_it, where c_i are sequence coefficients chosen by
// the loss aggregation (loss_aggregation.h). accumulate_gradient adds dJ/dtheta into an existing Gradient,
// as autograd accumulates into .grad; frozen parameters never receive one.
#pragma once

#include <span>
#include <stdexcept>
#include <string>

#include "models/linear_model.h"
#include "models/mlp_model.h"
#include "models/model_spec.h"
#include "models/scalar.h"
#include "models/tensor.h"
#include "models/tied_embedding_model.h"

namespace accumcheck::models {

namespace detail {
// A rows x cols matrix of zeros. The exact types (Rational, FastRational) are zero when default-constructed, so
// their matrices are built zero in one pass; Matrix::Zero would construct every value, then assign a zero to it.
template <class S>
Matrix<S> zero_matrix(int rows, int cols) {
  if constexpr (ScalarTraits<S>::exact) return Matrix<S>(rows, cols);
  else return Matrix<S>::Zero(rows, cols);
}
}  // namespace detail

template <class S>
Parameters<S> zero_parameters(const ModelSpec& spec) {
  Parameters<S> params;
  const auto shapes = parameter_shapes(spec);
  params.tensors.reserve(shapes.size());
  for (const auto& [rows, cols] : shapes) params.tensors.push_back(detail::zero_matrix<S>(rows, cols));
  return params;
}

template <class S>
Gradient<S> zero_gradient(const ModelSpec& spec) {
  Gradient<S> grad;
  const auto shapes = parameter_shapes(spec);
  grad.tensors.reserve(shapes.size());
  for (const auto& [rows, cols] : shapes) grad.tensors.push_back(detail::zero_matrix<S>(rows, cols));
  reset_flags(grad.present, grad.tensors.size());
  return grad;
}

// Throws std::invalid_argument naming the parameter and the expected versus actual shape.
template <class S>
void validate_parameters(const ModelSpec& spec, const Parameters<S>& params) {
  const auto shapes = parameter_shapes(spec);
  if (params.size() != shapes.size())
    throw std::invalid_argument("parameters: expected " + std::to_string(shapes.size()) + " tensors, got " +
                                std::to_string(params.size()));
  for (std::size_t p = 0; p < shapes.size(); ++p)
    if (params.tensors[p].rows() != shapes[p].first || params.tensors[p].cols() != shapes[p].second)
      throw std::invalid_argument("parameter '" + parameter_names(spec)[p] + "': expected shape [" +
                                  std::to_string(shapes[p].first) + ", " + std::to_string(shapes[p].second) +
                                  "], got [" + std::to_string(params.tensors[p].rows()) + ", " +
                                  std::to_string(params.tensors[p].cols()) + "]");
}

// Throws std::invalid_argument naming the field, the token and the expected versus actual value.
template <class S>
void validate_sequence(const ModelSpec& spec, const Sequence<S>& seq) {
  // The checks inline; each failure's message is built out of line, on the cold path (detail::throw_sequence_*).
  const int T = seq.token_count();
  if (seq.targets.rows() != T || seq.targets.cols() != target_size(spec))
    detail::throw_sequence_shape("targets", T, target_size(spec), seq.targets.rows(), seq.targets.cols());
  if (spec.kind == ModelKind::tied_embedding) {
    if (static_cast<int>(seq.token_ids.size()) != T) detail::throw_sequence_count("token_ids", seq.token_ids.size(), T);
    for (int t = 0; t < T; ++t) {
      const int id = seq.token_ids[static_cast<std::size_t>(t)];
      if (id < 0 || id >= spec.vocab_size) detail::throw_sequence_index(t, "has id", id, spec.vocab_size);
    }
  } else if (seq.features.rows() != T || seq.features.cols() != spec.input_size) {
    detail::throw_sequence_shape("features", T, spec.input_size, seq.features.rows(), seq.features.cols());
  }
  if (spec.kind == ModelKind::linear && spec.expert_count > 1) {
    if (static_cast<int>(seq.expert_index.size()) != T)
      detail::throw_sequence_count("expert_index", seq.expert_index.size(), T);
    for (int t = 0; t < T; ++t) {
      const int e = seq.expert_index[static_cast<std::size_t>(t)];
      if (e < 0 || e >= spec.expert_count) detail::throw_sequence_index(t, "is routed to expert", e, spec.expert_count);
    }
  }
  for (int t = 0; t < T; ++t)
    if (seq.loss_mask[static_cast<std::size_t>(t)] > 1) detail::throw_sequence_mask(t, seq.loss_mask[static_cast<std::size_t>(t)]);
}

// J = sum_i c_i sum_t M_it l_it.
template <class S>
S weighted_loss(const ModelSpec& spec, const Parameters<S>& params, std::span<const Sequence<S>> sequences,
                std::span<const S> sequence_coefficients) {
  switch (spec.kind) {
    case ModelKind::linear: return linear_model::weighted_loss(spec, params, sequences, sequence_coefficients);
    case ModelKind::mlp: return mlp_model::weighted_loss(spec, params, sequences, sequence_coefficients);
    case ModelKind::tied_embedding:
      return tied_embedding_model::weighted_loss(spec, params, sequences, sequence_coefficients);
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown ModelKind");
}

// A forward pass runs on every batch, even one without tokens (an empty tensor still goes through every dense
// layer, and a data-parallel engine must run it to join the collectives), so on a batch without tokens every
// parameter but a routed expert takes part and gets a gradient, of zeros: marked in `present`.
template <class S>
void mark_present_without_tokens(const ModelSpec& spec, std::span<const Sequence<S>> sequences,
                                 std::vector<bool>& present) {
  for (const auto& seq : sequences)
    if (seq.token_count() > 0) return;
  if (spec.kind == ModelKind::linear && spec.expert_count > 1) return;
  std::fill(present.begin(), present.end(), true);
}

// grad += dJ/dtheta; frozen parameters stay absent and zero.
template <class S>
void accumulate_gradient(const ModelSpec& spec, const Parameters<S>& params,
                         std::span<const Sequence<S>> sequences, std::span<const S> sequence_coefficients,
                         Gradient<S>& grad) {
  ACCUMCHECK_ASSERT(grad.size() == params.size());
  // Most specs freeze nothing: then no mask is built (a backward is called several times a trial).
  const std::vector<bool> frozen = spec.frozen.empty() ? std::vector<bool>{} : frozen_mask(spec);
  // Frozen tensors are computed then discarded: the models stay free of per-parameter branches, and the
  // discarded work is a few multiply-adds on tiny tensors.
  std::vector<Matrix<S>> kept;
  for (std::size_t p = 0; p < frozen.size(); ++p)
    if (frozen[p]) kept.push_back(grad.tensors[p]);
  switch (spec.kind) {
    case ModelKind::linear:
      linear_model::accumulate_gradient(spec, params, sequences, sequence_coefficients, grad);
      break;
    case ModelKind::mlp: mlp_model::accumulate_gradient(spec, params, sequences, sequence_coefficients, grad); break;
    case ModelKind::tied_embedding:
      tied_embedding_model::accumulate_gradient(spec, params, sequences, sequence_coefficients, grad);
      break;
  }
  mark_present_without_tokens(spec, sequences, grad.present);
  std::size_t k = 0;
  for (std::size_t p = 0; p < frozen.size(); ++p)
    if (frozen[p]) {
      grad.tensors[p] = std::move(kept[k++]);
      grad.present[p] = false;
    }
}

}  // namespace accumcheck::models
