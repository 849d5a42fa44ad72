// MemoHasher: the hash the trial's exact memos (sim/backward_memo.h, sim/update_memo.h) find candidates by.
//
// A memo answers only from an entry whose inputs compare equal in full, so this hash may leave values out: it reads
// every size, each inline value's two words, a promoted value's sign and lowest limbs, and up to kSampled values of
// each matrix spread over it. A parameter update or another micro-batch changes those, and reading every value cost
// more than the comparison it saves.
#pragma once

#include <cstdint>
#include <vector>

#include <gmp.h>

#include "models/fast_rational.h"
#include "models/tensor.h"

namespace accumcheck::sim::detail {

struct MemoHasher {
  static constexpr Eigen::Index kSampled = 8;
  std::uint64_t h = 0x9E3779B97F4A7C15ULL;

  void add(std::uint64_t x) {
    h = (h ^ x) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 29;
  }
  void add(const models::FastRational& value) {
    if (const auto parts = value.inline_parts()) {
      add(static_cast<std::uint64_t>(parts->first));
      add(static_cast<std::uint64_t>(parts->second));
    } else {
      const mpq_srcptr q = value.promoted_value();
      add(static_cast<std::uint64_t>(static_cast<std::int64_t>(mpz_sgn(mpq_numref(q)))));
      add(static_cast<std::uint64_t>(mpz_getlimbn(mpq_numref(q), 0)));
      add(static_cast<std::uint64_t>(mpz_getlimbn(mpq_denref(q), 0)));
    }
  }
  void add(const models::Matrix<models::FastRational>& m) {
    add(static_cast<std::uint64_t>(m.rows()));
    add(static_cast<std::uint64_t>(m.cols()));
    const Eigen::Index n = m.size();
    if (n <= kSampled) {
      for (Eigen::Index i = 0; i < n; ++i) add(m(i));
    } else {
      for (Eigen::Index k = 0; k < kSampled; ++k) add(m(k * (n - 1) / (kSampled - 1)));
    }
  }
  template <class Int>
  void add_ints(const std::vector<Int>& v) {
    add(v.size());
    for (std::size_t k = 0; k < v.size() && k < static_cast<std::size_t>(kSampled); ++k) add(static_cast<std::uint64_t>(v[k]));
  }
};

}  // namespace accumcheck::sim::detail
