// The cuda-resident targets' window on the CPU (cuda/window_step.h, cuda/resident.h): the Int256 accumulator against
// GMP; the fp32 step element against models::update_element<float>, bit for bit; the exact window's gradient against
// models/'s backward; the resident twins equal to the offload twins (the same results, exact, and bit for bit in
// fp32) and clean under every property; the refusals.
#include <gtest/gtest.h>

#include <gmpxx.h>

#include <bit>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>

#include "cuda/exact_linear.h"
#include "cuda/exact_mlp.h"
#include "cuda/exact_tied.h"
#include "cuda/random_linear_batch.h"
#include "cuda/resident.h"
#include "fuzz/generator.h"
#include "models/optimizer.h"
#include "properties/cuda/offload_campaign.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

mpz_class to_mpz(Int128 v) { return to_rational(v).mpq().get_num(); }

TEST(ResidentWindow, the_int256_accumulator_equals_gmp) {
  std::mt19937_64 rng(41);
  const Int128 max128 = static_cast<Int128>(~static_cast<UInt128>(0) >> 1);
  const std::int64_t edge64[] = {0, 1, -1, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min() + 1,
                                 std::numeric_limits<std::int64_t>::min()};
  const Int128 edge128[] = {0, 1, -1, max128, -max128, -max128 - 1, static_cast<Int128>(1) << 121};
  for (int trial = 0; trial < 2000; ++trial) {
    Int256 acc;
    mpz_class expected = 0;
    const int terms = 1 + static_cast<int>(rng() % 40);
    for (int t = 0; t < terms; ++t) {
      const std::int64_t m = trial % 4 == 0 ? edge64[rng() % 6] : static_cast<std::int64_t>(rng()) >> (rng() % 64);
      const Int128 s = trial % 4 == 1 ? edge128[rng() % 7]
                                      : static_cast<Int128>((static_cast<UInt128>(rng()) << 64) | rng()) >> (rng() % 128);
      add_product(acc, m, s);
      expected += mpz_class(std::to_string(m)) * to_mpz(s);
    }
    ASSERT_EQ(to_rational(acc), Rational(expected)) << "trial " << trial;
  }
}

// An Int256 of up to `bits` bits, either sign, and its value.
Int256 random_int256(std::mt19937_64& rng, int bits, mpz_class& value) {
  value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 64) + mpz_class(std::to_string(rng()));
  value >>= 256 - bits;
  if (rng() % 2) value = -value;
  Int256 out;
  mpz_class twos = value < 0 ? value + (mpz_class(1) << 256) : value;
  for (int i = 0; i < 4; ++i) {
    const mpz_class limb = twos & ((mpz_class(1) << 64) - 1);
    out.limb[i] = std::stoull(limb.get_str());
    twos >>= 64;
  }
  return out;
}

TEST(ResidentWindow, the_checked_int256_multiply_add_equals_gmp_and_refuses_what_leaves_256_bits) {
  std::mt19937_64 rng(45);
  const mpz_class limit = mpz_class(1) << 255;
  int refused = 0, done = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    mpz_class a, m, x;
    Int256 acc = random_int256(rng, 1 + static_cast<int>(rng() % 255), a);
    const Int256 mi = random_int256(rng, 1 + static_cast<int>(rng() % 200), m);
    const Int256 xi = random_int256(rng, 1 + static_cast<int>(rng() % 200), x);
    const Int256 before = acc;
    const mpz_class expected = a + m * x;
    const bool fits = abs(mpz_class(m * x)) < limit && expected < limit && expected >= -limit;
    const bool ok = add_scaled(acc, mi, xi);
    ASSERT_EQ(ok, fits) << "trial " << trial;
    if (ok) ASSERT_EQ(to_rational(acc), Rational(expected)) << "trial " << trial;
    else ASSERT_EQ(acc, before) << "trial " << trial;
    (ok ? done : refused) += 1;
  }
  EXPECT_GT(done, 800);
  EXPECT_GT(refused, 800);
}

