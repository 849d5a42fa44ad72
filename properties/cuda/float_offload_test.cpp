// The fp32 variants of the offload target (cuda/offload_engine.h, cuda-offload-fp32...) on the CPU: the host twin,
// with the fp32 kernels' twins and an fp32 host, is clean under every property on all three models, every result
// within the bound the oracle derives, with rounding really seen; its unsynchronised twin is found; it computes in
// fp32 whatever a campaign asks; the pipeline's twin reads fp32 buffers as it reads the exact ones; and the fp32 sums
// become the gradient the kernels' layouts say.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "cuda/float_gradient.h"
#include "cuda/float_linear.h"
#include "cuda/float_models.h"
#include "cuda/random_linear_batch.h"
#include "models/model.h"
#include "properties/cuda/offload_campaign.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

TEST(FloatOffloadEngine, the_host_twin_is_clean_within_its_bounds_and_its_unsynchronised_twin_is_found) {
  for (const models::ModelKind model :
       {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
    const std::string kind(models::to_string(model));
    const fuzz::CampaignReport clean = run_offload_campaign("cuda-offload-fp32-host-twin", 400, 21, model);
    double worst = 0;
    for (const auto& p : clean.pairs) {
      EXPECT_FALSE(p.finding.has_value()) << kind << " " << p.property << ": "
                                          << (p.finding ? p.finding->verdict.message : "");
      EXPECT_EQ(p.target_faults, 0u) << kind << " " << p.property << ": " << p.first_fault;
      if (p.property == "accumulated_update_equals_full_batch_update") {
        EXPECT_GT(p.trials - p.cannot_run, 300u) << "property 1 ran on too few " << kind << " trials";
      }
      worst = std::max(worst, p.rounding.worst_ratio);
    }
    // The float runs were compared with bounds, and rounding showed: the check was not of exact values.
    EXPECT_GT(worst, 0.0) << kind;
    EXPECT_LE(worst, 1.0) << kind;
    std::cout << kind << ": clean; the largest rounding gap is " << worst << " of its bound\n";
    const fuzz::CampaignReport found = run_offload_campaign("cuda-offload-fp32-host-twin-nosync", 300, 21, model);
    bool any = false;
    for (const auto& p : found.pairs) any = any || p.finding.has_value();
    EXPECT_TRUE(any) << kind;
  }
}

TEST(FloatOffloadEngine, computes_in_fp32_whatever_a_campaign_asks_and_refuses_16_bit_storage) {
  register_offload_engines();
  const auto target = sim::make_target("cuda-offload-fp32-host-twin");
  EXPECT_EQ(target->fixed_scalar(), sim::ScalarKind::fp32);
  EXPECT_EQ(sim::make_target("cuda-offload-host-twin")->fixed_scalar(), std::nullopt);
  sim::Scenario s = fuzz::generate_scenario(5, fuzz::GeneratorOptions{.model = models::ModelKind::linear});
  EXPECT_THROW(target->run(s, sim::RunOptions{.scalar = sim::ScalarKind::fast_rational}), std::invalid_argument);
  EXPECT_NO_THROW(target->run(s, sim::RunOptions{.scalar = sim::ScalarKind::fp32}));
  EXPECT_EQ(fuzz::scalar_for(*target, sim::ScalarKind::fast_rational), sim::ScalarKind::fp32);
  s.engine.precision = sim::Precision::bf16;
  EXPECT_NE(target->unsupported(s).find("no 16-bit storage"), std::string::npos);
  std::string why;
  if (!device_available(&why)) {
    s.engine.precision = sim::Precision::full;
    for (const char* name : {"cuda-offload-fp32", "cuda-offload-fp32-nosync"})
      EXPECT_NE(sim::make_target(name)->unsupported(s).find("no CUDA device ("), std::string::npos) << name;
  }
}

TEST(FloatOffloadEngine, the_pipeline_twin_reads_fp32_buffers_in_order_or_late) {
  std::mt19937_64 rng(31);
  models::ModelSpec spec;
  spec.input_size = 3;
  spec.output_size = 2;
  std::vector<FloatLinearBatch> window;
  for (int j = 0; j < 5; ++j) {
    const RandomBatch r = random_batch(rng, spec, 2, 4);
    const std::vector<int> group = {0, 1};
    window.push_back(lay_out_float(r.spec, r.params, r.sequences, group, 2, FloatStorage::fp32));
  }
  std::vector<std::vector<float>> seen;
  const auto record = [&](std::size_t, const float* sums) {
    seen.emplace_back(sums, sums + window.front().sum_count());
  };
  run_host_pipeline(window, draw_schedule(3, 5, true), record);
  ASSERT_EQ(seen.size(), 5u);
  for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(seen[j], host_float_sums(window[j])) << j;
  // Unsynchronised: a delayed micro-batch is read from the buffer it shares with micro-batch j - 2 (zeros at first).
  PipelineSchedule late = draw_schedule(3, 5, false);
  late.delay_ns = {0, 0, 0, 1000, 0};
  seen.clear();
  run_host_pipeline(window, late, record);
  EXPECT_EQ(seen[3], host_float_sums(window[1]));
  EXPECT_EQ(seen[4], host_float_sums(window[4]));
}

TEST(FloatOffloadEngine, the_fp32_sums_become_the_gradient_of_each_model) {
  // Coefficients and values that fp32 holds exactly, and sums that round nowhere (a handful of small dyadic
  // products): the fp32 gradient equals the exact kernels' gradient of the same micro-batch, entry for entry.
  std::mt19937_64 rng(32);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::uniform_int_distribution<int> size(1, 3), sequences(1, 3);
    const models::ModelKind kinds[] = {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding};
    const int a = size(rng), b = size(rng), c3 = size(rng);
    models::ModelSpec spec = kinds[trial % 3] == models::ModelKind::mlp ? mlp_spec(a, b, c3)
                             : kinds[trial % 3] == models::ModelKind::tied_embedding ? tied_spec(a + 1, b)
                                                                                       : models::ModelSpec{};
    if (spec.kind == models::ModelKind::linear) {
      spec.input_size = a;
      spec.output_size = b;
      spec.expert_count = c3;
    }
    RandomBatch r = random_batch(rng, spec, sequences(rng), 3);
    truncate_to_integers(r);  // so that no fp32 operation rounds (every sum stays far below 2^24)
    const RandomGroups groups = random_groups(rng, r.sequences.size());
    std::vector<float> c;
    std::vector<Rational> exact_c;
    for (std::size_t g = 0; g < groups.coefficient.size(); ++g) {
      exact_c.push_back(Rational(static_cast<long long>(g) + 1, 2));  // 1/2, 1, 3/2: fp32 numbers
      c.push_back(static_cast<float>(exact_c.back().to_double()));
    }
    const auto& group = groups.of_sequence;
    const int count = groups.count;
    models::Gradient<float> got;
    if (spec.kind == models::ModelKind::mlp) {
      const auto b = lay_out_float_mlp(r.spec, r.params, r.sequences, group, count, FloatStorage::fp32);
      got = to_float_gradient(r.spec, b, host_float_mlp_sums(b), c);
    } else if (spec.kind == models::ModelKind::tied_embedding) {
      const auto b = lay_out_float_tied(r.spec, r.params, r.sequences, group, count, FloatStorage::fp32);
      got = to_float_gradient(r.spec, b, host_float_tied_sums(b), c);
    } else {
      const auto b = lay_out_float(r.spec, r.params, r.sequences, group, count, FloatStorage::fp32);
      got = to_float_gradient(r.spec, b, host_float_sums(b), c);
    }
    const models::Gradient<Rational> expected = kernel_reference(r, group, exact_c);
    ASSERT_EQ(got.present, expected.present) << "trial " << trial;
    for (std::size_t p = 0; p < got.size(); ++p)
      for (Eigen::Index i = 0; i < got.tensors[p].size(); ++i, ++compared)
        ASSERT_EQ(Rational(mpq_class(static_cast<double>(got.tensors[p](i)))), expected.tensors[p](i))
            << "trial " << trial << " tensor " << p << " element " << i;
  }
  EXPECT_GT(compared, 300);
  const models::ModelSpec linear;
  const FloatLinearBatch empty;
  EXPECT_THROW(to_float_gradient(linear, empty, std::vector<float>(3), std::vector<float>(1)), std::invalid_argument);
}

}  // namespace
}  // namespace accumcheck::cuda
