// Explain: a finding's story in words, for the person who has to decide what it means.
//
// The text walks from what failed to why it matters: the target and what it models, the property, the
// configuration in two sentences, the data in brief (per step, micro-batch and rank: sequences and token
// counts), expected versus actual as exact rationals with their nearest doubles, the membership summary when
// the property produced one, a one-line hint naming the bug catalogue entry (/work/shared/bug-catalogue.md)
// the facts match, and the replay command. The hint is given only when facts computed from the finding
// support it (for example: the actual step-0 gradient equals, exactly, the sum of micro-batches 0 and G-1
// alone, under ZeRO-2 with offload and G >= 3); otherwise there is none. The text is a pure function of the
// finding: no clock, no paths, no randomness.
//
// The pieces are public because the Markdown exporter (surface/reproducer.h) tells the same story in a table.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/finding.h"

namespace accumcheck::surface {

using fuzz::Finding;

// The whole story, ending with the replay command; lines end with '\n'.
std::string explain(const Finding& finding);

// One or two sentences: ranks, G, ZeRO stage, offload, boundary mode and loop, precision, scalar, model kind and
// sizes, aggregation, optimizer, clipping, step count (and checkpoint, buckets, loss scaling when present).
std::string describe_configuration(const sim::Scenario& scenario, sim::ScalarKind scalar);

// The data in brief, one line per step and one per micro-batch (sequences and token counts per rank), at most
// line_count_max lines (the rest is counted in a last line). Token values are listed too when the whole
// scenario has at most 16 tokens.
std::vector<std::string> describe_data(const sim::Scenario& scenario, std::size_t line_count_max = 32);

// One token as "x=(1, 0) y=(-1)", "id=3 y=(...)", with " expert=e" and " masked" where they apply.
std::string describe_token(const models::ModelSpec& spec, const models::Sequence<models::Rational>& sequence, int token_index);

// "step 0 / gradient / weight[0,0]: expected 37 (37), actual 101/3 (33.666666666666664)".
std::string describe_mismatch(const properties::Mismatch& mismatch);

// One wrong entry of a membership report in words: "dropped", "applied 2 times (expected once)", "leaked into
// step 1 (1 times; expected 0)", or, in a step whose applied gradient is not a whole sum of micro-batch
// gradients (the decoder then lists every micro-batch of the step with multiplicity 0), "wrong weight".
std::string describe_membership_entry(const properties::MembershipReport& report, const properties::MembershipEntry& entry);

// The catalogue entry the finding resembles, as one sentence starting "resembles catalogue section", or
// empty when the facts do not match one.
std::string catalogue_hint(const Finding& finding);

// The framework layer (sim/loss_normaliser.h) a target name uses: the middle part of
// "preset+framework+engine", the first of "framework+engine", and "reference" for a bare engine name or
// "preset+engine". Purely syntactic, so it works for engines this build has not registered.
std::string framework_layer_of(std::string_view target_name);

// The target's description (sim::make_target(name)->description()), or a sentence saying this build does not
// know the name.
std::string target_description(std::string_view target_name);

// The scenario as the target runs it (Target::as_run: a preset applied to the engine configuration); the
// scenario itself for a name this build does not know.
sim::Scenario scenario_as_run(std::string_view target_name, const sim::Scenario& scenario);

}  // namespace accumcheck::surface
