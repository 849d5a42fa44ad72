// sim/copy_queue.h and sim/schedule.h: copies land only when completed, every copy lands once, and the
// completion order is a function of the seed alone.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "sim/copy_queue.h"

namespace accumcheck::sim {
namespace {

RC_GTEST_PROP(CopyQueue, every_add_lands_exactly_once_whatever_the_schedule, (std::uint64_t seed, std::vector<int> values)) {
  Trace trace;
  CopyQueue<long> queue(split_stream(seed, StreamId::copy_completion), trace);
  auto dst = std::make_shared<Buffer<long>>(1, 0);
  long expected = 0;
  for (int v : values) {
    queue.issue(CopyDirection::device_to_host, std::make_shared<const Buffer<long>>(1, v), dst, 0, CopyQueue<long>::Op::add);
    expected += v;
    queue.poll();
  }
  queue.synchronize();
  RC_ASSERT(queue.pending_count() == 0u);
  RC_ASSERT((*dst)[0] == expected);
}

TEST(CopyQueue, source_is_read_at_completion_not_at_issue) {
  Trace trace;
  CopyQueue<int> queue(split_stream(1, StreamId::copy_completion), trace);
  auto src = std::make_shared<Buffer<int>>(1, 5);
  auto dst = std::make_shared<Buffer<int>>(1, 0);
  queue.issue(CopyDirection::device_to_host, src, dst, 0, CopyQueue<int>::Op::overwrite);
  EXPECT_EQ((*dst)[0], 0);  // not landed yet
  (*src)[0] = 7;            // the engine reuses the buffer without waiting
  queue.synchronize();
  EXPECT_EQ((*dst)[0], 7);
}

// below_if draws exactly as `if (draw) r = below(bound);` does, and leaves the stream where that would.
RC_GTEST_PROP(Schedule, below_if_draws_as_a_conditional_below, (std::uint64_t seed, std::vector<std::pair<bool, std::uint8_t>> draws)) {
  Stream branchless(seed), branching(seed);
  for (const auto& [draw, b] : draws) {
    const std::uint32_t bound = std::uint32_t{b} + 1;
    const std::uint32_t expected = draw ? branching.below(bound) : 0;
    RC_ASSERT(branchless.below_if(draw, bound) == expected);
  }
  RC_ASSERT(branchless.next() == branching.next());
}

TEST(Schedule, streams_are_independent_and_reproducible) {
  Stream a = split_stream(42, StreamId::copy_completion), b = split_stream(42, StreamId::copy_completion);
  Stream c = split_stream(42, StreamId::arrival_order);
  EXPECT_EQ(a.next(), b.next());
  EXPECT_NE(split_stream(42, StreamId::copy_completion).next(), c.next());
  const auto perm = split_stream(7, StreamId::arrival_order).permutation(5);
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace accumcheck::sim
