// The cuda-offload target's host optimizer (cuda/host_optimizer.h): oneTBB's threads stepping the flattened
// parameters in tiles give exactly models::optimizer_step, for SGD (momentum, dampening, Nesterov, decay), Adam and
// AdamW, over several steps with absent gradients, frozen parameters and missing gradients as zeros, in Rational and
// FastRational, on 1, 2 and 4 threads and tiles of 1, 3 and 1024 elements.
#include <gtest/gtest.h>

#include <tbb/task_arena.h>

#include <random>

#include "cuda/host_optimizer.h"
#include "models/fast_rational.h"
#include "models/model.h"
#include "models/optimizer.h"
#include "properties/generators/optimizer_corners.h"

namespace accumcheck::cuda {
namespace {

using models::FastRational;
using models::OptimizerKind;
using models::OptimizerSpec;
using models::Rational;

template <class S>
S draw(std::mt19937_64& rng) {
  std::uniform_int_distribution<long long> numerator(-64, 64);
  std::uniform_int_distribution<int> bits(0, 6);
  return models::from_rational<S>(Rational(numerator(rng), 1LL << bits(rng)));
}

template <class S>
void check_equals_models_step(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::uniform_int_distribution<int> size(1, 9), experts(1, 3), coin(0, 3);
    models::ModelSpec spec{.kind = models::ModelKind::linear, .input_size = size(rng), .output_size = size(rng)};
    spec.expert_count = experts(rng);
    models::Parameters<S> params = models::zero_parameters<S>(spec);
    for (auto& t : params.tensors)
      for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = draw<S>(rng);
    std::vector<bool> frozen(params.size());
    for (std::size_t p = 0; p < frozen.size(); ++p) frozen[p] = coin(rng) == 0;
    for (const OptimizerSpec& spec_opt : properties::optimizer_corners()) {
      models::Parameters<S> expected_params = params;
      models::OptimizerState<S> expected_state = models::initial_optimizer_state<S>(spec);
      for (int step = 0; step < 3; ++step) {
        // Each step its own gradient and its own absent tensors, so that step counts (and constants) differ.
        models::Gradient<S> grad = models::zero_gradient<S>(spec);
        for (std::size_t p = 0; p < grad.size(); ++p) {
          grad.present[p] = !frozen[p] && coin(rng) != 0;
          if (grad.present[p])
            for (Eigen::Index i = 0; i < grad.tensors[p].size(); ++i) grad.tensors[p](i) = draw<S>(rng);
        }
        const models::Parameters<S> before = expected_params;
        const models::OptimizerState<S> state_before = expected_state;
        models::optimizer_step(spec_opt, expected_params, grad, expected_state, frozen);
        for (const int threads : {1, 2, 4})
          for (const std::size_t tile : {std::size_t{1}, std::size_t{3}, std::size_t{1024}}) {
            models::Parameters<S> got = before;
            models::OptimizerState<S> state = state_before;
            tbb::task_arena(threads).execute([&] { host_optimizer_step(spec_opt, got, grad, state, frozen, tile); });
            ASSERT_TRUE(models::tensor_lists_equal(got.tensors, expected_params.tensors))
                << "trial " << trial << " step " << step << " optimizer " << models::to_string(spec_opt.kind)
                << " threads " << threads << " tile " << tile;
            ASSERT_EQ(state, expected_state) << "trial " << trial << " step " << step;
            ++compared;
          }
      }
    }
  }
  EXPECT_EQ(compared, 40 * static_cast<int>(properties::optimizer_corners().size()) * 3 * 9);
}

TEST(HostOptimizer, equals_models_step_in_rational) { check_equals_models_step<Rational>(20261210); }

TEST(HostOptimizer, equals_models_step_in_fast_rational) { check_equals_models_step<FastRational>(20261211); }

TEST(HostOptimizer, steps_parameters_whose_step_counts_differ_with_their_own_constants) {
  // Two scalars under Adam: the weight stepped twice, the bias (absent the first time) once. Its second step's bias
  // corrections (1 - b^2) differ from the bias's first (1 - b), so one shared set of constants would be wrong.
  models::ModelSpec spec{.kind = models::ModelKind::linear, .input_size = 1, .output_size = 1};
  const OptimizerSpec adam{.kind = OptimizerKind::adam, .lr = Rational(1, 4)};
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  models::OptimizerState<Rational> state = models::initial_optimizer_state<Rational>(spec);
  models::Gradient<Rational> grad = models::zero_gradient<Rational>(spec);
  grad.tensors[0](0, 0) = Rational(1);
  grad.tensors[1](0, 0) = Rational(1);
  grad.present = {true, false};
  host_optimizer_step(adam, params, grad, state, {}, 1);
  grad.present = {true, true};
  host_optimizer_step(adam, params, grad, state, {}, 1);
  EXPECT_EQ(state.step_count, (std::vector<long>{2, 1}));
  // With a constant gradient Adam's first steps move by lr (to within eps and the 2^-64 rounding): the bias, on its
  // first step, by the same amount as the weight did on its first.
  models::Parameters<Rational> reference = models::zero_parameters<Rational>(spec);
  models::OptimizerState<Rational> reference_state = models::initial_optimizer_state<Rational>(spec);
  grad.present = {true, false};
  models::optimizer_step(adam, reference, grad, reference_state);
  grad.present = {true, true};
  models::optimizer_step(adam, reference, grad, reference_state);
  EXPECT_TRUE(models::tensor_lists_equal(params.tensors, reference.tensors));
}

}  // namespace
}  // namespace accumcheck::cuda
