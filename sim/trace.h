// Trace: what the simulated machine did, as a digest (always) and as readable lines (on request).
//
// Every engine event (backward, bucket reduction, copy issue and completion, boundary decision, step, skip,
// checkpoint) is recorded as a small tuple of integers and folded into a 64-bit digest, so two runs with the
// same scenario and seed can be compared in one number, whatever else differs (thread count, scalar type of
// the checker). Lines are kept only when asked for, because formatting costs more than the arithmetic.
// Digests are compared within one process, never stored, so the mixing may change between versions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accumcheck::sim {

enum class EventKind : std::uint8_t {
  backward,           // rank-local backward of micro-batch: (micro_step, rank count)
  reduce_bucket,      // reduction of one bucket: (bucket index, first element, element count)
  copy_issue,         // asynchronous copy queued: (copy id, direction, element count)
  copy_complete,      // asynchronous copy landed: (copy id)
  synchronize,        // the engine waited for every pending copy: (pending count)
  boundary,           // boundary decision at a backward: (micro_step, is boundary)
  step,               // optimizer step applied: (global step)
  step_not_boundary,  // step() called off a boundary: nothing applied (micro_step)
  skip_step,          // overflow: the step is skipped and the loss scale backs off (global step)
  zero_grad,          // accumulated gradients cleared
  all_gather,         // parameters gathered from their owners: (element count)
  checkpoint_save,
  checkpoint_load,
  offload_accumulate,  // DeepSpeed: cpu buffer added into the device gradient: (parameter, micro_step_id)
  offload_save,        // DeepSpeed: device gradient saved into the cpu buffer: (parameter, micro_step_id)
  offload_overwrite,   // DeepSpeed: fp32 gradient overwritten at the boundary: (parameter)
};

std::string_view to_string(EventKind kind);

class Trace {
 public:
  explicit Trace(bool keep_lines = false) : keep_lines_(keep_lines) {}

  void record(EventKind kind, std::int64_t a = 0, std::int64_t b = 0, std::int64_t c = 0) {
    std::uint64_t h = digest_;
    h = step(h, static_cast<std::uint64_t>(kind));
    h = step(h, static_cast<std::uint64_t>(a));
    h = step(h, static_cast<std::uint64_t>(b));
    h = step(h, static_cast<std::uint64_t>(c));
    digest_ = h ^ (h >> 32);
    ++event_count_;
    if (keep_lines_) lines_.push_back(format(kind, a, b, c));
  }

  // As a Trace(keep_lines) made now, keeping the storage lines_ has (the engines' reset).
  void reset(bool keep_lines) {
    keep_lines_ = keep_lines;
    digest_ = kDigestStart;
    event_count_ = 0;
    lines_.clear();
  }

  std::uint64_t digest() const { return digest_; }
  std::uint64_t event_count() const { return event_count_; }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  // A word at a time: xor, then multiply by an odd constant, and a shift folding the high half into the low one
  // once per event, so that the next event's words meet every bit. Each step is a bijection of the digest for a
  // fixed word and of the word for a fixed digest, so two traces that differ in one word of one event always end in
  // different digests. MurmurHash3's finaliser on every word, which this replaces, cost 2% of a small trial's CPU
  // time (the byte-wise FNV-1a before it 3% of its instructions).
  static std::uint64_t step(std::uint64_t h, std::uint64_t word) { return (h ^ word) * 0xFF51AFD7ED558CCDULL; }
  static std::string format(EventKind kind, std::int64_t a, std::int64_t b, std::int64_t c);

  bool keep_lines_;
  static constexpr std::uint64_t kDigestStart = 0xCBF29CE484222325ULL;
  std::uint64_t digest_ = kDigestStart;
  std::uint64_t event_count_ = 0;
  std::vector<std::string> lines_;
};

}  // namespace accumcheck::sim
