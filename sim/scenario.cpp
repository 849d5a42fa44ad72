// Scenario validation and the oracle's view of a scenario.
#include "sim/scenario.h"

#include <stdexcept>
#include <string>

#include "models/assert.h"

namespace accumcheck::sim {

std::string_view to_string(BoundaryMode mode) {
  switch (mode) {
    case BoundaryMode::automatic: return "automatic";
    case BoundaryMode::manual: return "manual";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown BoundaryMode");
}

BoundaryMode parse_boundary_mode(std::string_view text) {
  if (text == "automatic") return BoundaryMode::automatic;
  if (text == "manual") return BoundaryMode::manual;
  throw std::invalid_argument("unknown boundary mode '" + std::string(text) + "' (expected automatic or manual)");
}

std::string_view to_string(Precision precision) {
  switch (precision) {
    case Precision::full: return "full";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown Precision");
}

Precision parse_precision(std::string_view text) {
  if (text == "full") return Precision::full;
  if (text == "bf16") return Precision::bf16;
  if (text == "fp16") return Precision::fp16;
  throw std::invalid_argument("unknown precision '" + std::string(text) + "' (expected full, bf16 or fp16)");
}

namespace {
[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("scenario: " + what); }
}  // namespace

void validate(const Scenario& s) {
  models::validate(s.training);
  models::validate_parameters(s.training.model, s.initial_parameters);
  const EngineConfig& e = s.engine;
  if (e.rank_count < 1 || e.rank_count > kRankCountMax)
    fail("rank_count = " + std::to_string(e.rank_count) + " is outside [1, " + std::to_string(kRankCountMax) + "]");
  if (e.accumulation_steps < 1 || e.accumulation_steps > kAccumulationStepsMax)
    fail("accumulation_steps = " + std::to_string(e.accumulation_steps) + " is outside [1, " +
         std::to_string(kAccumulationStepsMax) + "]");
  if (e.zero_stage < 0 || e.zero_stage > 3) fail("zero_stage = " + std::to_string(e.zero_stage) + " is not 0, 1, 2 or 3");
  if (e.bucket_element_count < 0) fail("bucket_element_count = " + std::to_string(e.bucket_element_count) + " is negative");
  if (e.boundary == BoundaryMode::automatic && !e.step_after_every_backward && e.accumulation_steps != 1)
    fail("an automatic boundary counts step() calls, so with G = " + std::to_string(e.accumulation_steps) +
         " step() must follow every backward (use boundary = manual to step only at the end of a window)");
  if (e.loss_scaler) (void)models::LossScaler(*e.loss_scaler);  // throws on a bad scale or interval
  if (s.steps.size() > static_cast<std::size_t>(kStepCountMax))
    fail(std::to_string(s.steps.size()) + " steps exceed the bound of " + std::to_string(kStepCountMax));
  for (std::size_t step = 0; step < s.steps.size(); ++step) {
    const auto& window = s.steps[step].micro_batches;
    const auto where = [step] { return "step " + std::to_string(step); };  // built only for a message
    if (window.size() > static_cast<std::size_t>(kMicroBatchesPerWindowMax))
      fail(where() + " has " + std::to_string(window.size()) + " micro-batches, over the bound of " +
           std::to_string(kMicroBatchesPerWindowMax));
    if (e.boundary == BoundaryMode::automatic && e.step_after_every_backward &&
        static_cast<int>(window.size()) != e.accumulation_steps)
      fail(where() + " has " + std::to_string(window.size()) + " micro-batches but the automatic boundary needs exactly G = " +
           std::to_string(e.accumulation_steps) + " (use boundary = manual for uneven windows)");
    if (window.empty() && (e.boundary == BoundaryMode::manual || !e.step_after_every_backward))
      fail(where() + " has no micro-batch: the boundary is decided at a backward, so a window needs one");
    for (std::size_t k = 0; k < window.size(); ++k) {
      if (static_cast<int>(window[k].rank_sequences.size()) != e.rank_count)
        fail(where() + " micro-batch " + std::to_string(k) + " has data for " +
             std::to_string(window[k].rank_sequences.size()) + " ranks, expected R = " + std::to_string(e.rank_count));
      for (const auto& rank : window[k].rank_sequences)
        for (const auto& seq : rank) models::validate_sequence(s.training.model, seq);
    }
  }
  if (s.checkpoint_after_step &&
      (*s.checkpoint_after_step < 0 || *s.checkpoint_after_step >= static_cast<int>(s.steps.size())))
    fail("checkpoint_after_step = " + std::to_string(*s.checkpoint_after_step) + " is not a step of this scenario");
}

std::vector<models::StepBatch<Rational>> oracle_batches(const Scenario& s) {
  return oracle_batches<Rational>(s, [](const models::Sequence<Rational>& sequence) { return sequence; });
}

}  // namespace accumcheck::sim
