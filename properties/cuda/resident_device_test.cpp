// The cuda-resident window on a device (cuda/window_step.cu): the exact accumulation and SGD step equal their CPU twin, the fp32
// accumulation and optimizer step equal theirs bit for bit, whatever the launch configuration; the resident targets
// equal their twins on random scenarios and are clean under every property. Without a device every test skips,
// saying why.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <optional>
#include <random>

#include "cuda/device.h"
#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/float_linear.h"
#include "cuda/float_models.h"
#include "cuda/random_linear_batch.h"
#include "cuda/resident.h"
#include "fuzz/generator.h"
#include "properties/cuda/offload_campaign.h"
#include "properties/cuda/skip_without_device.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

const LaunchConfig kLaunches[] = {{32, 1}, {64, 3}, {128, 0}, {256, 7}, {1024, 1024}};

models::ModelSpec spec_of(int trial, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> size(1, 5);
  const int a = size(rng), b = size(rng), c = size(rng);
  if (trial % 3 == 1) return mlp_spec(a, b, c);
  if (trial % 3 == 2) return tied_spec(a + 1, b);
  models::ModelSpec spec;
  spec.input_size = a, spec.output_size = b, spec.expert_count = 1 + c % 3;
  return spec;
}

// A random window of trial's model: up to 8 sequences of up to 6 tokens, each sequence its own group.
struct RandomWindow {
  RandomBatch r;
  std::vector<int> group;
  int groups;
};
RandomWindow random_window(int trial, std::mt19937_64& rng) {
  const models::ModelSpec spec = spec_of(trial, rng);
  RandomBatch r = random_batch(rng, spec, 1 + static_cast<int>(rng() % 8), 6);
  std::vector<int> group = one_group_per_sequence(r.sequences.size());
  const int groups = std::max<int>(1, static_cast<int>(r.sequences.size()));
  return {std::move(r), std::move(group), groups};
}

TEST(ResidentDevice, the_exact_window_and_sgd_step_equal_their_twin_in_every_launch_configuration) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(51);
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const auto [r, group, groups] = random_window(trial, rng);
    const models::ModelSpec& spec = r.spec;
    std::vector<Rational> c;
    for (int g = 0; g < groups; ++g) c.push_back(Rational(1 + static_cast<long long>(rng() % 9), 1 + static_cast<long long>(rng() % 7)));
    // SGD with momentum, its buffer drawn at random, so that every term of the exact step is exercised.
    models::OptimizerSpec sgd;
    sgd.momentum = Rational(9LL, 10LL);
    sgd.nesterov = trial % 2 == 0;
    sgd.weight_decay = Rational(1LL, 10LL);
    models::OptimizerState<Rational> state = models::initial_optimizer_state<Rational>(r.spec);
    for (std::size_t p = 0; p < state.first_moment.size(); ++p) {
      for (Eigen::Index i = 0; i < state.first_moment[p].size(); ++i)
        state.first_moment[p](i) = Rational(static_cast<long long>(rng() % 17) - 8, 1 + static_cast<long long>(rng() % 5));
      state.step_count[p] = 1;
      state.has_momentum_buffer[p] = true;
    }
    const auto check = [&](const auto& batch) {
      const ExactWindowPlan plan = plan_exact_window(batch, c);
      const std::vector<Int256> twin = host_exact_window(batch, plan.device);
      for (const LaunchConfig launch : kLaunches) ASSERT_EQ(device_exact_window(batch, plan.device, launch), twin) << trial;
      const auto step_of = [&](const std::vector<Int256>&) -> std::optional<ExactSgdStep> {
        models::OptimizerState<Rational> s = state;
        const OptimizerPlan<Rational> bookkeeping =
            plan_optimizer_step(sgd, r.params, std::vector<bool>(r.params.size(), true), s, {});
        return plan_exact_sgd_step(sgd, bookkeeping, batch, plan, r.params, state, Rational(1LL, 3LL)).device;
      };
      ExactSgdResult twin_step;
      host_exact_window_step(batch, plan.device, step_of, twin_step);
      for (const LaunchConfig launch : kLaunches) {
        ExactSgdResult device_step;
        ASSERT_EQ(device_exact_window_step(batch, plan.device, step_of, device_step, launch), twin) << trial;
        ASSERT_EQ(device_step.param, twin_step.param) << trial;
        ASSERT_EQ(device_step.buffer, twin_step.buffer) << trial;
        ASSERT_EQ(device_step.overflow, twin_step.overflow) << trial;
      }
      ++compared;
    };
    try {
      if (spec.kind == models::ModelKind::mlp) check(lay_out_mlp(r.spec, r.params, r.sequences, group, groups));
      else if (spec.kind == models::ModelKind::tied_embedding) check(lay_out_tied(r.spec, r.params, r.sequences, group, groups));
      else check(lay_out(r.spec, r.params, r.sequences, group, groups));
    } catch (const ExactRangeError&) {
    }
  }
  std::printf("the exact window and SGD step equal their twin on %d random windows, in %zu launch configurations each\n", compared,
              std::size(kLaunches));
  EXPECT_GT(compared, 100);
}

