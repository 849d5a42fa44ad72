#!/usr/bin/env bash
# `accumcheck batched` (cuda/batched_command.h), on the kernel's CPU twin so that it runs on any machine: clean on
# the reference layer, a finding under OpenRLHF 0.10.2's weighting that replays bit for bit, the same findings with
# two host threads, findings on the MLP and the tied embedding that replay, an unknown layer refused, and nothing
# reported as a pass without a device.
# Usage: batched_command_test.sh ACCUMCHECK_BINARY
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../expect.sh"
expect 0 "clean  reference  accumulated_update_equals_full_batch_update  3000 trials" -- batched --cpu-twin --trials 3000 --seed 1
expect 1 "FOUND  openrlhf@0.10.2[+]reference  accumulated_update_equals_full_batch_update" -- batched --cpu-twin --trials 3000 --seed 1 --framework openrlhf@0.10.2 --findings one
expect 1 "FOUND  openrlhf@0.10.2[+]reference" -- batched --cpu-twin --trials 3000 --seed 1 --framework openrlhf@0.10.2 --findings two --jobs 2 --per-launch 500
checks=$((checks + 1))
# A finding file's name ends with the digest of its content (the command line and the paths aside).
if [ -n "$(ls one)" ] && [ "$(ls one)" = "$(ls two)" ]; then
  echo "ok:   the same finding with one job and 3000 trials per launch as with two jobs and 500"
else
  echo "FAIL: the findings differ: $(ls one) / $(ls two)"
  failures=$((failures + 1))
fi
expect 1 "reproduced bit for bit" -- replay one
# The MLP and the tied embedding are batched too: a finding on each, found and replayed.
expect 1 "FOUND  openrlhf@0.10.2[+]reference" -- batched --cpu-twin --trials 2000 --seed 2 --framework openrlhf@0.10.2 --model mlp --findings mlp
expect 1 "reproduced bit for bit" -- replay mlp
expect 1 "FOUND  openrlhf@0.10.2[+]reference" -- batched --cpu-twin --trials 2000 --seed 2 --framework openrlhf@0.10.2 --model tied_embedding --findings tied
expect 1 "reproduced bit for bit" -- replay tied
expect 0 "clean  reference" -- batched --cpu-twin --trials 2000 --seed 2 --model mlp
expect 2 "unknown framework layer 'nope'" -- batched --cpu-twin --trials 5 --framework nope
expect 2 "--trials is required" -- batched --cpu-twin
expect 2 "the most ranks is 0" -- batched --cpu-twin --trials 5 --max-ranks 0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  expect 0 "clean  reference" -- batched --trials 3000 --seed 1
else
  expect 4 "no CUDA device .*nothing was checked" -- batched --trials 5
fi
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
