#!/usr/bin/env bash
# The short version of the real-LLaMA-Factory campaigns, for CI (docs/llamafactory-adapter.md). With the releases of
# scripts/llamafactory-env.sh installed (LLaMA-Factory's SFT trainer, its Web UI's ZeRO-2 offload config, one rank):
#   - 0.9.3 over DeepSpeed 0.16.4 fails property 1 (the offload drop, catalogue entry 1) and shrinks to one rank,
#     G = 3, one window, one trainable scalar;
#   - 0.9.5 over DeepSpeed 0.19.8 stays clean on ordinary loops over all nine properties;
#   - each agrees with its layer model, llamafactory+transformers@4.49+deepspeed@0.16.4 and
#     llamafactory+transformers@4.54+deepspeed@0.19.8 (property 10);
#   - the canary: real 0.9.5 + 0.19.8 against the model with DeepSpeed 0.16.4 underneath is a finding.
# Skips (exit 77) when a release is not installed. Usage: llamafactory_campaign_test.sh ACCUMCHECK_BINARY REPO_ROOT
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
repo="$2"
venv="${ACCUMCHECK_VENV_DIR:-$repo/.venv}"
for v in 0.9.3 0.9.5; do
  if [ ! -f "$venv/llamafactory/$v/.accumcheck-stamp" ]; then
    echo "skipped: LLaMA-Factory $v is not installed in $venv/llamafactory (run scripts/llamafactory-env.sh)"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../../expect.sh"
old=llamafactory-0.9.3+deepspeed-0.16.4
new=llamafactory-0.9.5+deepspeed-0.19.8

expect 1 "FOUND  adapter:${old//+/[+]}  accumulated_update_equals_full_batch_update" -- fuzz --target "adapter:$old" \
  --property accumulated_update_equals_full_batch_update --trials 60 --seed 1 --no-corpus --quiet \
  --findings "$work/drop" --report "$work/drop.json"
expect_minimal "$work/drop.json" '{"accumulation_steps": 3, "ranks": 1, "parameters": 1, "steps": 1}' \
  "LLaMA-Factory 0.9.3's drop shrinks to G = 3, one rank, one window, one trainable scalar"
expect 0 "clean  adapter:${new//+/[+]}  multi_step_trajectory_equals_full_batch_trajectory" -- fuzz \
  --target "adapter:$new" --ordinary --trials 40 --seed 2 --no-corpus --quiet
for a in "$old" "$new"; do
  expect 0 "clean  adapter:${a//+/[+]}  target_agrees_with_its_behavioural_model" -- fuzz --target "adapter:$a" \
    --differential --trials 100 --seed 3 --no-corpus --quiet
done
expect 1 "FOUND  adapter:lf-0.9.5-as-0.16.4  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$venv/llamafactory/0.9.5/bin/python $repo/adapters/llamafactory/adapter.py --version 0.9.5 --deepspeed 0.19.8" \
  --adapter-name lf-0.9.5-as-0.16.4 --adapter-model llamafactory+transformers@4.54+deepspeed@0.16.4 --differential \
  --trials 100 --seed 3 --no-corpus --quiet --findings "$work/canary"

echo "llamafactory campaign checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
