// `accumcheck gallery`: the gallery of silent failures (docs/gallery/), generated from our own runs.
//
// For each catalogue defect that our models can train through (docs/targets.md), one longer run: a small
// synthetic regression task, hundreds of optimizer steps with Adam, trained under the buggy release's model and
// under the fixed release's model on the same data, in fp64. Recorded per step: the training loss of the step's
// window (token mean, at the parameters before the step), the loss on a held-out set, and the grad norm the
// engine reported. Beside the curves:
//   - the exact verdict of the first step: property 1 on the run cut to its first window, compared exactly
//     (fast-rational; where the defect needs bf16 storage, fp32 within the derived bound and SGD in place of Adam,
//     whose division by a root has no finite bound there; the applied gradient checked does not depend on it);
//   - the weight with which each sequence of the first window reached the optimizer under each release,
//     measured on the target (sequence_weights);
//   - the measured effect on the final held-out loss, and what it took to notice, in figures: whether the buggy
//     curve looks healthy (finite, falling), how far apart the two curves are, and the grad norm ratio.
// The task's data has two kinds of sequence, short ones (1-3 tokens) and long ones (8-16), whose targets follow
// two teachers, as short and long answers differ in supervised fine-tuning: a defect that weights sequences by
// their length then moves the optimum, while one that drops micro-batches only throws data away.
//
// Everything is a function of kGallerySeed: two runs write byte-identical gallery.json and README.md (CTest
// checks the committed docs/gallery against a fresh one). index.html carries Chart.js and is not committed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/rational.h"
#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::surface {

inline constexpr std::uint64_t kGallerySeed = 2604;  // arXiv 2604.23747, the paper whose conclusions reversed

struct GalleryEntry {
  std::string id;           // the defect's id, as in audit (docs/audit.md)
  std::string title;
  std::string where;        // docs/targets.md section and upstream references
  std::string buggy, fixed;  // target names
  std::string setting;      // the configuration in words
  sim::EngineConfig engine;
  sim::ScalarKind scalar = sim::ScalarKind::fp64;  // of the long runs
  int step_count = 300;
};

// The entries, in catalogue order.
std::vector<GalleryEntry> gallery_entries();

// The weight with which each sequence of the scenario's first window reached the optimizer on `target`: the
// window with its token counts and masks kept, on the scalar model (x = 1, SGD with lr 0, `sum` aggregation's
// loss replaced by the scenario's), run once per sequence with only that sequence's targets set to -1, so the
// applied gradient is the weight of the sequence times its supervised token count. Divided by that count: a
// token of the sequence counts this much. Labels are "k1 r0 #0 (3 tokens)", "k0 r1 #1 (1 token)".
struct SequenceWeights {
  std::vector<std::string> sequences;
  std::vector<int> token_counts;
  std::vector<models::Rational> weight;  // per supervised token
  std::string why_not;                   // empty when measured
};
SequenceWeights sequence_weights(const sim::Target& target, const sim::Scenario& scenario, sim::ScalarKind scalar);

// Trains every entry, writes DIR/index.html, DIR/gallery.json and DIR/README.md, prints a line per entry.
// Returns the command's exit code (0, or 2 when DIR cannot be written or Chart.js is missing).
int run_gallery(const std::filesystem::path& dir, std::ostream& out);

}  // namespace accumcheck::surface
