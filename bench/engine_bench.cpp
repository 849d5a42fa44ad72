// Simulated micro-steps per second of the reference engine, and how much of each micro-step is arithmetic.
//
// BM_engine_micro_step: one backward on every rank plus step() (a boundary every G = 4 micro-steps), for the
// linear model at sizes 0 and 1 (I x O = 4 x 2, 16 x 8), R = 1 and 4, offload off and on, in Rational,
// FastRational and Fixed32. BM_rank_gradients_only: the same per-rank forward+backward and nothing else: the
// arithmetic floor. Their ratio, taken in one run, is the share of engine bookkeeping (reduction, buckets,
// copies, partitions, trace). Back of envelope, size 0, R = 1: 2 sequences x 6 tokens x ~40 multiply-adds
// = ~500 scalar ops per micro-step, ~0.5 us at int64 speed, ~200 us in mpq.
#include <benchmark/benchmark.h>

#include "models/fast_rational.h"
#include "models/fixed_point.h"
#include "sim/convert.h"
#include "sim/reference_engine.h"

namespace {

using namespace accumcheck;
using models::Rational;

constexpr int kG = 4;

struct Setup {
  sim::Scenario scenario;
  std::vector<std::vector<models::Sequence<Rational>>> rank_data;  // [R][sequences]
};

Setup make_setup(int size_index, int rank_count, bool offload) {
  static constexpr int kSizes[2][2] = {{4, 2}, {16, 8}};
  Setup s;
  s.scenario.training.model = models::ModelSpec{.kind = models::ModelKind::linear, .input_size = kSizes[size_index][0],
                                                .output_size = kSizes[size_index][1]};
  // lr = 0 keeps the parameters fixed, so the benchmark measures a steady state: with a real learning rate
  // exact parameters gain denominator bits every step and an endless loop would time GMP growth instead.
  s.scenario.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = Rational(0)};
  s.scenario.engine = sim::EngineConfig{.rank_count = rank_count, .accumulation_steps = kG, .zero_stage = 2, .offload = offload};
  s.scenario.initial_parameters = models::zero_parameters<Rational>(s.scenario.training.model);
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return Rational(static_cast<long long>((state >> 33) % 17) - 8, 8LL);
  };
  for (auto& t : s.scenario.initial_parameters.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = next();
  for (int r = 0; r < rank_count; ++r) {
    std::vector<models::Sequence<Rational>> seqs;
    for (int i = 0; i < 2; ++i) {
      models::Sequence<Rational> seq;
      seq.features = models::Matrix<Rational>(6, kSizes[size_index][0]);
      seq.targets = models::Matrix<Rational>(6, kSizes[size_index][1]);
      for (Eigen::Index j = 0; j < seq.features.size(); ++j) seq.features(j) = next();
      for (Eigen::Index j = 0; j < seq.targets.size(); ++j) seq.targets(j) = next();
      seq.loss_mask.assign(6, 1);
      seqs.push_back(std::move(seq));
    }
    s.rank_data.push_back(std::move(seqs));
  }
  return s;
}

template <class S>
sim::RankSequences<S> data_in(const Setup& setup) {
  sim::RankSequences<S> out;
  for (const auto& rank : setup.rank_data) {
    std::vector<models::Sequence<S>> seqs;
    for (const auto& seq : rank) seqs.push_back(sim::to_scalar<S>(seq));
    out.push_back(std::move(seqs));
  }
  return out;
}

template <class S>
void BM_engine_micro_step(benchmark::State& state) {
  const Setup setup = make_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), state.range(2) != 0);
  const auto data = data_in<S>(setup);
  const sim::RankCoefficients<S> coef(data.size(), std::vector<S>(2, S(1)));
  sim::ReferenceEngine<S> engine(setup.scenario.training, setup.scenario.engine,
                                 sim::to_scalar<S>(setup.scenario.initial_parameters), 7, false);
  for (auto _ : state) {
    engine.backward(data, coef);
    engine.step();
    benchmark::DoNotOptimize(engine.take_applied_step());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string(models::ScalarTraits<S>::name));
}

template <class S>
void BM_rank_gradients_only(benchmark::State& state) {
  const Setup setup = make_setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), false);
  const auto data = data_in<S>(setup);
  const auto params = sim::to_scalar<S>(setup.scenario.initial_parameters);
  const std::vector<S> coef(2, S(1));
  const S inverse_g = models::from_rational<S>(Rational(1LL, kG));
  for (auto _ : state)
    for (const auto& rank : data)
      benchmark::DoNotOptimize(sim::rank_gradient(setup.scenario.training.model, params, rank, coef, inverse_g));
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string(models::ScalarTraits<S>::name));
}

void engine_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"size", "ranks", "offload"});
  for (int size : {0, 1})
    for (int ranks : {1, 4})
      for (int offload : {0, 1}) b->Args({size, ranks, offload});
}

void arithmetic_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"size", "ranks"});
  for (int size : {0, 1})
    for (int ranks : {1, 4}) b->Args({size, ranks});
}

BENCHMARK(BM_engine_micro_step<Rational>)->Apply(engine_args);
BENCHMARK(BM_engine_micro_step<models::FastRational>)->Apply(engine_args);
BENCHMARK(BM_engine_micro_step<models::Fixed32>)->Apply(engine_args);
BENCHMARK(BM_rank_gradients_only<Rational>)->Apply(arithmetic_args);
BENCHMARK(BM_rank_gradients_only<models::FastRational>)->Apply(arithmetic_args);
BENCHMARK(BM_rank_gradients_only<models::Fixed32>)->Apply(arithmetic_args);

}  // namespace
