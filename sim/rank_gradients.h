// What every simulated engine does the same way before its own bookkeeping: each rank's backward on its own
// micro-batch (loss scaled by 1/G), and the average of those gradients over ranks in an arrival order the
// schedule chooses (summation order matters only for float types; exact types give the same sum).
#pragma once

#include <algorithm>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/fast_rational.h"
#include "models/model.h"
#include "sim/exact_memos.h"
#include "sim/engine.h"
#include "sim/flat_layout.h"
#include "sim/schedule.h"

namespace accumcheck::sim {

template <class S>
struct ReducedGradient {
  std::vector<S> flat;        // [N] average over ranks of the rank gradients
  std::vector<bool> present;  // [P] the parameter received a gradient on at least one rank
};

// `tensors` given the spec's shapes, each matrix keeping its storage where its size is already right; the values
// are left as they are, for callers that write every one before reading it (an engine's buffers kept between runs).
template <class S>
void reshape_tensors(const models::ModelSpec& spec, std::vector<models::Matrix<S>>& tensors) {
  const models::ParameterShapes shapes = models::parameter_shapes(spec);
  tensors.resize(shapes.size());
  for (std::size_t p = 0; p < shapes.size(); ++p) tensors[p].resize(shapes[p].first, shapes[p].second);
}

// A gradient of the spec's shapes for a step to write over whole, values and presence: `spare`'s storage (a step's
// gradient its caller gave back, Engine::give_back), reshaped, which leaves `spare` empty. Its values are
// unspecified until written; with no spare, its tensors are made.
template <class S>
models::Gradient<S> reuse_gradient(const models::ModelSpec& spec, models::Gradient<S>& spare) {
  models::Gradient<S> grad = std::exchange(spare, {});
  reshape_tensors(spec, grad.tensors);
  return grad;
}

// `count` gradients of the spec's shapes, with a presence flag per parameter, for rank_gradient_into to write over.
template <class S>
void reshape_gradients(const models::ModelSpec& spec, std::size_t count, std::vector<models::Gradient<S>>& grads) {
  grads.resize(count);
  for (auto& grad : grads) {
    reshape_tensors(spec, grad.tensors);
    models::reset_flags(grad.present, grad.tensors.size());
  }
}

// Rank r's gradient of (1/G) sum_i c_ri sum_t M l, as autograd would leave it in .grad, written over `grad`, which
// must have the spec's shapes (an engine keeps one per rank instead of allocating one per micro-batch).
template <class S>
void rank_gradient_into(const models::ModelSpec& spec, const models::Parameters<S>& params,
                        const std::vector<models::Sequence<S>>& sequences, const std::vector<S>& coefficients,
                        const S& inverse_accumulation_steps, models::Gradient<S>& grad) {
  ACCUMCHECK_ASSERT(sequences.size() == coefficients.size());
  // Scratch kept per thread (nothing below calls back in here): written whole before it is read.
  thread_local std::vector<S> scaled;
  scaled.resize(coefficients.size());
  for (std::size_t i = 0; i < coefficients.size(); ++i) scaled[i] = coefficients[i] * inverse_accumulation_steps;
  const auto compute = [&](models::Gradient<S>& out) {
    for (auto& t : out.tensors) t.setConstant(S(0));
    std::fill(out.present.begin(), out.present.end(), false);
    models::accumulate_gradient(spec, params, std::span<const models::Sequence<S>>(sequences),
                                std::span<const S>(scaled), out);
  };
  // An exact run inside a trial's memo (sim/backward_memo.h) hands on an equal call's gradient.
  if constexpr (std::is_same_v<S, models::FastRational>) {
    if (ExactMemos* memos = ExactMemoScope::current()) {
      memos->backward.reuse_or_compute(spec, params, sequences, scaled, grad, compute);
      return;
    }
  }
  compute(grad);
}

template <class S>
models::Gradient<S> rank_gradient(const models::ModelSpec& spec, const models::Parameters<S>& params,
                                  const std::vector<models::Sequence<S>>& sequences, const std::vector<S>& coefficients,
                                  const S& inverse_accumulation_steps) {
  models::Gradient<S> grad = models::zero_gradient<S>(spec);
  rank_gradient_into(spec, params, sequences, coefficients, inverse_accumulation_steps, grad);
  return grad;
}

// The data-parallel average: sum over ranks in the arrival order drawn from `arrival`, divided by R, written over
// `out` (an engine keeps one instead of allocating one per micro-batch).
template <class S>
void average_over_ranks_into(const FlatLayout& layout, const std::vector<models::Gradient<S>>& rank_grads,
                             Stream& arrival, ReducedGradient<S>& out) {
  const int R = static_cast<int>(rank_grads.size());
  out.flat.assign(layout.total, S(0));
  models::reset_flags(out.present, layout.offset.size());
  const auto add = [&](const models::Gradient<S>& g) {
    for (std::size_t p = 0; p < layout.offset.size(); ++p) {
      if (!g.present[p]) continue;
      out.present[p] = true;
      for (Eigen::Index i = 0; i < g.tensors[p].size(); ++i) out.flat[layout.offset[p] + static_cast<std::size_t>(i)] += g.tensors[p](i);
    }
  };
  if (R == 1 && !models::ScalarTraits<S>::exact) {
    add(rank_grads[0]);  // one rank: no order to draw
    return;
  }
  if (R == 1) {  // exact: 0 + g is g, copied (a float sum with zero may turn -0 into +0, so it adds as before)
    const models::Gradient<S>& g = rank_grads[0];
    for (std::size_t p = 0; p < layout.offset.size(); ++p) {
      if (!g.present[p]) continue;
      out.present[p] = true;
      std::copy(g.tensors[p].data(), g.tensors[p].data() + g.tensors[p].size(),
                out.flat.begin() + static_cast<std::ptrdiff_t>(layout.offset[p]));
    }
    return;
  }
  const std::vector<int> order = arrival.permutation(R);  // drawn in every scalar, so the stream moves alike
  if constexpr (std::is_same_v<S, models::FastRational>) {
    // An exact sum does not depend on the order: each element's terms summed once over a common denominator
    // and divided by R (models::sum_divided_by), the value the additions below would give.
    thread_local std::vector<const S*> terms;
    for (std::size_t p = 0; p < layout.offset.size(); ++p) {
      for (const auto& g : rank_grads) out.present[p] = out.present[p] || g.present[p];
      if (!out.present[p]) continue;
      for (std::size_t i = 0; i < layout.size[p]; ++i) {
        terms.clear();
        for (const auto& g : rank_grads)
          if (g.present[p]) terms.push_back(&g.tensors[p](static_cast<Eigen::Index>(i)));
        out.flat[layout.offset[p] + i] = models::sum_divided_by(terms, R);
      }
    }
    return;
  }
  for (int r : order) add(rank_grads[static_cast<std::size_t>(r)]);
  const S rank_count(R);
  for (S& v : out.flat) v = v / rank_count;
}

template <class S>
ReducedGradient<S> average_over_ranks(const FlatLayout& layout, const std::vector<models::Gradient<S>>& rank_grads,
                                      Stream& arrival) {
  ReducedGradient<S> out;
  average_over_ranks_into(layout, rank_grads, arrival, out);
  return out;
}

}  // namespace accumcheck::sim
