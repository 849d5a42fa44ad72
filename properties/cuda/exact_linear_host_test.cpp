// The host half of cuda/ on the CPU, with or without a device: the integer layout, the kernel's CPU twin against
// models/, the pipeline's add and schedule.
#include <gtest/gtest.h>

#include <random>

#include "cuda/exact_linear.h"
#include "cuda/random_linear_batch.h"
#include "cuda/pipeline_host.h"
#include "models/linear_model.h"
#include "models/model.h"

namespace accumcheck::cuda {
namespace {

using models::Rational;

models::ModelSpec linear(int in, int out, int experts) {
  models::ModelSpec spec;
  spec.input_size = in;
  spec.output_size = out;
  spec.expert_count = experts;
  return spec;
}

TEST(ExactLinearHost, host_sums_give_models_gradient_on_random_batches) {
  std::mt19937_64 rng(20261204);
  for (int trial = 0; trial < 300; ++trial) {
    std::uniform_int_distribution<int> size(1, 5), experts(1, 3), sequences(0, 5);
    const RandomBatch r = random_batch(rng, linear(size(rng), size(rng), experts(rng)), sequences(rng), 6);
    const RandomGroups groups = random_groups(rng, r.sequences.size());
    const int group_count = groups.count;
    const std::vector<int>& group = groups.of_sequence;
    const std::vector<Rational>& c = groups.coefficient;
    const ExactLinearBatch batch = lay_out(r.spec, r.params, r.sequences, group, group_count);
    const auto sums = host_sums(batch);
    ASSERT_EQ(to_gradient(r.spec, batch, sums, c), kernel_reference(r, group, c)) << "trial " << trial;
  }
}

TEST(ExactLinearHost, a_known_answer) {
  // W = 1/2, b = 1/4, one token x = 2, y = 1: r = 1/2 * 2 + 1/4 - 1 = 1/4; dW = r x = 1/2, db = 1/4, times c = 3.
  models::ModelSpec spec = linear(1, 1, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  params.tensors[0](0, 0) = Rational(1, 2);
  params.tensors[1](0, 0) = Rational(1, 4);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>::Constant(1, 1, Rational(2));
  seq.targets = models::Matrix<Rational>::Constant(1, 1, Rational(1));
  seq.loss_mask = {1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  const ExactLinearBatch batch = lay_out(spec, params, sequences, group, 1);
  EXPECT_EQ(batch.denominator, 4);
  const std::vector<Rational> c = {Rational(3)};
  const auto grad = to_gradient(spec, batch, host_sums(batch), c);
  EXPECT_EQ(grad.tensors[0](0, 0), Rational(3, 2));
  EXPECT_EQ(grad.tensors[1](0, 0), Rational(3, 4));
  EXPECT_TRUE(grad.present[0] && grad.present[1]);
}

TEST(ExactLinearHost, values_over_any_common_denominator_give_models_gradient) {
  // After an optimizer step whose coefficients divide by token counts, parameters are no longer dyadic: 1/3, 2/5,
  // -7/12 and 5/6 share the denominator 60.
  models::ModelSpec spec = linear(2, 1, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  params.tensors[0](0, 0) = Rational(1, 3);
  params.tensors[0](0, 1) = Rational(2, 5);
  params.tensors[1](0, 0) = Rational(-7, 12);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(2, 2);
  seq.features << Rational(5, 6), Rational(1, 4), Rational(-3), Rational(1, 2);
  seq.targets = models::Matrix<Rational>::Constant(2, 1, Rational(1, 5));
  seq.loss_mask = {1, 1};
  const std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  const ExactLinearBatch batch = lay_out(spec, params, sequences, group, 1);
  EXPECT_EQ(batch.denominator, 60);
  const std::vector<Rational> c = {Rational(1, 7)};
  RandomBatch r{spec, params, sequences};
  EXPECT_EQ(to_gradient(spec, batch, host_sums(batch), c), kernel_reference(r, group, c));
}

TEST(ExactLinearHost, refuses_what_it_cannot_run_exactly_naming_the_value) {
  models::ModelSpec spec = linear(1, 1, 1);
  models::Parameters<Rational> params = models::zero_parameters<Rational>(spec);
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>::Constant(1, 1, Rational(1, 3));
  seq.targets = models::Matrix<Rational>::Constant(1, 1, Rational(1, 1LL << 29));
  seq.loss_mask = {1};
  std::vector<models::Sequence<Rational>> sequences = {seq};
  const std::vector<int> group = {0};
  try {
    lay_out(spec, params, sequences, group, 1);  // lcm(3, 2^29) > 2^30
    FAIL() << "1/3 and 1/2^29 were laid out";
  } catch (const ExactRangeError& e) {
    EXPECT_NE(std::string(e.what()).find("target of sequence 0 = 1/536870912 takes the common denominator to "
                                         "1610612736, above the exact kernels' 2^30"),
              std::string::npos)
        << e.what();
  }
  sequences[0].targets(0, 0) = Rational(0);
  sequences[0].features(0, 0) = Rational(1LL << 40);
  EXPECT_THROW(lay_out(spec, params, sequences, group, 1), ExactRangeError);
  sequences[0].features(0, 0) = Rational(1, 1LL << 31);
  EXPECT_THROW(lay_out(spec, params, sequences, group, 1), ExactRangeError);
  models::ModelSpec mlp = spec;
  mlp.kind = models::ModelKind::mlp;
  EXPECT_THROW(lay_out(mlp, params, sequences, group, 1), std::invalid_argument);
}

TEST(ExactLinearHost, to_rational_is_exact_at_the_ends_of_the_range) {
  const Int128 big = (static_cast<Int128>(1) << 126) + 12345;
  EXPECT_EQ(to_rational(big).to_string(), "85070591730234615865843651857942065209");
  EXPECT_EQ(to_rational(-big).to_string(), "-85070591730234615865843651857942065209");
  EXPECT_EQ(to_rational(0), Rational(0));
}

TEST(PipelineHost, add_into_adds_every_element) {
  std::vector<Int128> total(10000, 1), source(10000);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<Int128>(i) << 70;
  add_into(total.data(), source.data(), total.size());
  for (std::size_t i = 0; i < total.size(); ++i) ASSERT_EQ(total[i], 1 + (static_cast<Int128>(i) << 70));
}

TEST(PipelineHost, the_schedule_is_a_function_of_its_seed) {
  const PipelineSchedule a = draw_schedule(7, 8, true), b = draw_schedule(7, 8, true), c = draw_schedule(8, 8, true);
  EXPECT_EQ(a.delay_ns, b.delay_ns);
  EXPECT_EQ(a.separate_copy_stream, b.separate_copy_stream);
  EXPECT_NE(a.delay_ns, c.delay_ns);
  ASSERT_EQ(a.delay_ns.size(), 8u);
  for (auto ns : a.delay_ns) EXPECT_TRUE(ns == 0 || (ns >= 1000 && ns <= 2048000)) << ns;
  EXPECT_FALSE(draw_schedule(7, 8, false).wait_for_copy);
}

}  // namespace
}  // namespace accumcheck::cuda
