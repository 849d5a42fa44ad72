#!/usr/bin/env bash
# The short version of the real-DeepSpeed campaigns, for CI (the long one: scripts/deepspeed-differential.sh).
# With the releases of scripts/deepspeed-env.sh installed:
#   - real 0.16.4 with ZeRO-2 + offload fails property 1 and shrinks to G = 3, one rank, one step, one scalar;
#   - real 0.19.8 stays clean on ordinary loops over all nine properties;
#   - the differential check of real 0.16.4 and 0.19.8 against their models (deepspeed@X.Y.Z) stays clean, with
#     the whole generator (two ranks, experts, manual boundaries, several backwards per step, checkpoints);
#   - the canary: real 0.16.4 against the model of 0.15.1 is a finding (the differential check can fail).
# Skips (exit 77) when a release is not installed. Usage: deepspeed_campaign_test.sh ACCUMCHECK_BINARY REPO_ROOT
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
repo="$2"
venv="${ACCUMCHECK_VENV_DIR:-$repo/.venv}"
for v in 0.16.4 0.19.8; do
  if [ ! -x "$venv/deepspeed/$v/bin/python" ]; then
    echo "skipped: DeepSpeed $v is not installed in $venv/deepspeed (run scripts/deepspeed-env.sh)"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../../expect.sh"

expect 1 "FOUND  adapter:deepspeed-0.16.4  accumulated_update_equals_full_batch_update" -- fuzz --target adapter:deepspeed-0.16.4 \
  --ordinary --offload on --property accumulated_update_equals_full_batch_update --trials 300 --seed 1 --no-corpus --quiet \
  --findings "$work/drop" --report "$work/drop.json"
expect_minimal "$work/drop.json" '{"accumulation_steps": 3, "ranks": 1, "parameters": 1, "zero_stage": 2, "offload": true}' \
  "the drop shrinks to G = 3, one rank, one trainable scalar, ZeRO-2 + offload"

expect 0 "clean  adapter:deepspeed-0.19.8  multi_step_trajectory_equals_full_batch_trajectory" -- fuzz \
  --target adapter:deepspeed-0.19.8 --ordinary --trials 40 --seed 2 --no-corpus --quiet
for v in 0.16.4 0.19.8; do
  expect 0 "clean  adapter:deepspeed-$v  target_agrees_with_its_behavioural_model" -- fuzz --target "adapter:deepspeed-$v" \
    --differential --trials 150 --seed 3 --no-corpus --quiet
done
expect 1 "FOUND  adapter:ds-0.16.4-as-0.15.1  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$venv/deepspeed/0.16.4/bin/python $repo/adapters/deepspeed/adapter.py --version 0.16.4" \
  --adapter-name ds-0.16.4-as-0.15.1 --adapter-model deepspeed@0.15.1 --differential --trials 200 --seed 3 --no-corpus --quiet \
  --findings "$work/canary"

echo "deepspeed campaign checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
