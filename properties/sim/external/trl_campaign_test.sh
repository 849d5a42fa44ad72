#!/usr/bin/env bash
# The short version of the real-TRL campaigns, for CI (docs/trl-adapter.md). With the releases of scripts/trl-env.sh
# installed (TRL's SFTTrainer, its ZeRO-2 accelerate config with the optimizer offloaded to the CPU, one rank):
#   - 0.12.2 (transformers 4.46.3) over DeepSpeed 0.16.4 fails property 1 and shrinks to G = 2, one rank, one window,
#     one trainable scalar: the 4.46 Trainer's 1/G on top of DeepSpeed's (transformers PR #35808), which shows
#     from G = 2, before the drop can;
#   - the drop itself (catalogue entry 1): real 0.12.2 + 0.16.4 against its layer model with a fixed DeepSpeed
#     underneath, trl+transformers@4.46+deepspeed@0.19.8, is a finding that shrinks to G = 3 (the two differ by the
#     drop alone, which needs three micro-batches);
#   - 1.14.2 (transformers 5.24.0) over DeepSpeed 0.19.8 stays clean on ordinary loops over all nine properties;
#   - each agrees with its layer model, trl+transformers@4.46+deepspeed@0.16.4 and
#     trl+transformers@4.54+deepspeed@0.19.8 (property 10);
#   - the canary: real 1.14.2 + 0.19.8 against the model with DeepSpeed 0.16.4 underneath is a finding, at G = 3.
# Skips (exit 77) when a release is not installed. Usage: trl_campaign_test.sh ACCUMCHECK_BINARY REPO_ROOT
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
repo="$2"
venv="${ACCUMCHECK_VENV_DIR:-$repo/.venv}"
for v in 0.12.2 1.14.2; do
  if [ ! -f "$venv/trl/$v/.accumcheck-stamp" ]; then
    echo "skipped: TRL $v is not installed in $venv/trl (run scripts/trl-env.sh)"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../../expect.sh"
old=trl-0.12.2+deepspeed-0.16.4
new=trl-1.14.2+deepspeed-0.19.8

minimal='"ranks": 1, "parameters": 1, "steps": 1'
expect 1 "FOUND  adapter:${old//+/[+]}  accumulated_update_equals_full_batch_update" -- fuzz --target "adapter:$old" \
  --property accumulated_update_equals_full_batch_update --trials 60 --seed 1 --no-corpus --quiet \
  --findings "$work/old" --report "$work/old.json"
expect_minimal "$work/old.json" "{\"accumulation_steps\": 2, $minimal}" \
  "TRL 0.12.2 on transformers 4.46.3 shrinks to G = 2, one rank, one window, one trainable scalar (the Trainer's 1/G)"
old_command="$venv/trl/0.12.2/bin/python $repo/adapters/trl/adapter.py --version 0.12.2 --transformers 4.46.3 --deepspeed 0.16.4"
expect 1 "FOUND  adapter:trl-0.12.2-as-0.19.8  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$old_command" --adapter-name trl-0.12.2-as-0.19.8 \
  --adapter-model trl+transformers@4.46+deepspeed@0.19.8 --differential --trials 100 --seed 3 --no-corpus --quiet \
  --findings "$work/drop" --report "$work/drop.json"
expect_minimal "$work/drop.json" "{\"accumulation_steps\": 3, $minimal}" \
  "TRL 0.12.2 over DeepSpeed 0.16.4 differs from the same stack over a fixed DeepSpeed by the drop: G = 3"
expect 0 "clean  adapter:${new//+/[+]}  multi_step_trajectory_equals_full_batch_trajectory" -- fuzz \
  --target "adapter:$new" --ordinary --trials 40 --seed 2 --no-corpus --quiet
for a in "$old" "$new"; do
  expect 0 "clean  adapter:${a//+/[+]}  target_agrees_with_its_behavioural_model" -- fuzz --target "adapter:$a" \
    --differential --trials 100 --seed 3 --no-corpus --quiet
done
expect 1 "FOUND  adapter:trl-1.14.2-as-0.16.4  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$venv/trl/1.14.2/bin/python $repo/adapters/trl/adapter.py --version 1.14.2 --transformers 5.24.0 --deepspeed 0.19.8" \
  --adapter-name trl-1.14.2-as-0.16.4 --adapter-model trl+transformers@4.54+deepspeed@0.16.4 --differential \
  --trials 100 --seed 3 --no-corpus --quiet --findings "$work/canary" --report "$work/canary.json"
expect_minimal "$work/canary.json" "{\"accumulation_steps\": 3, $minimal}" \
  "the canary (TRL 1.14.2 over 0.19.8 against its model over 0.16.4) shrinks to the drop's G = 3"

echo "trl campaign checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