TEST(ResidentDevice, the_fp32_window_and_step_equal_their_twin_bit_for_bit) {
  SKIP_WITHOUT_DEVICE();
  std::mt19937_64 rng(52);
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const auto [r, group, groups] = random_window(trial, rng);
    const models::ModelSpec& spec = r.spec;
    FloatWindow window;
    for (int g = 0; g < groups; ++g) window.coefficients.push_back(1.0f / static_cast<float>(1 + rng() % 7));
    for (int g = 1; g <= groups; ++g)
      if (g == groups || rng() % 2) window.micro_batch_end.push_back(g);
    models::OptimizerSpec optimizer;
    optimizer.kind = static_cast<models::OptimizerKind>(trial % 3);
    const auto check = [&](const auto& batch) {
      models::Parameters<float> params;
      for (const auto& t : r.params.tensors) params.tensors.push_back(t.unaryExpr([](const Rational& v) { return static_cast<float>(v.to_double()); }));
      models::OptimizerState<float> state = models::initial_optimizer_state<float>(r.spec);
      const OptimizerPlan<float> plan =
          plan_optimizer_step(optimizer, params, std::vector<bool>(params.size(), true), state, {});
      const FloatStepPlan step = float_step_plan(optimizer, plan, batch, params);
      const ClipOf clip = [](const std::vector<float>&) { return std::optional<float>(0.5f); };
      FloatStepState twin_state = load_float_step(plan, params, state);
      const std::vector<float> twin = host_float_window_step(batch, window, step, twin_state, clip);
      for (const LaunchConfig launch : kLaunches) {
        FloatStepState device_state = load_float_step(plan, params, state);
        const std::vector<float> got = device_float_window_step(batch, window, step, device_state, clip, launch);
        ASSERT_EQ(got.size(), twin.size());
        for (std::size_t e = 0; e < got.size(); ++e)
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[e]), std::bit_cast<std::uint32_t>(twin[e])) << trial << " entry " << e;
        for (std::size_t i = 0; i < twin_state.theta.size(); ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(device_state.theta[i]), std::bit_cast<std::uint32_t>(twin_state.theta[i])) << trial;
          ASSERT_EQ(std::bit_cast<std::uint32_t>(device_state.first[i]), std::bit_cast<std::uint32_t>(twin_state.first[i])) << trial;
          ASSERT_EQ(std::bit_cast<std::uint32_t>(device_state.second[i]), std::bit_cast<std::uint32_t>(twin_state.second[i])) << trial;
        }
      }
      ++compared;
    };
    if (spec.kind == models::ModelKind::mlp) check(lay_out_float_mlp(r.spec, r.params, r.sequences, group, groups, FloatStorage::fp32));
    else if (spec.kind == models::ModelKind::tied_embedding) check(lay_out_float_tied(r.spec, r.params, r.sequences, group, groups, FloatStorage::fp32));
    else check(lay_out_float(r.spec, r.params, r.sequences, group, groups, FloatStorage::fp32));
  }
  std::printf("the fp32 window and step equal their twin on %d random windows, in %zu launch configurations each\n",
              compared, std::size(kLaunches));
  EXPECT_EQ(compared, 150);
}

TEST(ResidentDevice, the_resident_targets_equal_their_twins_and_are_clean) {
  SKIP_WITHOUT_DEVICE();
  register_offload_engines();
  for (const auto& [device_name, twin_name, scalar] :
       {std::tuple{"cuda-resident", "cuda-resident-host-twin", sim::ScalarKind::rational},
        std::tuple{"cuda-resident-fp32", "cuda-resident-fp32-host-twin", sim::ScalarKind::fp32}}) {
    const auto device = sim::make_target(device_name), twin = sim::make_target(twin_name);
    for (const models::ModelKind model : {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
      fuzz::GeneratorOptions options;
      options.model = model;
      int compared = 0;
      for (std::uint64_t seed = 0; seed < 150; ++seed) {
        const sim::Scenario s = fuzz::generate_scenario(seed, options);
        std::optional<sim::RunResult> b;
        try {
          b = twin->run(s, sim::RunOptions{.scalar = scalar});
        } catch (const std::exception&) {
          EXPECT_ANY_THROW(device->run(s, sim::RunOptions{.scalar = scalar})) << device_name << " seed " << seed;
          continue;
        }
        const sim::RunResult a = device->run(s, sim::RunOptions{.scalar = scalar});
        EXPECT_TRUE(models::tensor_lists_equal(a.parameters.tensors, b->parameters.tensors)) << device_name << " seed " << seed;
        EXPECT_EQ(a.optimizer_state, b->optimizer_state) << device_name << " seed " << seed;
        EXPECT_EQ(a.trace_digest, b->trace_digest) << device_name << " seed " << seed;
        ++compared;
      }
      std::printf("%s equals its CPU twin on %d of 150 random %s scenarios\n", device_name, compared,
                  std::string(models::to_string(model)).c_str());
      EXPECT_GT(compared, 60);
      const fuzz::CampaignReport report = run_offload_campaign(device_name, 100, 20261206, model);
      for (const auto& p : report.pairs) {
        EXPECT_FALSE(p.finding.has_value()) << device_name << " " << p.property << ": "
                                            << (p.finding ? p.finding->verdict.message : "");
        EXPECT_EQ(p.target_faults, 0u) << device_name << " " << p.property << ": " << p.first_fault;
      }
    }
  }
}

}  // namespace
}  // namespace accumcheck::cuda
