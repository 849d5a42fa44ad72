// FlatLayout and partitions: parameters flattened in order into one vector, as ZeRO's flat buffers, and the
// slice of it each data-parallel rank owns.
//
// Element f of the flat vector is element i (Eigen's linear, column-major index) of parameter p, with
// f = offset[p] + i. DeepSpeed pads the flat buffer to a multiple of R and gives every rank ceil(N / R)
// elements; the last ranks' slices may be shorter or empty here (padding holds no parameter).
#pragma once

#include <algorithm>
#include <vector>

#include "models/assert.h"
#include "models/model_spec.h"
#include "models/tensor.h"

namespace accumcheck::sim {

struct FlatLayout {
  std::vector<std::size_t> offset;  // [P] first flat element of each parameter
  std::vector<std::size_t> size;    // [P] elements of each parameter
  std::vector<int> param_of;        // [N] parameter of each flat element
  std::size_t total = 0;            // N

  explicit FlatLayout(const models::ModelSpec& spec) { assign(spec); }

  // The layout of `spec`, in the storage this one has (the engines' reset).
  void assign(const models::ModelSpec& spec) {
    const auto shapes = models::parameter_shapes(spec);
    offset.clear();
    size.clear();
    total = 0;
    offset.reserve(shapes.size());
    size.reserve(shapes.size());
    for (const auto& [rows, cols] : shapes) {
      offset.push_back(total);
      size.push_back(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
      total += size.back();
    }
    param_of.resize(total);
    for (std::size_t p = 0; p < offset.size(); ++p)
      std::fill(param_of.begin() + static_cast<std::ptrdiff_t>(offset[p]),
                param_of.begin() + static_cast<std::ptrdiff_t>(offset[p] + size[p]), static_cast<int>(p));
  }

  template <class S>
  std::vector<S> flatten(const std::vector<models::Matrix<S>>& tensors) const {
    std::vector<S> flat;
    flatten_into(tensors, flat);
    return flat;
  }

  // flatten into `flat`, whose storage is kept where it is large enough.
  template <class S>
  void flatten_into(const std::vector<models::Matrix<S>>& tensors, std::vector<S>& flat) const {
    ACCUMCHECK_ASSERT(tensors.size() == offset.size());
    flat.clear();
    flat.reserve(total);
    for (std::size_t p = 0; p < tensors.size(); ++p) {
      ACCUMCHECK_ASSERT(flat.size() == offset[p] && static_cast<std::size_t>(tensors[p].size()) == size[p]);
      flat.insert(flat.end(), tensors[p].data(), tensors[p].data() + tensors[p].size());
    }
    ACCUMCHECK_ASSERT(flat.size() == total);
  }

  // Writes flat back into tensors of the right shapes (which must already exist).
  template <class S>
  void unflatten(const std::vector<S>& flat, std::vector<models::Matrix<S>>& tensors) const {
    ACCUMCHECK_ASSERT(tensors.size() == offset.size() && flat.size() == total);
    for (std::size_t p = 0; p < tensors.size(); ++p) {
      ACCUMCHECK_ASSERT(static_cast<std::size_t>(tensors[p].size()) == size[p]);
      std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(offset[p]), size[p], tensors[p].data());
    }
  }
};

struct PartitionRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
  bool contains(std::size_t f) const { return f >= begin && f < end; }
};

// The slice of rank r among R over N elements: ceil(N / R) each, as ZeRO partitions its flat buffers.
inline PartitionRange partition_of(std::size_t total, int rank_count, int rank) {
  const std::size_t per_rank = (total + static_cast<std::size_t>(rank_count) - 1) / static_cast<std::size_t>(rank_count);
  const std::size_t begin = std::min(total, per_rank * static_cast<std::size_t>(rank));
  return {begin, std::min(total, begin + per_rank)};
}

inline int owner_of(std::size_t total, int rank_count, std::size_t f) {
  const std::size_t per_rank = (total + static_cast<std::size_t>(rank_count) - 1) / static_cast<std::size_t>(rank_count);
  return static_cast<int>(f / per_rank);
}

}  // namespace accumcheck::sim
