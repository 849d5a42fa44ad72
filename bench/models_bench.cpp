// Cost of one forward + backward per synthetic model, per scalar type, at three sizes.
//
// The figure later work chooses types by: the fuzzer's budget is thousands of trials per second per core, and
// one trial is a few forward+backward passes of the smallest size. Each run processes one window of
// 12 sequences x 6 tokens (72 tokens). Back of envelope for the linear model, size 0 (I = 4, O = 2): per
// token 2 x (4 MACs + 1) forward and 2 x (4 + 1) gradient MACs, ~20 multiply-adds, ~1400 per window: ~1.5 us
// at 1 ns per op for int64-speed arithmetic, ~100x that for mpq (allocation and gcd per operation).
// Correctness is checked once per type before timing: the result must equal the Rational gradient converted
// to that type (exactly for exact types; for the others only its finiteness is checked here, the rounding
// is the float properties' job).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "models/fast_rational.h"
#include "models/fixed_point.h"
#include "models/loss_aggregation.h"
#include "models/model.h"

namespace {

using namespace accumcheck::models;

constexpr int kSequenceCount = 12;
constexpr int kTokensPerSequence = 6;

ModelSpec spec_for(ModelKind kind, int size_index) {
  static constexpr int kLinear[3][2] = {{4, 2}, {16, 8}, {64, 32}};
  static constexpr int kMlp[3][3] = {{4, 8, 2}, {16, 32, 8}, {64, 128, 32}};
  static constexpr int kTied[3][2] = {{8, 4}, {32, 16}, {128, 32}};
  switch (kind) {
    case ModelKind::linear:
      return ModelSpec{.kind = kind, .input_size = kLinear[size_index][0], .output_size = kLinear[size_index][1]};
    case ModelKind::mlp:
      return ModelSpec{.kind = kind, .input_size = kMlp[size_index][0], .output_size = kMlp[size_index][2],
                       .hidden_size = kMlp[size_index][1]};
    case ModelKind::tied_embedding:
      return ModelSpec{.kind = kind, .vocab_size = kTied[size_index][0], .embed_size = kTied[size_index][1]};
  }
  return {};
}

// Deterministic small dyadic values k/8, k in [-8, 8]: exactly representable in every type benchmarked, so
// the exact types can be checked against Rational.
struct Lcg {
  std::uint64_t state;
  Rational next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return Rational(static_cast<long long>((state >> 33) % 17) - 8, 8LL);
  }
};

struct Workload {
  ModelSpec spec;
  Parameters<Rational> params;
  std::vector<Sequence<Rational>> batch;
};

Workload make_workload(ModelKind kind, int size_index) {
  Workload w{spec_for(kind, size_index), {}, {}};
  Lcg rng{static_cast<std::uint64_t>(size_index) * 7919 + static_cast<std::uint64_t>(kind)};
  w.params = zero_parameters<Rational>(w.spec);
  for (auto& t : w.params.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = rng.next();
  for (int s = 0; s < kSequenceCount; ++s) {
    Sequence<Rational> seq;
    seq.features = Matrix<Rational>(kTokensPerSequence, feature_size(w.spec));
    for (Eigen::Index i = 0; i < seq.features.size(); ++i) seq.features(i) = rng.next();
    seq.targets = Matrix<Rational>(kTokensPerSequence, target_size(w.spec));
    for (Eigen::Index i = 0; i < seq.targets.size(); ++i) seq.targets(i) = rng.next();
    for (int t = 0; t < kTokensPerSequence; ++t) {
      seq.loss_mask.push_back(1);
      if (kind == ModelKind::tied_embedding) seq.token_ids.push_back(static_cast<int>((s * 7 + t * 3) % w.spec.vocab_size));
    }
    w.batch.push_back(std::move(seq));
  }
  return w;
}

template <class S>
Sequence<S> convert(const Sequence<Rational>& seq) {
  Sequence<S> out;
  out.features = convert_matrix<S>(seq.features, from_rational<S>);
  out.targets = convert_matrix<S>(seq.targets, from_rational<S>);
  out.token_ids = seq.token_ids;
  out.expert_index = seq.expert_index;
  out.loss_mask = seq.loss_mask;
  return out;
}

template <class S>
Parameters<S> convert(const Parameters<Rational>& params) {
  Parameters<S> out;
  for (const auto& t : params.tensors) out.tensors.push_back(convert_matrix<S>(t, from_rational<S>));
  return out;
}

template <class S>
void BM_forward_backward(benchmark::State& state, ModelKind kind) {
  const Workload w = make_workload(kind, static_cast<int>(state.range(0)));
  const Parameters<S> params = convert<S>(w.params);
  std::vector<Sequence<S>> batch;
  for (const auto& seq : w.batch) batch.push_back(convert<S>(seq));
  const std::span<const Sequence<S>> view(batch);
  const AggregationSpec agg{.mode = LossAggregation::sum};  // coefficient 1: exact in every type
  const std::vector<S> coef = sequence_coefficients(agg, view, count_scope(view));

  // Correctness once, before timing.
  Gradient<S> check = zero_gradient<S>(w.spec);
  accumulate_gradient(w.spec, params, view, std::span<const S>(coef), check);
  if constexpr (ScalarTraits<S>::checked) {  // dyadic inputs: Fixed32 is exact here too
    const auto rview = std::span<const Sequence<Rational>>(w.batch);
    const auto rcoef = sequence_coefficients(agg, rview, count_scope(rview));
    Gradient<Rational> truth = zero_gradient<Rational>(w.spec);
    accumulate_gradient(w.spec, w.params, rview, std::span<const Rational>(rcoef), truth);
    for (std::size_t p = 0; p < truth.size(); ++p)
      for (Eigen::Index i = 0; i < truth.tensors[p].size(); ++i)
        if (!(to_rational(check.tensors[p](i)) == truth.tensors[p](i))) {
          state.SkipWithError("gradient differs from the Rational gradient");
          return;
        }
  }

  for (auto _ : state) {
    Gradient<S> grad = zero_gradient<S>(w.spec);
    const S loss = weighted_loss(w.spec, params, view, std::span<const S>(coef));
    accumulate_gradient(w.spec, params, view, std::span<const S>(coef), grad);
    benchmark::DoNotOptimize(loss);
    benchmark::DoNotOptimize(grad);
  }
  state.SetItemsProcessed(state.iterations() * kSequenceCount * kTokensPerSequence);
  state.SetLabel(std::string(ScalarTraits<S>::name));
}

// Registered at start-up: BM_forward_backward/<model>/<type>/size:<0..2>.
template <class S>
void register_type() {
  const std::pair<ModelKind, const char*> models[] = {
      {ModelKind::linear, "linear"}, {ModelKind::mlp, "mlp"}, {ModelKind::tied_embedding, "tied"}};
  for (const auto& [kind, model_name] : models) {
    const std::string name = std::string("BM_forward_backward/") + model_name + "/" + std::string(ScalarTraits<S>::name);
    benchmark::RegisterBenchmark(name.c_str(), [kind = kind](benchmark::State& state) { BM_forward_backward<S>(state, kind); })
        ->ArgName("size")
        ->DenseRange(0, 2);
  }
}

const bool registered = [] {
  register_type<Rational>();
  register_type<FastRational>();
  register_type<Fixed32>();
  register_type<double>();
  register_type<float>();
  register_type<Eigen::bfloat16>();
  register_type<Eigen::half>();
  return true;
}();

}  // namespace