// A random element and spec: every optimizer, with and without decay, momentum, dampening, nesterov; step counts
// 1 to 4; values of mixed magnitude.
TEST(ResidentWindow, the_fp32_step_element_equals_models_update_element_bit_for_bit) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const Rational lrs[] = {Rational(1LL, 10LL), Rational(1LL, 8LL), Rational(3LL, 1000LL)};
  int compared = 0, moved = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    models::OptimizerSpec spec;
    spec.kind = static_cast<models::OptimizerKind>(trial % 3);
    spec.lr = lrs[rng() % 3];
    if (rng() % 2) spec.weight_decay = Rational(1LL, 100LL);
    if (spec.kind == models::OptimizerKind::sgd && rng() % 2) {
      spec.momentum = Rational(9LL, 10LL);
      if (rng() % 2) spec.dampening = Rational(1LL, 10LL);
      else spec.nesterov = rng() % 2;
    }
    const long step = 1 + static_cast<long>(rng() % 4);
    const bool first_momentum = rng() % 2;
    const models::StepConstants<float> k = models::step_constants<float>(spec, step, first_momentum);
    const FloatStepConstants device_k = to_float_step_constants(spec, k);
    float theta = value(rng) * (rng() % 2 ? 1.0f : 1e-3f), g = value(rng) * (rng() % 2 ? 1.0f : 1e-4f);
    float first = value(rng), second = std::abs(value(rng));
    const float theta0 = theta;
    float t2 = theta, f2 = first, s2 = second;
    models::update_element(spec, k, theta, g, first, second);
    float_step_element(device_k, t2, g, f2, s2);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(theta), std::bit_cast<std::uint32_t>(t2)) << "trial " << trial;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(first), std::bit_cast<std::uint32_t>(f2)) << "trial " << trial;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(second), std::bit_cast<std::uint32_t>(s2)) << "trial " << trial;
    ++compared;
    moved += t2 != theta0;
  }
  EXPECT_EQ(compared, 3000);
  EXPECT_GT(moved, 2500);  // the steps changed the parameter: the comparison was not of untouched values
}

// Micro-batches of one model laid out as one window batch, sequence i a group with a rational coefficient that is
// not dyadic: the window's gradient equals models/'s backward with those coefficients.
TEST(ResidentWindow, the_exact_window_gradient_equals_the_models_backward) {
  std::mt19937_64 rng(43);
  int compared = 0, nonzero = 0;
  for (int trial = 0; trial < 240; ++trial) {
    std::uniform_int_distribution<int> size(1, 4), sequences(1, 6);
    const int a = size(rng), b = size(rng), c = size(rng);
    models::ModelSpec spec;
    if (trial % 3 == 1) spec = mlp_spec(a, b, c);
    else if (trial % 3 == 2) spec = tied_spec(a + 1, b);
    else spec.input_size = a, spec.output_size = b, spec.expert_count = 1 + c % 3;
    const RandomBatch r = random_batch(rng, spec, sequences(rng), 5);
    const std::vector<int> group = one_group_per_sequence(r.sequences.size());
    const int groups = std::max<int>(1, static_cast<int>(r.sequences.size()));
    std::vector<Rational> coefficient;
    for (int g = 0; g < groups; ++g)
      coefficient.push_back(Rational(static_cast<long long>(rng() % 19) - 9, 1 + static_cast<long long>(rng() % 7)));
    models::Gradient<Rational> got;
    const auto run = [&](const auto& batch) {
      const ExactWindowPlan plan = plan_exact_window(batch, coefficient);
      const std::vector<Int256> sums = host_exact_window(batch, plan.device);
      got = window_gradient(r.spec, batch, sums, plan);
    };
    try {
      if (spec.kind == models::ModelKind::mlp) run(lay_out_mlp(r.spec, r.params, r.sequences, group, groups));
      else if (spec.kind == models::ModelKind::tied_embedding) run(lay_out_tied(r.spec, r.params, r.sequences, group, groups));
      else run(lay_out(r.spec, r.params, r.sequences, group, groups));
    } catch (const ExactRangeError&) {
      continue;  // the layouts' own refusals, tested with the kernels
    }
    const models::Gradient<Rational> expected = kernel_reference(r, group, coefficient);
    for (std::size_t p = 0; p < got.size(); ++p)
      for (Eigen::Index i = 0; i < got.tensors[p].size(); ++i, ++compared) {
        ASSERT_EQ(got.tensors[p](i), expected.tensors[p](i)) << "trial " << trial << " tensor " << p << " element " << i;
        nonzero += got.tensors[p](i).sign() != 0;
      }
  }
  std::cout << compared << " entries compared, " << nonzero << " non-zero\n";
  EXPECT_GT(compared, 3000);
  EXPECT_GT(nonzero, 1000);
}

