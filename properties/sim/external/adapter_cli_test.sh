#!/usr/bin/env bash
# External targets end to end through the accumcheck command: the exact minimal adapter stays clean, every
# misbehaviour of adapters/examples/faulty_adapter.py is reported as a target fault or a start error (exit 3
# or 2, never 0 and never a finding) with what went wrong, a fault that happens once is survived by the retry,
# and, with the PyTorch environment (scripts/adapters-env.sh), the torch-loop adapter stays clean in fp32 and
# fp64 while every example mistake is found and shrunk to its minimum.
# Usage: adapter_cli_test.sh ACCUMCHECK_BINARY REPO_ROOT
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
repo="$2"
examples="$repo/adapters/examples"
torch_python="$repo/.venv/torch/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../../expect.sh"
fault() {  # fault MODE CODE PATTERN [EXTRA ARGS...]
  local mode="$1" code="$2" pattern="$3"
  shift 3
  expect "$code" "$pattern" -- fuzz --adapter-command "python3 $examples/faulty_adapter.py --fault $mode --state $work/$mode.state" \
    --adapter-name "faulty-$mode" --property accumulated_update_equals_full_batch_update --trials 3 --no-corpus --findings "$work/f-$mode" "$@"
}

# The exact minimal adapter: clean, and compared by equality.
expect 0 "clean  adapter:minimal_adapter  accumulated_update_equals_full_batch_update  200 trials" -- \
  fuzz --adapter-command "python3 $examples/minimal_adapter.py" --trials 200 --no-corpus --findings "$work/f-minimal" --jobs 2
# What it cannot run is never clean: a property it never runs is UNCHECKED (exit 4 when named), and one it runs on
# fewer than half of the trials says so.
expect 4 "UNCHECKED  adapter:minimal_adapter  reported_norm_is_the_norm_of_the_applied_gradient  60 trials, none could run" -- \
  fuzz --adapter-command "python3 $examples/minimal_adapter.py" --property reported_norm_is_the_norm_of_the_applied_gradient \
  --trials 60 --no-corpus --quiet --findings "$work/f-minimal-unchecked"
expect 0 "mostly unchecked: only 23 of 60 trials could run this property" -- \
  fuzz --adapter-command "python3 $examples/minimal_adapter.py" --property checkpoint_then_resume_equals_running_straight_through \
  --trials 60 --no-corpus --quiet --findings "$work/f-minimal-mostly"

# Every misbehaviour: a target fault (exit 3) or a start error (exit 2), named, with the adapter's stderr where it wrote one.
fault crash-on-run 3 "FAULT .*target fault|closed its stdout.*exited with status 3"
fault hang 3 "no reply to the run request within 500 ms" --adapter-timeout 0.5
fault garbage 3 "is not JSON"
fault partial-line 3 "after a partial line"
fault wrong-id 3 "answers id"
# The adapter exits right after hello: whether the run request is written before it is gone (then its stdout
# closes) or after (then the write fails) is a race; both messages name the exit.
fault exit-early 3 "closed its stdout|could not send the run request; the adapter process is exited with status 0"
fault bad-capabilities 2 "impossible capabilities: .*world_sizes"
fault error-reply 3 "error of kind 'failed'"
fault slow-start 2 "no handshake within 1000 ms" --adapter-start-timeout 1
fault stdout-noise 2 "the handshake reply is not JSON"
# A fault that happens once is retried and the campaign goes on clean.
fault crash-once 0 "clean  adapter:faulty-crash-once  accumulated_update_equals_full_batch_update  3 trials"
expect 2 "cannot start|not found|exited" -- fuzz --adapter-command "/nonexistent/adapter" --trials 1 --no-corpus
expect 2 "unknown adapter 'nope'" -- fuzz --target adapter:nope --trials 1

# Replay works through the protocol, from the finding's recorded command.
if [ -x "$torch_python" ]; then
  expect 0 "clean  adapter:torch-loop  accumulated_update_equals_full_batch_update  40 trials" -- \
    fuzz --target adapter:torch-loop --trials 40 --no-corpus --findings "$work/f-torch32"
  expect 0 "clean  adapter:torch-loop@fp64  multi_step_trajectory_equals_full_batch_trajectory  40 trials" -- \
    fuzz --target adapter:torch-loop@fp64 --trials 40 --no-corpus --findings "$work/f-torch64"
  # Real DDP with two gloo ranks: clean, and the rank-local normalisation found and shrunk to two ranks.
  expect 0 "clean  adapter:torch-ddp  accumulated_update_equals_full_batch_update  40 trials" -- \
    fuzz --target adapter:torch-ddp --property accumulated_update_equals_full_batch_update --trials 40 --no-corpus --findings "$work/f-ddp"
  expect 1 "FOUND  adapter:ddp_local_token_mean  accumulated_update_equals_full_batch_update" -- \
    fuzz --adapter-command "$torch_python $examples/ddp_local_token_mean.py" --property accumulated_update_equals_full_batch_update \
    --trials 200 --no-corpus --findings "$work/f-ddp-mistake"
  checks=$((checks + 1))
  if python3 -c "import json,sys,glob; s=json.load(open(glob.glob(sys.argv[1]+'/*.json')[0]))['scenario']; assert s['engine']['rank_count']==2 and len(s['steps'])==1 and len(s['steps'][0])==1" "$work/f-ddp-mistake"; then
    echo "ok:   ddp_local_token_mean shrinks to two ranks, one step, one micro-batch"
  else
    echo "FAIL: ddp_local_token_mean did not shrink to two ranks, one step, one micro-batch"; failures=$((failures + 1))
  fi
  for mistake in mean_of_micro_batch_means zero_grad_inside_window clip_every_micro_step; do
    expect 1 "FOUND  adapter:$mistake  accumulated_update_equals_full_batch_update" -- \
      fuzz --adapter-command "$torch_python $examples/$mistake.py" --property accumulated_update_equals_full_batch_update \
      --trials 200 --no-corpus --findings "$work/f-$mistake"
    file=$(ls "$work/f-$mistake"/*.json 2>/dev/null | head -1)
    checks=$((checks + 1))
    # The minimum: one rank, one step, a window of two micro-batches.
    if [ -n "$file" ] && python3 - "$file" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))
s = f["scenario"]
assert s["engine"]["rank_count"] == 1, s["engine"]
assert len(s["steps"]) == 1, len(s["steps"])
assert [len(w) for w in s["steps"]] == [2], [len(w) for w in s["steps"]]
assert f["adapter"]["command"].endswith(".py"), f["adapter"]
EOF
    then
      echo "ok:   $mistake shrinks to one rank, one step, two micro-batches"
      expect 1 "reproduced bit for bit" -- replay "$file"
      # The exported script runs the user's own loop again and fails while the mistake is there.
      expect 0 "wrote" -- export "$file" --format pytorch -o "$work/$mistake-repro.py"
      checks=$((checks + 1))
      if out=$(cd / && python3 "$work/$mistake-repro.py" 2>&1); then
        echo "FAIL: the exported script of $mistake passed"; echo "$out" | tail -5; failures=$((failures + 1))
      elif grep -q "still fails" <<<"$out"; then
        echo "ok:   the exported script of $mistake fails while the mistake is there"
      else
        echo "FAIL: the exported script of $mistake did not run:"; echo "$out" | tail -5; failures=$((failures + 1))
      fi
    else
      echo "FAIL: $mistake did not shrink to one rank, one step, two micro-batches ($file)"
      failures=$((failures + 1))
    fi
  done
else
  echo "skip: the PyTorch checks need $torch_python (run scripts/adapters-env.sh)"
fi

echo "adapter command checks: $((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
