// Schedule: the seeded source of every nondeterministic choice of the simulated machine.
//
// One root seed per run. Each kind of choice draws from its own stream, derived by splitting the root seed
// with the stream's id (RapidCheck's Random::split idea, with SplitMix64 as the mixer), so adding draws to one
// stream never shifts another. Nothing outside sim/ draws from these streams, and diagnostics never do.
#pragma once

#include <cstdint>
#include <vector>

#include "models/assert.h"

namespace accumcheck::sim {

enum class StreamId : std::uint64_t {
  copy_completion = 1,   // which pending asynchronous copies complete at a poll point, and in which order
  arrival_order = 2,     // the order in which ranks' contributions arrive at a reduction
  offload_pipeline = 3,  // cuda/offload_engine.h: each window's stream assignment and injected delays
};

// SplitMix64: tiny, fast, and passes BigCrush; the state is the whole generator, so a stream is a value.
class Stream {
 public:
  explicit Stream(std::uint64_t state) : state_(state) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift; the bias is below 2^-32 for our bounds).
  std::uint32_t below(std::uint32_t bound) {
    ACCUMCHECK_ASSERT(bound > 0);
    __extension__ using uint128 = unsigned __int128;
    return static_cast<std::uint32_t>((static_cast<uint128>(next()) * bound) >> 64);
  }
  bool coin() { return (next() >> 63) != 0; }
  // below(bound) when `draw`, else 0 and no draw at all: the stream then stands exactly as below() would leave it
  // or as it was, chosen without a branch. For a draw taken or not on a random value, where a branch would
  // mispredict often; the draws are those of `if (draw) r = below(bound);`.
  std::uint32_t below_if(bool draw, std::uint32_t bound) {
    const std::uint64_t before = state_;
    const std::uint32_t r = below(bound);
    const std::uint64_t undo = std::uint64_t{0} - static_cast<std::uint64_t>(!draw);  // all ones: undo the draw
    state_ = (state_ & ~undo) | (before & undo);
    return r & static_cast<std::uint32_t>(~undo);
  }
  // A uniformly random permutation of 0..n-1 (Fisher-Yates).
  std::vector<int> permutation(int n) {
    std::vector<int> order;
    permutation_into(n, order);
    return order;
  }
  // The same permutation, the same draws, written over `order` (whose storage a caller keeps between calls).
  void permutation_into(int n, std::vector<int>& order) {
    order.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    for (int i = n - 1; i > 0; --i) std::swap(order[static_cast<std::size_t>(i)], order[below(static_cast<std::uint32_t>(i + 1))]);
  }

 private:
  std::uint64_t state_;
};

// Derives the stream for `id` from a root seed.
inline Stream split_stream(std::uint64_t root_seed, StreamId id) {
  Stream mixer(root_seed ^ (static_cast<std::uint64_t>(id) * 0xD1B54A32D192ED03ULL));
  return Stream(mixer.next());
}

}  // namespace accumcheck::sim
