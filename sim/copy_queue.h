// CopyQueue: asynchronous copies between host and device memory whose completion order the schedule chooses.
//
// A copy is issued with a source buffer and an operation applied on completion (overwrite or add into the
// destination). The source is read when the copy completes, not when it is issued, as a DMA engine reads
// it: an engine that reuses a source buffer, or reads a destination, before waiting for the copy gets a wrong
// value instead of passing by luck. poll() lets the schedule complete a random subset of pending copies (each
// with probability 1/2, in a random order); synchronize() completes all of them, also in a random order.
// Copies are independent streams here: nothing orders two pending copies except a synchronize between them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "sim/schedule.h"
#include "sim/trace.h"

namespace accumcheck::sim {

enum class CopyDirection : std::uint8_t { device_to_host = 0, host_to_device = 1 };

template <class S>
using Buffer = std::vector<S>;

template <class S>
class CopyQueue {
 public:
  enum class Op : std::uint8_t { overwrite, add };

  CopyQueue(Stream stream, Trace& trace) : stream_(stream), trace_(&trace) {}

  // Queues dst[offset + i] (op)= src[i] for i in [0, src.size()), read at completion.
  void issue(CopyDirection direction, std::shared_ptr<const Buffer<S>> src, std::shared_ptr<Buffer<S>> dst,
             std::size_t dst_offset, Op op) {
    ACCUMCHECK_ASSERT(dst_offset + src->size() <= dst->size());
    const std::uint64_t id = next_id_++;
    trace_->record(EventKind::copy_issue, static_cast<std::int64_t>(id), static_cast<std::int64_t>(direction),
                   static_cast<std::int64_t>(src->size()));
    pending_.push_back(Pending{id, std::move(src), std::move(dst), dst_offset, op});
  }

  // Completes each pending copy with probability 1/2, in a random order.
  void poll() {
    if (pending_.empty()) return;
    keep_.clear();
    done_.clear();
    for (auto& p : pending_) (stream_.coin() ? done_ : keep_).push_back(std::move(p));
    pending_.swap(keep_);
    complete_done();
  }

  // Completes every pending copy.
  void synchronize() {
    trace_->record(EventKind::synchronize, static_cast<std::int64_t>(pending_.size()));
    done_.clear();
    done_.swap(pending_);
    complete_done();
  }

  std::size_t pending_count() const { return pending_.size(); }

  // As a queue made now on `stream` (same trace): pending copies dropped uncompleted, ids from 0 again; the
  // scratch vectors keep their storage (ReferenceEngine::reset).
  void reset(Stream stream) {
    stream_ = stream;
    next_id_ = 0;
    pending_.clear();
    keep_.clear();
    done_.clear();
  }

 private:
  struct Pending {
    std::uint64_t id;
    std::shared_ptr<const Buffer<S>> src;
    std::shared_ptr<Buffer<S>> dst;
    std::size_t dst_offset;
    Op op;
  };

  // Completes done_ in a random order, then lets go of its buffers. done_, keep_ and order_ are scratch kept between
  // calls, so that a poll allocates nothing once they have grown.
  void complete_done() {
    stream_.permutation_into(static_cast<int>(done_.size()), order_);
    for (int i : order_) {
      Pending& p = done_[static_cast<std::size_t>(i)];
      Buffer<S>& dst = *p.dst;
      for (std::size_t j = 0; j < p.src->size(); ++j) {
        if (p.op == Op::overwrite) dst[p.dst_offset + j] = (*p.src)[j];
        else dst[p.dst_offset + j] += (*p.src)[j];
      }
      trace_->record(EventKind::copy_complete, static_cast<std::int64_t>(p.id));
    }
    done_.clear();
  }

  Stream stream_;
  Trace* trace_;
  std::uint64_t next_id_ = 0;
  std::vector<Pending> pending_;
  std::vector<Pending> keep_, done_;
  std::vector<int> order_;  // complete_done's permutation
};

}  // namespace accumcheck::sim