// Random windows of the three models stepped by SGD (decay, momentum, dampening, Nesterov, a clip coefficient) three
// times in integers: each step equals models::optimizer_step on the window's gradient, parameters and momentum
// buffers alike.
TEST(ResidentWindow, the_exact_sgd_step_equals_models_optimizer_step) {
  std::mt19937_64 rng(46);
  int steps = 0, with_buffer = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::uniform_int_distribution<int> size(1, 4);
    const int a = size(rng), b = size(rng), c = size(rng);
    models::ModelSpec spec;
    if (trial % 3 == 1) spec = mlp_spec(a, b, c);
    else if (trial % 3 == 2) spec = tied_spec(a + 1, b);
    else spec.input_size = a, spec.output_size = b, spec.expert_count = 1 + c % 3;
    RandomBatch r = random_batch(rng, spec, 1 + static_cast<int>(rng() % 5), 4);
    // Integer values in half the trials: the sums' denominators stay small, so the stepped parameters fit the next
    // layout and the momentum buffer is read on later steps.
    if (trial % 4 < 2) truncate_to_integers(r);
    // Half the trials dyadic throughout (their denominators stay powers of two, so more steps fit the layout), half
    // with tenths, thirds and token-count reciprocals.
    const bool dyadic = trial % 2 == 0;
    models::OptimizerSpec optimizer;
    optimizer.lr = Rational(1LL, 1LL << (1 + rng() % 5));
    if (rng() % 2) optimizer.weight_decay = dyadic ? Rational(1LL, 8LL) : Rational(1LL, 10LL);
    if (rng() % 3) {
      optimizer.momentum = dyadic ? Rational(3LL, 4LL) : Rational(9LL, 10LL);
      if (rng() % 2) optimizer.dampening = Rational(1LL, 4LL);
      else optimizer.nesterov = rng() % 2;
    }
    const Rational clip = rng() % 2 ? Rational(1) : dyadic ? Rational(1LL, 2LL) : Rational(2LL, 3LL);
    models::OptimizerState<Rational> state = models::initial_optimizer_state<Rational>(r.spec);
    models::Parameters<Rational> reference_params = r.params;
    models::OptimizerState<Rational> reference_state = state;
    const std::vector<int> group = one_group_per_sequence(r.sequences.size());
    const int groups = std::max<int>(1, static_cast<int>(r.sequences.size()));
    std::vector<Rational> coefficient;
    for (int g = 0; g < groups; ++g)
      coefficient.push_back(dyadic ? Rational(1LL, 1LL << (rng() % 3)) : Rational(1LL, 1 + static_cast<long long>(rng() % 5)));
    for (int step = 0; step < 3; ++step) {
      const auto run = [&](const auto& batch) {
        const ExactWindowPlan plan = plan_exact_window(batch, coefficient);
        std::optional<OptimizerPlan<Rational>> bookkeeping;
        ExactSgdPlan sgd;
        models::Gradient<Rational> grad;
        const ExactStepOf step_of = [&](const std::vector<Int256>& sums) -> std::optional<ExactSgdStep> {
          grad = window_gradient(r.spec, batch, sums, plan);
          std::fill(grad.present.begin(), grad.present.end(), true);
          bookkeeping = plan_optimizer_step(optimizer, r.params, grad.present, state, {});
          sgd = plan_exact_sgd_step(optimizer, *bookkeeping, batch, plan, r.params, state, clip);
          return sgd.device;
        };
        ExactSgdResult result;
        host_exact_window_step(batch, plan.device, step_of, result);
        store_exact_sgd_step(*bookkeeping, sgd, result, r.params, state);
        for (auto& t : grad.tensors) t *= clip;
        models::optimizer_step(optimizer, reference_params, grad, reference_state);
      };
      try {
        if (spec.kind == models::ModelKind::mlp) run(lay_out_mlp(r.spec, r.params, r.sequences, group, groups));
        else if (spec.kind == models::ModelKind::tied_embedding) run(lay_out_tied(r.spec, r.params, r.sequences, group, groups));
        else run(lay_out(r.spec, r.params, r.sequences, group, groups));
      } catch (const ExactRangeError&) {
        break;  // the stepped parameters' denominators passed the layout's range
      }
      ASSERT_TRUE(models::tensor_lists_equal(r.params.tensors, reference_params.tensors)) << "trial " << trial << " step " << step;
      ASSERT_EQ(state, reference_state) << "trial " << trial << " step " << step;
      ++steps;
      with_buffer += step > 0 && optimizer.momentum.sign() != 0;
    }
  }
  std::cout << steps << " exact SGD steps equal models::optimizer_step, " << with_buffer << " of them with a momentum buffer\n";
  EXPECT_GT(steps, 250);
  EXPECT_GT(with_buffer, 50);
}

