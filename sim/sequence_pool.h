// SequencePool<S>: the storage of converted sequences, kept by each thread from one run to the next.
//
// A target's run and the oracle convert the scenario's sequences from Rational into the scalar they compute in
// (sim::to_scalar), a few times a trial, and free them when they are done. At small sizes the storage costs more
// than the values: at the peer's sizes (bench/README.md) a sequence's matrices hold about two values each, and
// allocating, constructing and freeing them and the token vectors was 10% of a trial's instructions. A sequence
// converted here reuses the storage of one given back earlier whose matrices have the same sizes, so a thread that
// has seen a trial of some shape converts the next one of that shape without allocating.
//
// Nothing is shared between threads (the pool is thread_local) and nothing a pool hands out depends on what it held
// before: every value of a converted sequence is written, every vector assigned. Bounded: past kValuesMax pooled
// values the pool drops everything it holds and starts again, so that it follows a campaign whose shapes drift, and
// a thread that is given back more than it takes (a trial generated on one thread and finished on another) does not
// keep what it will not use. A pooled value keeps what it held until it is overwritten: at most kValuesMax values a
// pool, about 1 MB when they are inline and 64 MB at worst when every one is promoted to the exact size limit
// (kExactBitsMax bits of numerator and of denominator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::sim {

template <class S>
class SequencePool {
 public:
  static constexpr std::size_t kValuesMax = std::size_t{1} << 16;

  // This thread's pool.
  static SequencePool& local() {
    thread_local SequencePool pool;
    return pool;
  }

  // `from` converted into S as to_scalar<S> converts it (models::from_rational<S> for every value), in storage
  // given back earlier where the pool holds a sequence whose matrices have these sizes.
  models::Sequence<S> convert(const models::Sequence<models::Rational>& from) {
    models::Sequence<S> to = reuse(from.features.size(), from.targets.size());
    convert_matrix_into(from.features, to.features);
    convert_matrix_into(from.targets, to.targets);
    to.token_ids = from.token_ids;
    to.expert_index = from.expert_index;
    to.loss_mask = from.loss_mask;
    return to;
  }

  // A sequence of T tokens with matrices of T x features and T x targets values and empty vectors, in storage given
  // back earlier where the pool holds one of these sizes. Its values are left as they were: the caller writes every
  // one (the generator draws them).
  models::Sequence<S> take(Eigen::Index tokens, Eigen::Index features, Eigen::Index targets) {
    models::Sequence<S> seq = reuse(tokens * features, tokens * targets);
    seq.features.resize(tokens, features);
    seq.targets.resize(tokens, targets);
    seq.token_ids.clear();
    seq.expert_index.clear();
    seq.loss_mask.clear();
    return seq;
  }

  // Keeps seq's storage for a later convert or take.
  void give(models::Sequence<S>&& seq) {
    const std::size_t values = counted(seq.features.size(), seq.targets.size());
    if (values_ + values > kValuesMax) {
      small_.clear();
      large_.clear();
      values_ = 0;
      if (values > kValuesMax) return;
    }
    values_ += values;
    list(seq.features.size(), seq.targets.size()).push_back(std::move(seq));
  }

  // Gives back every sequence of a nested list of them (a run's data, the oracle's batches).
  template <class Nested>
  void give_all(Nested& nested) {
    if constexpr (std::is_same_v<Nested, models::Sequence<S>>) {
      give(std::move(nested));
    } else {
      for (auto& inner : nested) give_all(inner);
    }
  }

  // How many sequences the pool holds: for tests.
  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& list : small_) n += list.size();
    for (const auto& [k, list] : large_) n += list.size();
    return n;
  }

 private:
  // Matrices of fewer than kSmall values each (every sequence at the peer's sizes) are found by direct index; others
  // through a map.
  static constexpr Eigen::Index kSmall = 64;

  std::vector<models::Sequence<S>>& list(Eigen::Index features, Eigen::Index targets) {
    if (features < kSmall && targets < kSmall) {
      if (small_.empty()) small_.resize(static_cast<std::size_t>(kSmall * kSmall));
      return small_[static_cast<std::size_t>(features * kSmall + targets)];
    }
    return large_[(static_cast<std::uint64_t>(features) << 32) ^ static_cast<std::uint64_t>(targets)];
  }

  // What a sequence counts toward kValuesMax: its values, and one for itself (an empty sequence is kept too).
  static std::size_t counted(Eigen::Index features, Eigen::Index targets) {
    return static_cast<std::size_t>(features + targets) + 1;
  }

  // One given back with matrices of these sizes, else a new one.
  models::Sequence<S> reuse(Eigen::Index features, Eigen::Index targets) {
    std::vector<models::Sequence<S>>& spare = list(features, targets);
    if (spare.empty()) return {};
    models::Sequence<S> seq = std::move(spare.back());
    spare.pop_back();
    values_ -= counted(features, targets);
    return seq;
  }

  // to = from converted, value by value; to's storage is kept when it already holds as many values.
  static void convert_matrix_into(const models::Matrix<models::Rational>& from, models::Matrix<S>& to) {
    to.resize(from.rows(), from.cols());
    const models::Rational* in = from.data();
    S* out = to.data();
    for (Eigen::Index i = 0; i < from.size(); ++i) out[i] = models::from_rational<S>(in[i]);
  }

  std::vector<std::vector<models::Sequence<S>>> small_;
  std::unordered_map<std::uint64_t, std::vector<models::Sequence<S>>> large_;
  std::size_t values_ = 0;
};

// Gives every sequence of `nested` back to `pool` when it goes out of scope, on an exception too. Declared right
// after the data it guards, so that whatever reads the data (an engine, the oracle) is gone first.
template <class S, class Nested>
class GiveBackOnExit {
 public:
  GiveBackOnExit(SequencePool<S>& pool, Nested& nested) : pool_(pool), nested_(nested) {}
  GiveBackOnExit(const GiveBackOnExit&) = delete;
  GiveBackOnExit& operator=(const GiveBackOnExit&) = delete;
  ~GiveBackOnExit() { pool_.give_all(nested_); }

 private:
  SequencePool<S>& pool_;
  Nested& nested_;
};

}  // namespace accumcheck::sim
