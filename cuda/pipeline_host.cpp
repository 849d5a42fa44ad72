#include "cuda/pipeline_host.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <stdexcept>

namespace accumcheck::cuda {

void add_into(Int128* total, const Int128* source, std::size_t n) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t i = r.begin(); i != r.end(); ++i) total[i] += source[i];
                    });
}

namespace {
// SplitMix64: the schedule's own stream, a pure function of the seed it is given.
std::uint64_t next(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

PipelineSchedule draw_schedule(std::uint64_t seed, int micro_batches, bool wait_for_copy) {
  if (micro_batches < 0) throw std::invalid_argument("draw_schedule: a negative micro-batch count");
  std::uint64_t state = seed;
  PipelineSchedule s;
  s.wait_for_copy = wait_for_copy;
  s.separate_copy_stream = (next(state) & 1) != 0;
  for (int j = 0; j < micro_batches; ++j) {
    // Half the micro-batches run at once; the others after 1 microsecond to 2 milliseconds, log-uniform-ish.
    const std::uint64_t r = next(state);
    s.delay_ns.push_back((r & 1) ? 0 : static_cast<std::int64_t>(1000ULL << ((r >> 1) % 12)));
  }
  return s;
}

}  // namespace accumcheck::cuda
