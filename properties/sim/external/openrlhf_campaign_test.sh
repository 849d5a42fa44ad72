#!/usr/bin/env bash
# The short version of the real-OpenRLHF campaigns, for CI (docs/openrlhf-adapter.md). With the releases of
# scripts/openrlhf-env.sh installed (OpenRLHF's SFTTrainer.fit over the DeepSpeed each pins, one rank, fp32):
#   - 0.10.2 over DeepSpeed 0.18.9 fails property 1 (the mean of micro-batch means, catalogue entry 2) and shrinks
#     to one rank, G = 2, one window, one trainable scalar;
#   - 0.10.4 over DeepSpeed 0.19.1 (the window-global count of PR #1249) stays clean on ordinary loops over all
#     nine properties;
#   - each of the three agrees with its layer model, openrlhf@X+deepspeed@Y (property 10);
#   - the canary: real 0.10.2 against the model of 0.10.4 (over the same DeepSpeed) is a finding.
# Skips (exit 77) when a release is not installed. Usage: openrlhf_campaign_test.sh ACCUMCHECK_BINARY REPO_ROOT
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
repo="$2"
venv="${ACCUMCHECK_VENV_DIR:-$repo/.venv}"
for v in 0.10.2 0.10.3 0.10.4; do
  if [ ! -f "$venv/openrlhf/$v/.accumcheck-stamp" ]; then
    echo "skipped: OpenRLHF $v is not installed in $venv/openrlhf (run scripts/openrlhf-env.sh)"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../../expect.sh"
old=openrlhf-0.10.2+deepspeed-0.18.9
mid=openrlhf-0.10.3+deepspeed-0.18.9
new=openrlhf-0.10.4+deepspeed-0.19.1

expect 1 "FOUND  adapter:${old//+/[+]}  accumulated_update_equals_full_batch_update" -- fuzz --target "adapter:$old" \
  --property accumulated_update_equals_full_batch_update --trials 40 --seed 1 --no-corpus --quiet \
  --findings "$work/means" --report "$work/means.json"
expect_minimal "$work/means.json" '{"accumulation_steps": 2, "ranks": 1, "parameters": 1, "steps": 1}' \
  "OpenRLHF 0.10.2's mean of means shrinks to G = 2, one rank, one window, one trainable scalar"
expect 0 "clean  adapter:${new//+/[+]}  multi_step_trajectory_equals_full_batch_trajectory" -- fuzz \
  --target "adapter:$new" --ordinary --trials 40 --seed 2 --no-corpus --quiet
for a in "$old" "$mid" "$new"; do
  expect 0 "clean  adapter:${a//+/[+]}  target_agrees_with_its_behavioural_model" -- fuzz --target "adapter:$a" \
    --differential --trials 100 --seed 3 --no-corpus --quiet
done
expect 1 "FOUND  adapter:orl-0.10.2-as-0.10.4  target_agrees_with_its_behavioural_model" -- fuzz \
  --adapter-command "$venv/openrlhf/0.10.2/bin/python $repo/adapters/openrlhf/adapter.py --version 0.10.2 --deepspeed 0.18.9" \
  --adapter-name orl-0.10.2-as-0.10.4 --adapter-model openrlhf@0.10.4+deepspeed@0.18.9 --differential \
  --trials 100 --seed 3 --no-corpus --quiet --findings "$work/canary"

echo "openrlhf campaign checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
