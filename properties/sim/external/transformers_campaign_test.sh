#!/usr/bin/env bash
# The short version of the real-transformers campaigns, for CI (docs/transformers-adapter.md). With the releases of
# scripts/transformers-env.sh installed:
#   - the real 4.45.2 Trainer fails property 1 (each micro-batch's token mean, divided by G) and shrinks to one
#     rank, G = 2, one window, one trainable scalar;
#   - its micro-batch rotation (property 4) stays clean: the mean of means does not depend on the order, and the
#     rounding of its own divisions is bounded by its model's arithmetic (a false positive before that);
#   - on two ranks (DDP over gloo) the real 4.46.3 fails property 1 (num_items_in_batch is this rank's count:
#     average_tokens_across_devices off by default) and shrinks to two ranks, G = 1, one window, one scalar;
#   - 4.46.3 on one rank, and 5.24.0 on one or two (the flag on by default since 4.54.0), stay clean on ordinary
#     loops over all nine properties;
#   - each release agrees with its layer model (property 10);
#   - the canary: real 4.45.2 against the model of 4.46 is a finding (the differential check can fail);
#   - over real DeepSpeed (adapter:transformers-X+deepspeed-Y): 4.46.3 + 0.16.4 fails property 1, shrunk to one
#     rank and one window (4.46.3 divides by G twice under DeepSpeed), and agrees with its layer model (whose
#     DeepSpeed variant keeps that 1/G); a canary: the same release against the 4.49 layer is a finding;
#     5.24.0 + 0.16.4 finds DeepSpeed's drop (offload on against off) and agrees with its model; 5.24.0 + 0.19.8,
#     the newest pair, stays clean on ordinary loops with offload.
# Skips (exit 77) when a release is not installed. Usage: transformers_campaign_test.sh ACCUMCHECK_BINARY REPO_ROOT
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
repo="$2"
venv="${ACCUMCHECK_VENV_DIR:-$repo/.venv}"
releases=(4.45.2 4.46.3 5.24.0)
for v in "${releases[@]}"; do
  if [ ! -x "$venv/transformers/$v/bin/python" ]; then
    echo "skipped: transformers $v is not installed in $venv/transformers (run scripts/transformers-env.sh)"
    exit 77
  fi
done
for v in 0.16.4 0.19.8; do
  if [ ! -f "$venv/deepspeed/$v/.accumcheck-stamp" ]; then
    echo "skipped: DeepSpeed $v is not installed in $venv/deepspeed (run scripts/deepspeed-env.sh)"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../../expect.sh"
# `found_minimal TARGET TRIALS NAME WANT MESSAGE`: property 1 fails on TARGET within TRIALS trials (seed 1), and the
# shrunk scenario has the fields of WANT (expect_minimal); the finding and report go to $work/NAME.
found_minimal() {
  local target="$1" trials="$2" name="$3" want="$4" message="$5"
  expect 1 "FOUND  ${target//+/[+]}  accumulated_update_equals_full_batch_update" -- fuzz --target "$target" \
    --property accumulated_update_equals_full_batch_update --trials "$trials" --seed 1 --no-corpus --quiet \
    --findings "$work/$name" --report "$work/$name.json"
  expect_minimal "$work/$name.json" "$want" "$message"
}

found_minimal adapter:transformers-4.45.2 100 mean '{"accumulation_steps": 2, "ranks": 1, "parameters": 1, "steps": 1}' \
  "the mean of means shrinks to G = 2, one rank, one window, one trainable scalar"

expect 0 "clean  adapter:transformers-4.45.2  micro_batch_order_does_not_change_the_update" -- fuzz \
  --target adapter:transformers-4.45.2 --property micro_batch_order_does_not_change_the_update --trials 60 --seed 1 \
  --no-corpus --quiet
found_minimal adapter:transformers-4.46.3 100 per-rank '{"accumulation_steps": 1, "ranks": 2, "parameters": 1, "steps": 1}' \
  "4.46.3's per-rank count shrinks to two ranks, G = 1, one window, one trainable scalar"
expect 0 "clean  adapter:transformers-4.46.3  multi_step_trajectory_equals_full_batch_trajectory" -- fuzz \
  --target adapter:transformers-4.46.3 --ordinary --max-ranks 1 --trials 30 --seed 2 --no-corpus --quiet
expect 0 "clean  adapter:transformers-5.24.0  multi_step_trajectory_equals_full_batch_trajectory" -- fuzz \
  --target adapter:transformers-5.24.0 --ordinary --trials 40 --seed 2 --no-corpus --quiet --report "$work/524.json"
expect_exercised "$work/524.json" "2 ranks" "5.24.0's clean campaign ran two-rank scenarios"
for v in "${releases[@]}"; do
  expect 0 "clean  adapter:transformers-$v  target_agrees_with_its_behavioural_model" -- fuzz \
    --target "adapter:transformers-$v" --differential --trials 100 --seed 3 --no-corpus --quiet
done
expect 1 "FOUND  adapter:tf-4.45.2-as-4.46  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$venv/transformers/4.45.2/bin/python $repo/adapters/transformers/adapter.py --version 4.45.2" \
  --adapter-name tf-4.45.2-as-4.46 --adapter-model transformers@4.46+reference --differential --trials 100 --seed 3 \
  --no-corpus --quiet --findings "$work/canary"

# Over real DeepSpeed.
found_minimal adapter:transformers-4.46.3+deepspeed-0.16.4 40 twice '{"ranks": 1, "steps": 1}' \
  "4.46.3 over DeepSpeed shrinks to one rank, one window"
expect 0 "clean  adapter:transformers-4.46.3[+]deepspeed-0.16.4  target_agrees_with_its_behavioural_model" -- fuzz \
  --target adapter:transformers-4.46.3+deepspeed-0.16.4 --differential --trials 100 --seed 2 --no-corpus --quiet
expect 1 "FOUND  adapter:tf-4.46.3-ds-as-4.49  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$venv/transformers/4.46.3/bin/python $repo/adapters/transformers/adapter.py --version 4.46.3 --deepspeed 0.16.4" \
  --adapter-name tf-4.46.3-ds-as-4.49 --adapter-model transformers@4.49+deepspeed@0.16.4 --differential --trials 40 \
  --seed 2 --no-corpus --quiet --findings "$work/canary-4.49"
expect 1 "FOUND  adapter:transformers-5.24.0[+]deepspeed-0.16.4  offload_and_partitioning_do_not_change_the_update" -- \
  fuzz --target adapter:transformers-5.24.0+deepspeed-0.16.4 --property offload_and_partitioning_do_not_change_the_update \
  --ordinary --offload on --trials 60 --seed 1 --no-corpus --quiet --findings "$work/drop"
expect 0 "clean  adapter:transformers-5.24.0[+]deepspeed-0.16.4  target_agrees_with_its_behavioural_model" -- fuzz \
  --target adapter:transformers-5.24.0+deepspeed-0.16.4 --differential --trials 100 --seed 2 --no-corpus --quiet
expect 0 "clean  adapter:transformers-5.24.0[+]deepspeed-0.19.8  multi_step_trajectory_equals_full_batch_trajectory" -- \
  fuzz --target adapter:transformers-5.24.0+deepspeed-0.19.8 --ordinary --offload on --trials 40 --seed 2 \
  --no-corpus --quiet

echo "transformers campaign checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