TEST(ResidentWindow, a_multiplier_past_63_bits_is_refused_and_a_hand_window_is_exact) {
  // One input and output, one token x = 1/2, y = 0, W = 1, b = 0: r = 1/2, so dW = c/4 and db = c/2 per sequence.
  models::ModelSpec spec;
  models::Parameters<Rational> params{{models::Matrix<Rational>::Constant(1, 1, Rational(1)),
                                       models::Matrix<Rational>::Constant(1, 1, Rational(0))}};
  models::Sequence<Rational> seq{models::Matrix<Rational>::Constant(1, 1, Rational(1LL, 2LL)), {},
                                 {}, models::Matrix<Rational>::Constant(1, 1, Rational(0)), {1}};
  const std::vector<models::Sequence<Rational>> two = {seq, seq};
  const ExactLinearBatch batch = lay_out(spec, params, two, std::vector<int>{0, 1}, 2);
  const std::vector<Rational> c = {Rational(1LL, 3LL), Rational(2LL, 5LL)};
  const ExactWindowPlan plan = plan_exact_window(batch, c);
  const models::Gradient<Rational> g = window_gradient(spec, batch, host_exact_window(batch, plan.device), plan);
  EXPECT_EQ(g.tensors[0](0, 0), (Rational(1LL, 3LL) + Rational(2LL, 5LL)) / Rational(4));
  EXPECT_EQ(g.tensors[1](0, 0), (Rational(1LL, 3LL) + Rational(2LL, 5LL)) / Rational(2));
  // Coprime denominators near 2^32 and a numerator of 2^40: the second multiplier is 2^40 times the first
  // denominator, past 2^63.
  const std::vector<Rational> wide = {Rational(1LL, 4294967291LL), Rational(1099511627776LL, 4294967279LL)};
  try {
    plan_exact_window(batch, wide);
    ADD_FAILURE() << "no refusal";
  } catch (const ExactRangeError& e) {
    EXPECT_EQ(e.limit(), ExactLimit::multiplier) << e.what();
  }
  EXPECT_THROW(plan_exact_window(batch, std::vector<Rational>{Rational(1)}), std::invalid_argument);
}

