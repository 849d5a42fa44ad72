// Tensor vocabulary shared by every model: a parameter set, a gradient with per-tensor presence, and a batch.
//
// Shape legend (used in comments across models/):
//   T  tokens in one sequence        I  input features (input_size)      O  outputs (output_size)
//   H  hidden units (hidden_size)    V  vocabulary (vocab_size)          D  embedding width (embed_size)
//   E  experts (expert_count)
// Every tensor is an Eigen column-major matrix of the scalar S; vectors are n x 1 matrices so that one
// container type holds every parameter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "models/assert.h"

namespace accumcheck::models {

template <class S>
using Matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;

// flags = n copies of `value`. std::vector<bool>'s assign() is an out-of-line call that goes through the general
// insert whenever the vector grows (about 200 instructions, where a run makes several: a gradient's presence, an
// engine's per-parameter flags); here a vector of another size is built anew (an allocation and a word-wise fill,
// inline) and one of the right size is filled in place.
inline void reset_flags(std::vector<bool>& flags, std::size_t n, bool value = false) {
  if (flags.size() == n) std::fill(flags.begin(), flags.end(), value);
  else flags = std::vector<bool>(n, value);
}

// The trainable state of a model: one matrix per named parameter, in the order of parameter_names(spec).
template <class S>
struct Parameters {
  std::vector<Matrix<S>> tensors;

  std::size_t size() const { return tensors.size(); }
};

// A gradient as autograd leaves it: a tensor per parameter and whether that parameter received one at all.
// `present[p]` is false for a frozen parameter and for a parameter that took no part in any forward pass
// (a routed expert that got no tokens): PyTorch leaves its .grad as None, which optimizers and offload
// buffers treat differently from a gradient of zeros. An absent tensor is kept at zero.
template <class S>
struct Gradient {
  std::vector<Matrix<S>> tensors;
  std::vector<bool> present;

  std::size_t size() const { return tensors.size(); }
};

// One training sequence. Tokens are rows. Which fields a model reads depends on its kind:
//   features      [T, I]  linear and MLP inputs
//   token_ids     [T]     tied-embedding inputs, each in [0, V)
//   expert_index  [T]     linear model with experts: the expert each token is routed to, in [0, E)
//   targets       [T, O]  (O = V for the tied-embedding model)
//   loss_mask     [T]     1 for a supervised token, 0 for one that takes part in the forward pass only
// A sequence may have no tokens, or no supervised tokens: both are legal input.
template <class S>
struct Sequence {
  Matrix<S> features;
  std::vector<int> token_ids;
  std::vector<int> expert_index;
  Matrix<S> targets;
  std::vector<std::uint8_t> loss_mask;

  int token_count() const { return static_cast<int>(loss_mask.size()); }
  int valid_token_count() const {
    int count = 0;
    for (auto m : loss_mask) count += (m != 0);
    return count;
  }
};

// a[i] == b[i] for every i < n. Rational and FastRational have their own (found by argument-dependent lookup),
// which compare the storage's words in one memcmp before any value.
template <class S>
bool values_equal(const S* a, const S* b, std::size_t n) {
  return std::equal(a, a + n, b);
}

// Exact equality: same shape and every element equal (no tolerance: for exact types equality is the claim).
template <class S>
bool matrices_equal(const Matrix<S>& a, const Matrix<S>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  return values_equal(a.data(), b.data(), static_cast<std::size_t>(a.size()));
}
template <class S>
bool tensor_lists_equal(const std::vector<Matrix<S>>& a, const std::vector<Matrix<S>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!matrices_equal(a[i], b[i])) return false;
  return true;
}
template <class S>
bool operator==(const Parameters<S>& a, const Parameters<S>& b) {
  return tensor_lists_equal(a.tensors, b.tensors);
}
template <class S>
bool operator==(const Gradient<S>& a, const Gradient<S>& b) {
  return a.present == b.present && tensor_lists_equal(a.tensors, b.tensors);
}

// Elementwise conversion between scalar types through a function object (e.g. from_rational<S>).
// Storage order (column-major), through the data pointers: at a few values a matrix, Eigen's checked (row, column)
// access cost as much as the values.
template <class To, class From, class Convert>
Matrix<To> convert_matrix(const Matrix<From>& m, Convert convert) {
  Matrix<To> out(m.rows(), m.cols());
  const From* in = m.data();
  To* to = out.data();
  for (Eigen::Index i = 0; i < m.size(); ++i) to[i] = convert(in[i]);
  return out;
}

}  // namespace accumcheck::models
