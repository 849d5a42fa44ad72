// Scoped loss normalisers and the registry of framework layers.
#include "sim/loss_normaliser.h"

#include <algorithm>
#include <span>
#include <type_traits>
#include <utility>

#include "models/fast_rational.h"

namespace accumcheck::sim {

namespace {
using models::NormalisationCounts;
using Sequences = std::vector<models::Sequence<Rational>>;

NormalisationCounts counts_of(const Sequences& sequences) {
  return models::count_scope(std::span<const models::Sequence<Rational>>(sequences));
}
}  // namespace

template <class C>
void ScopedNormaliser::fill(const StepPlan& window, const EngineConfig& engine, const models::AggregationSpec& aggregation,
                            std::vector<std::vector<std::vector<C>>>& out) const {
  const auto& mbs = window.micro_batches;
  const int R = engine.rank_count;
  const auto K = mbs.size();
  NormalisationCounts whole;
  // Scratch kept per thread: the counts of every micro-batch and of every rank.
  thread_local std::vector<NormalisationCounts> per_micro_batch, per_rank;
  per_micro_batch.assign(K, {});
  per_rank.assign(static_cast<std::size_t>(R), {});
  for (std::size_t k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) {
      const NormalisationCounts c = counts_of(mbs[k].rank_sequences[static_cast<std::size_t>(r)]);
      whole += c;
      per_micro_batch[k] += c;
      per_rank[static_cast<std::size_t>(r)] += c;
    }
  long long factor = 1;
  if (times_g_) factor *= engine.accumulation_steps;
  if (times_r_) factor *= R;
  const models::FastRational fast_factor(factor);
  out.resize(K);
  for (std::size_t k = 0; k < K; ++k) {
    out[k].resize(static_cast<std::size_t>(R));
    for (int r = 0; r < R; ++r) {
      const auto& seqs = mbs[k].rank_sequences[static_cast<std::size_t>(r)];
      NormalisationCounts scope;
      switch (scope_) {
        case NormalisationScope::window: scope = whole; break;
        case NormalisationScope::micro_batch_all_ranks: scope = per_micro_batch[k]; break;
        case NormalisationScope::micro_batch_this_rank: scope = counts_of(seqs); break;
        case NormalisationScope::window_this_rank: scope = per_rank[static_cast<std::size_t>(r)]; break;
      }
      std::vector<C>& list = out[k][static_cast<std::size_t>(r)];
      list.clear();
      list.reserve(seqs.size());  // one allocation, not one per doubling
      for (const auto& seq : seqs) {
        Rational exact = models::sequence_coefficient(aggregation, seq.valid_token_count(), scope);
        // The product in FastRational, which keeps two small values inline where Rational's goes through GMP; a
        // Rational list converts only where there is a factor.
        if constexpr (std::is_same_v<C, Rational>) {
          if (factor != 1) exact = (models::FastRational(exact) * fast_factor).to_rational();
          list.push_back(std::move(exact));
        } else {
          models::FastRational c(exact);
          if (factor != 1) c *= fast_factor;
          list.push_back(std::move(c));
        }
      }
    }
  }
}

WindowCoefficients ScopedNormaliser::coefficients(const StepPlan& window, const EngineConfig& engine,
                                                  const models::AggregationSpec& aggregation) const {
  WindowCoefficients out;
  fill(window, engine, aggregation, out);
  return out;
}

void ScopedNormaliser::fast_coefficients_into(const StepPlan& window, const EngineConfig& engine,
                                              const models::AggregationSpec& aggregation, FastWindowCoefficients& out) const {
  fill(window, engine, aggregation, out);
}

void LossNormaliser::fast_coefficients_into(const StepPlan& window, const EngineConfig& engine,
                                            const models::AggregationSpec& aggregation, FastWindowCoefficients& out) const {
  const WindowCoefficients exact = coefficients(window, engine, aggregation);
  out.resize(exact.size());
  for (std::size_t k = 0; k < exact.size(); ++k) {
    out[k].resize(exact[k].size());
    for (std::size_t r = 0; r < exact[k].size(); ++r) {
      out[k][r].clear();
      for (const Rational& q : exact[k][r]) out[k][r].emplace_back(q);
    }
  }
}

std::string ScopedNormaliser::unsupported(const models::AggregationSpec& aggregation) const {
  if (modes_.empty() || std::find(modes_.begin(), modes_.end(), aggregation.mode) != modes_.end()) return {};
  std::string names;
  for (auto mode : modes_) names += (names.empty() ? "" : ", ") + std::string(models::to_string(mode));
  return std::string(name_) + " implements the " + names + " aggregation, not " + std::string(models::to_string(aggregation.mode));
}

const std::vector<std::shared_ptr<const LossNormaliser>>& builtin_normalisers() {
  using models::LossAggregation;
  // OpenRLHF's losses have a token-level and a sequence-level mean; the Trainer's cross-entropy a token mean.
  const std::vector<LossAggregation> openrlhf_modes = {LossAggregation::token_mean, LossAggregation::seq_mean_token_mean};
  const std::vector<LossAggregation> trainer_modes = {LossAggregation::token_mean};
  static const std::vector<std::shared_ptr<const LossNormaliser>> all = {
      std::make_shared<ScopedNormaliser>("reference", "window-global counts, compensating the engine's 1/G and 1/R",
                                         NormalisationScope::window, true, true),
      std::make_shared<ScopedNormaliser>("openrlhf@0.10.2",
                                         "masked mean per micro-batch per rank (SFTLoss/PolicyLoss, PR #923 to v0.10.2)",
                                         NormalisationScope::micro_batch_this_rank, false, false, openrlhf_modes),
      std::make_shared<ScopedNormaliser>("openrlhf@0.10.3",
                                         "token count all-reduced over ranks but per micro-batch (get_loss_batch_info)",
                                         NormalisationScope::micro_batch_all_ranks, false, true, openrlhf_modes),
      std::make_shared<ScopedNormaliser>("openrlhf@0.10.4",
                                         "window-global counts over the accumulation window and ranks (PR #1249)",
                                         NormalisationScope::window, true, true, openrlhf_modes),
      std::make_shared<ScopedNormaliser>("transformers@4.45",
                                         "mean cross-entropy per micro-batch per rank; the engine divides by G",
                                         NormalisationScope::micro_batch_this_rank, false, false, trainer_modes),
      std::make_shared<ScopedNormaliser>(
          "transformers@4.46",
          "num_items_in_batch over this rank's window (PRs #34191, #34198); accelerate divides nothing, and over "
          "DeepSpeed nothing undoes its 1/G (4.46.0 - 4.48.x)",
          NormalisationScope::window_this_rank, true, false, trainer_modes,
          std::make_shared<ScopedNormaliser>("transformers@4.46",
                                             "num_items_in_batch over this rank's window; under DeepSpeed its "
                                             "engine's 1/G is not undone (4.46.0 - 4.48.x)",
                                             NormalisationScope::window_this_rank, false, false, trainer_modes)),
      std::make_shared<ScopedNormaliser>("transformers@4.49",
                                         "num_items_in_batch over this rank's window; under DeepSpeed "
                                         "scale_wrt_gas=False turns its 1/G off (PR #35808, 4.49.0+)",
                                         NormalisationScope::window_this_rank, true, false, trainer_modes),
      std::make_shared<ScopedNormaliser>("transformers@4.54",
                                         "num_items_in_batch gathered over every rank's window and the loss times "
                                         "the process count (average_tokens_across_devices on by default, PR #39395, "
                                         "4.54.0+), scale_wrt_gas=False under DeepSpeed",
                                         NormalisationScope::window, true, true, trainer_modes),
  };
  return all;
}

std::shared_ptr<const LossNormaliser> find_normaliser(std::string_view name) {
  for (const auto& n : builtin_normalisers())
    if (n->name() == name) return n;
  return nullptr;
}

}  // namespace accumcheck::sim