// Runs `a` and `b` on the random scenarios of `seeds` seeds of `model`: where both run, their results are equal. `a`
// runs only where `b` does; with `same_refusals`, `b` only where `a` does too.
int compare_targets(const std::string& a, const std::string& b, models::ModelKind model, sim::ScalarKind scalar,
                    int seeds, bool same_refusals) {
  register_offload_engines();
  const auto ta = sim::make_target(a), tb = sim::make_target(b);
  fuzz::GeneratorOptions options;
  options.model = model;
  int compared = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    const sim::Scenario s = fuzz::generate_scenario(static_cast<std::uint64_t>(seed), options);
    std::optional<sim::RunResult> ra, rb;
    // A refusal: a value out of the integers' range, or an fp32 run that overflows (Rational::from_double).
    try {
      ra = ta->run(s, sim::RunOptions{.scalar = scalar});
    } catch (const std::exception&) {
    }
    try {
      rb = tb->run(s, sim::RunOptions{.scalar = scalar});
    } catch (const std::exception&) {
    }
    if (ra) {
      EXPECT_TRUE(rb.has_value()) << a << " ran where " << b << " did not, seed " << seed;
    }
    if (same_refusals) {
      EXPECT_EQ(ra.has_value(), rb.has_value()) << "seed " << seed;
    }
    if (!ra || !rb) continue;
    EXPECT_TRUE(models::tensor_lists_equal(ra->parameters.tensors, rb->parameters.tensors)) << a << " seed " << seed;
    EXPECT_EQ(ra->optimizer_state, rb->optimizer_state) << a << " seed " << seed;
    EXPECT_EQ(ra->steps.size(), rb->steps.size()) << a << " seed " << seed;
    for (std::size_t i = 0; i < std::min(ra->steps.size(), rb->steps.size()); ++i) {
      EXPECT_TRUE(models::tensor_lists_equal(ra->steps[i].gradient.tensors, rb->steps[i].gradient.tensors))
          << a << " seed " << seed << " step " << i;
      EXPECT_EQ(ra->steps[i].gradient.present, rb->steps[i].gradient.present) << a << " seed " << seed;
      EXPECT_EQ(ra->steps[i].grad_norm, rb->steps[i].grad_norm) << a << " seed " << seed;
      EXPECT_EQ(ra->steps[i].clip_coefficient, rb->steps[i].clip_coefficient) << a << " seed " << seed;
    }
    ++compared;
  }
  std::cout << a << " equals " << b << " on " << compared << " of " << seeds << " random "
            << models::to_string(model) << " scenarios\n";
  return compared;
}

TEST(ResidentEngine, the_resident_twins_equal_the_offload_twins) {
  for (const models::ModelKind model :
       {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
    EXPECT_GT(compare_targets("cuda-resident-host-twin", "cuda-offload-host-twin", model, sim::ScalarKind::rational, 150, false), 60);
    EXPECT_GT(compare_targets("cuda-resident-fp32-host-twin", "cuda-offload-fp32-host-twin", model, sim::ScalarKind::fp32, 150, true),
              120);
  }
}

TEST(ResidentEngine, the_resident_twins_are_clean_under_every_property) {
  for (const char* target : {"cuda-resident-host-twin", "cuda-resident-fp32-host-twin"})
    for (const models::ModelKind model :
         {models::ModelKind::linear, models::ModelKind::mlp, models::ModelKind::tied_embedding}) {
      const fuzz::CampaignReport report = run_offload_campaign(target, 300, 44, model);
      for (const auto& p : report.pairs) {
        EXPECT_FALSE(p.finding.has_value()) << target << " " << p.property << ": "
                                            << (p.finding ? p.finding->verdict.message : "");
        EXPECT_EQ(p.target_faults, 0u) << target << " " << p.property << ": " << p.first_fault;
        if (p.property == "accumulated_update_equals_full_batch_update") {
          EXPECT_GT(p.trials - p.cannot_run, 150u) << target << " ran property 1 on too few trials";
        }
      }
    }
}

TEST(ResidentEngine, the_device_variants_say_they_cannot_run_without_a_device) {
  register_offload_engines();
  std::string why;
  if (device_available(&why)) GTEST_SKIP() << "a device is present";
  const sim::Scenario s = fuzz::generate_scenario(3, fuzz::GeneratorOptions{.model = models::ModelKind::linear});
  for (const char* name : {"cuda-resident", "cuda-resident-fp32"})
    EXPECT_NE(sim::make_target(name)->unsupported(s).find("no CUDA device ("), std::string::npos) << name;
  EXPECT_EQ(sim::make_target("cuda-resident-fp32-host-twin")->fixed_scalar(), sim::ScalarKind::fp32);
}

}  // namespace
}  // namespace accumcheck::cuda
