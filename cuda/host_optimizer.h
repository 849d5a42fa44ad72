// The cuda-offload target's host optimizer: the step DeepSpeed's CPU Adam (deepspeed/ops/adam/cpu_adam.py, its C++
// kernel under csrc/adam) takes on the offloaded fp32 master parameters, an elementwise loop over the flat
// parameters split across host threads (OpenMP there, oneTBB here), with torch.optim's per-parameter bookkeeping.
//
// Bookkeeping first, on one thread, as models::optimizer_step does it: a parameter whose gradient is absent is
// skipped (or stepped on zeros under missing_gradient_is_zero, unless frozen), its step count advances, SGD's momentum
// buffer comes into being, and its constants (powers of the betas, a square root) are computed once per step count.
// Then every element of the stepped parameters, flattened in parameter order, in tiles of `tile` elements on
// oneTBB's threads, each by models::update_element. No element reads another, so the result equals
// models::optimizer_step exactly, whatever the thread count and the tile size (host_optimizer_test.cpp).
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "models/optimizer.h"

namespace accumcheck::cuda {

// torch.optim's bookkeeping of one step, on one thread: which parameters step (present[p], or every trainable one
// under missing_gradient_is_zero), their step counts and momentum buffers advanced in `state`, and each step
// count's constants computed once. The elements of the stepped parameters, flattened in parameter order, are
// [begin, begin + size) of each; `total` of them. host_optimizer_step applies it on the host, the cuda-resident
// fp32 targets on the device (resident.h).
template <class S>
struct OptimizerPlan {
  struct Stepped {
    std::size_t parameter, constants, begin;  // begin: the first element's flat index
  };
  std::vector<Stepped> stepped;
  std::vector<models::StepConstants<S>> constants;
  std::size_t total = 0;
};

template <class S>
OptimizerPlan<S> plan_optimizer_step(const models::OptimizerSpec& spec, const models::Parameters<S>& params,
                                     const std::vector<bool>& present, models::OptimizerState<S>& state,
                                     const std::vector<bool>& frozen) {
  ACCUMCHECK_ASSERT(params.size() == present.size() && params.size() == state.step_count.size());
  ACCUMCHECK_ASSERT(frozen.empty() || frozen.size() == params.size());
  OptimizerPlan<S> plan;
  std::vector<std::pair<long, bool>> keys;  // (step count, first momentum step) of plan.constants[i]
  for (std::size_t p = 0; p < params.size(); ++p) {
    const bool trainable = frozen.empty() || !frozen[p];
    if (!present[p] && !(spec.missing_gradient_is_zero && trainable)) continue;
    state.step_count[p] += 1;
    const std::pair<long, bool> key{state.step_count[p], !state.has_momentum_buffer[p]};
    auto found = std::find(keys.begin(), keys.end(), key);
    if (found == keys.end()) {
      plan.constants.push_back(models::step_constants<S>(spec, key.first, key.second));
      found = keys.insert(keys.end(), key);
    }
    if (spec.kind == models::OptimizerKind::sgd && spec.momentum.sign() != 0) state.has_momentum_buffer[p] = true;
    plan.stepped.push_back({p, static_cast<std::size_t>(found - keys.begin()), plan.total});
    plan.total += static_cast<std::size_t>(params.tensors[p].size());
  }
  return plan;
}

template <class S>
void host_optimizer_step(const models::OptimizerSpec& spec, models::Parameters<S>& params,
                         const models::Gradient<S>& grad, models::OptimizerState<S>& state,
                         const std::vector<bool>& frozen, std::size_t tile = 1024) {
  ACCUMCHECK_ASSERT(params.size() == grad.size());
  ACCUMCHECK_ASSERT(tile > 0);
  const OptimizerPlan<S> plan = plan_optimizer_step(spec, params, grad.present, state, frozen);
  const auto& stepped = plan.stepped;
  const auto& constants = plan.constants;
  const std::size_t total = plan.total;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, total, tile), [&](const tbb::blocked_range<std::size_t>& r) {
    // The stepped parameter holding element r.begin(), then onwards.
    auto at = std::upper_bound(stepped.begin(), stepped.end(), r.begin(),
                               [](std::size_t flat, const auto& s) { return flat < s.begin; }) - 1;
    for (std::size_t flat = r.begin(); flat != r.end(); ++flat) {
      while (flat >= at->begin + static_cast<std::size_t>(params.tensors[at->parameter].size())) ++at;
      const std::size_t p = at->parameter;
      const auto i = static_cast<Eigen::Index>(flat - at->begin);
      models::update_element(spec, constants[at->constants], params.tensors[p](i), grad.tensors[p](i),
                             state.first_moment[p](i), state.second_moment[p](i));
    }
  });
}

}  // namespace accumcheck::cuda
