// RapidCheck generators for sim/ scenarios: every valid engine configuration, weighted toward the small and
// the awkward (G = 3, one rank, uneven manual windows, ranks and micro-batches without tokens, checkpoints).
#pragma once

#include <rapidcheck.h>

#include "properties/generators/model_generators.h"
#include "sim/scenario.h"

namespace accumcheck::properties {

inline rc::Gen<sim::EngineConfig> gen_engine_config() {
  return rc::gen::exec([] {
    sim::EngineConfig e;
    e.rank_count = *rc::gen::weightedOneOf<int>({{3, rc::gen::just(1)}, {2, rc::gen::inRange(2, 4)}});
    e.accumulation_steps = *rc::gen::weightedOneOf<int>({{1, rc::gen::just(1)}, {3, rc::gen::inRange(2, 5)}});
    e.zero_stage = *rc::gen::inRange(0, 4);
    e.offload = *rc::gen::arbitrary<bool>();
    e.bucket_element_count = *rc::gen::weightedOneOf<int>({{1, rc::gen::just(0)}, {1, rc::gen::inRange(1, 6)}});
    const int style = *rc::gen::inRange(0, 3);
    if (style == 0) {
      e.boundary = sim::BoundaryMode::automatic;
    } else if (style == 1) {
      e.boundary = sim::BoundaryMode::manual;
      e.step_after_every_backward = *rc::gen::arbitrary<bool>();
    } else {  // OpenRLHF's dynamic batching: G = 1, every backward a boundary, one step() per window
      e.boundary = sim::BoundaryMode::automatic;
      e.accumulation_steps = 1;
      e.step_after_every_backward = false;
    }
    return e;
  });
}

// Window sizes follow the config: exactly G under an automatic boundary with step() after every backward,
// otherwise 1..4 micro-batches.
inline rc::Gen<sim::Scenario> gen_scenario() {
  return rc::gen::exec([] {
    sim::Scenario s;
    s.training.model = *gen_model_spec();
    s.training.aggregation = *gen_aggregation();
    s.training.optimizer = *gen_optimizer();
    if (*rc::gen::inRange(0, 4) == 0) s.training.max_grad_norm = *gen_positive_rational();
    s.engine = *gen_engine_config();
    s.initial_parameters = *gen_parameters(s.training.model);
    const int step_count = *rc::gen::inRange(1, 4);
    const bool fixed_windows = s.engine.boundary == sim::BoundaryMode::automatic && s.engine.step_after_every_backward;
    for (int step = 0; step < step_count; ++step) {
      sim::StepPlan plan;
      const int window = fixed_windows ? s.engine.accumulation_steps : *rc::gen::inRange(1, 5);
      for (int k = 0; k < window; ++k) {
        sim::MicroBatch mb;
        for (int r = 0; r < s.engine.rank_count; ++r) {
          const int count = *rc::gen::weightedOneOf<int>({{1, rc::gen::just(0)}, {4, rc::gen::inRange(1, 3)}});
          std::vector<models::Sequence<Rational>> seqs;
          for (int i = 0; i < count; ++i) seqs.push_back(*gen_sequence(s.training.model));
          mb.rank_sequences.push_back(std::move(seqs));
        }
        plan.micro_batches.push_back(std::move(mb));
      }
      s.steps.push_back(std::move(plan));
    }
    if (*rc::gen::inRange(0, 3) == 0) s.checkpoint_after_step = *rc::gen::inRange(0, step_count);
    s.schedule_seed = *rc::gen::arbitrary<std::uint64_t>();
    return s;
  });
}

}  // namespace accumcheck::properties
