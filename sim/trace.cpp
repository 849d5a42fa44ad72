// Event names and line formatting for Trace.
#include "sim/trace.h"

#include "models/assert.h"

namespace accumcheck::sim {

std::string_view to_string(EventKind kind) {
  switch (kind) {
    case EventKind::backward: return "backward";
    case EventKind::reduce_bucket: return "reduce_bucket";
    case EventKind::copy_issue: return "copy_issue";
    case EventKind::copy_complete: return "copy_complete";
    case EventKind::synchronize: return "synchronize";
    case EventKind::boundary: return "boundary";
    case EventKind::step: return "step";
    case EventKind::step_not_boundary: return "step_not_boundary";
    case EventKind::skip_step: return "skip_step";
    case EventKind::zero_grad: return "zero_grad";
    case EventKind::all_gather: return "all_gather";
    case EventKind::checkpoint_save: return "checkpoint_save";
    case EventKind::checkpoint_load: return "checkpoint_load";
    case EventKind::offload_accumulate: return "offload_accumulate";
    case EventKind::offload_save: return "offload_save";
    case EventKind::offload_overwrite: return "offload_overwrite";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown EventKind");
}

std::string Trace::format(EventKind kind, std::int64_t a, std::int64_t b, std::int64_t c) {
  return std::string(to_string(kind)) + " " + std::to_string(a) + " " + std::to_string(b) + " " + std::to_string(c);
}

}  // namespace accumcheck::sim
