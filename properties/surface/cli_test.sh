#!/usr/bin/env bash
# The accumcheck command's exit codes and messages: 0 clean, 1 findings, 2 usage or input error with the
# problem named, 4 nothing checked. Usage: cli_test.sh ACCUMCHECK_BINARY
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../expect.sh"
expect 2 "required|target" -- fuzz --seed 1 --trials 5
expect 2 "no budget" -- fuzz --target reference --seed 1
expect 2 "unknown engine 'deepspeed@x'" -- fuzz --target deepspeed@x --trials 5
expect 2 "unknown property" -- fuzz --target reference --property nope --trials 5
expect 2 "is not a decimal 64-bit unsigned" -- fuzz --target reference --seed -3 --trials 5
expect 2 "unknown unit" -- fuzz --target reference --time 5y
expect 2 "fixed point rounds products without such a bound" -- fuzz --target reference --trials 5 --scalar fixed32
expect 0 "clean  reference  accumulated_update_equals_full_batch_update  64 trials" -- fuzz --target reference --trials 64 --scalar fp32 --no-corpus --findings fp32-findings
expect 1 "FOUND  deepspeed@0.16.0  accumulated_update_equals_full_batch_update" -- fuzz --target deepspeed@0.16.0 --property accumulated_update_equals_full_batch_update --trials 64 --scalar fp32 --no-corpus --ordinary --findings fp32-findings
# --max-ranks aims the generator: the Trainer 4.49 layer is wrong only on several ranks (its count per rank).
expect 1 "FOUND  transformers@4.49[+]reference  accumulated_update_equals_full_batch_update" -- fuzz --target transformers@4.49+reference --property accumulated_update_equals_full_batch_update --trials 200 --seed 1 --no-corpus --quiet --findings ranks-findings
expect 0 "clean  transformers@4.49[+]reference  accumulated_update_equals_full_batch_update  200 trials" -- fuzz --target transformers@4.49+reference --property accumulated_update_equals_full_batch_update --trials 200 --seed 1 --no-corpus --quiet --max-ranks 1 --findings ranks-findings
expect 2 "--max-ranks: Value 0 not in range" -- fuzz --target reference --trials 1 --max-ranks 0
# The generator's other limits aim a campaign deeper (G = 12 windows, long sequences, wide models) and are recorded.
expect 1 "FOUND  deepspeed@0.16.0  accumulated_update_equals_full_batch_update" -- fuzz --target deepspeed@0.16.0 --property accumulated_update_equals_full_batch_update --trials 40 --seed 2 --no-corpus --quiet --ordinary --offload on --max-steps 5 --max-accumulation-steps 12 --max-sequences 4 --max-tokens 20 --max-width 6 --report limits-report.json --findings limits-findings
checks=$((checks + 1))
if python3 -c 'import json,sys; g=json.load(open("limits-report.json"))["results"]["generator"]; sys.exit(0 if (g["step_count_max"], g["accumulation_steps_max"], g["sequences_per_micro_batch_max"], g["token_count_max"], g["model_size_max"]["hidden"], g["model_size_max"]["vocab"]) == (5, 12, 4, 20, 6, 6) else g)'; then
  echo "ok:   the report records the generator's limits"
else
  failures=$((failures + 1))
fi
expect 2 "--max-tokens: Value 0 not in range" -- fuzz --target reference --trials 1 --max-tokens 0
expect 2 "--max-width: Value 65 not in range" -- fuzz --target reference --trials 1 --max-width 65
expect 2 "cannot open" -- replay does-not-exist.json
echo '{oops' > broken.json
expect 2 "not valid JSON" -- replay broken.json
echo '{"format": "accumcheck-finding", "version": 1, "target": "reference"}' > partial.json
expect 2 "missing field 'property'" -- replay partial.json
expect 2 "WHAT" -- list
expect 0 "deepspeed@0.16.0" -- list targets
expect 0 "accumulated_update_equals_full_batch_update" -- list properties
expect 0 "clean +reference" -- fuzz --target reference --seed 3 --trials 64 --quiet --findings out --no-corpus
expect 1 "FOUND +deepspeed@0.16.0" -- fuzz --target deepspeed@0.16.0 --property accumulated_update_equals_full_batch_update --seed 3 --trials 500 --quiet --findings out --report report.json
file=$(ls out/*.json | head -1)
expect 1 "reproduced bit for bit" -- replay "$file"
checks=$((checks + 2))
grep -q '"results"' report.json || { echo "FAIL: report.json has no results"; failures=$((failures + 1)); }
# Numbers: decimal seeds and trial counts, positive finite durations; a --corpus that is no folder.
expect 0 "accumcheck fuzz: seed 10$" -- fuzz --target reference --seed 010 --trials 1 --quiet --no-corpus --findings out
expect 2 "--seed '0x10' is not a decimal" -- fuzz --target reference --seed 0x10 --trials 1
expect 2 "--trials '-5' is not a decimal count" -- fuzz --target reference --trials -5
expect 2 "--trials 0: a campaign of no trials checks nothing" -- fuzz --target reference --trials 0
expect 2 "--time '0' must be a positive, finite duration" -- fuzz --target reference --time 0
expect 2 "--time '1e400' has an unknown unit 'e400'" -- fuzz --target reference --time 1e400
for bad in -5s nan inf .5s; do
  expect 2 "--time '$bad' is not a duration" -- fuzz --target reference --time "$bad"
done
expect 2 "--corpus /nonexistent: not a folder" -- fuzz --target reference --trials 1 --corpus /nonexistent
expect 0 "accumcheck 0\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{40}|accumcheck 0\.[0-9]+\.[0-9]+ \(commit unknown" -- --version
grep -q '"commit"' report.json || { echo "FAIL: report.json records no commit"; failures=$((failures + 1)); }
grep -q '"argv"' "$file" || { echo "FAIL: $file records no command line"; failures=$((failures + 1)); }
checks=$((checks + 2))
# Nothing checked is never clean: exit 4 for a named property that could not run, and for replaying one.
expect 4 "UNCHECKED  reference  target_agrees_with_its_behavioural_model  3 trials, none could run" -- \
  fuzz --target reference --property target_agrees_with_its_behavioural_model --trials 3 --quiet --no-corpus --findings out
python3 - "$file" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["scenario"]["steps"]) == 1, "the deepspeed@0.16.0 minimum was expected to have one step"
d["property"] = "checkpoint_then_resume_equals_running_straight_through"
json.dump(d, open("one-step-checkpoint.json", "w"))
d = json.load(open(sys.argv[1]))
d["scenario"]["engine"]["zero_stage"] = 3
json.dump(d, open("zero-3.json", "w"))
PY
expect 4 "UNCHECKED: the property could not run" -- replay one-step-checkpoint.json
# Replay runs a finding as written: an edit the target would only run refitted is refused, naming the field.
expect 2 "zero-3.json: deepspeed@0.16.0 does not run this scenario as written .*a campaign would change engine.zero_stage" -- replay zero-3.json
# Several files and folders: the most serious status wins.
expect 1 "2 finding\(s\): 1 still fail, 0 no longer fail, 1 could not run" -- replay "$file" one-step-checkpoint.json
mkdir -p only-unchecked && cp one-step-checkpoint.json only-unchecked/
expect 4 "UNCHECKED" -- replay only-unchecked
expect 2 "a folder without finding files" -- replay "$(mktemp -d)"
# Nothing overwritten that is not a regular file; output that cannot be written is an error.
expect 2 "/dev/null exists and is a device, not a regular file" -- fuzz --target reference --trials 1 --quiet --no-corpus --report /dev/null
ln -s report.json link.json
expect 2 "link.json exists and is a symbolic link" -- fuzz --target reference --trials 1 --quiet --no-corpus --report link.json
[ -L link.json ] || { echo "FAIL: link.json is no longer a symbolic link"; failures=$((failures + 1)); }
checks=$((checks + 1))
if [ -w /dev/full ]; then
  rc=0
  "$bin" explain "$file" > /dev/full 2> full.err || rc=$?
  checks=$((checks + 1))
  if [ "$rc" -eq 0 ] || ! grep -q "cannot write standard output" full.err; then
    echo "FAIL: explain > /dev/full exited $rc: $(cat full.err)"; failures=$((failures + 1))
  fi
fi
# Ctrl-C: the summary, the report and the state are written, exit 130, and resuming ends as a straight run.
"$bin" fuzz --target deepspeed@0.18.9 --seed 5 --trials 100000 --no-corpus --state sig-state.json --report sig-1.json \
  --findings sig-f > sig.out 2>&1 &
pid=$!
for _ in $(seq 50); do [ -s sig-state.json ] && break; sleep 0.1; done
sleep 1
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
checks=$((checks + 1))
if [ "$rc" -ne 130 ] || ! grep -q "interrupted by signal 2 after [0-9]* trials" sig.out || ! grep -q '"interrupted": true' sig-1.json; then
  echo "FAIL: SIGINT gave exit $rc, output:"; tail -5 sig.out; failures=$((failures + 1))
fi
interrupted_trials=$(python3 -c 'import json; print(json.load(open("sig-1.json"))["results"]["trials"])')
"$bin" fuzz --target deepspeed@0.18.9 --seed 5 --trials $((interrupted_trials + 100)) --no-corpus --state sig-state-2.json \
  --report sig-straight.json --findings sig-g --quiet > /dev/null 2>&1
checks=$((checks + 1))
if ! python3 - <<'PY'
import json
resumed = json.load(open("sig-1.json"))["results"]
straight = json.load(open("sig-straight.json"))["results"]
# The interrupted campaign's results are those of a straight campaign of as many trials, pair by pair, wherever
# a pair had not failed yet (a pair that failed earlier counts only up to its failure in both).
for a, b in zip(resumed["pairs"], straight["pairs"]):
    if b["found"] and b["trials_to_first_failure"] <= resumed["trials"]:
        assert a["found"] and a["trials_to_first_failure"] == b["trials_to_first_failure"], (a["property"], a, b)
    else:
        assert a["trials"] == resumed["trials"] and not a["found"], (a["property"], a["trials"], resumed["trials"])
PY
then
  echo "FAIL: the interrupted campaign's results are not a prefix of a straight campaign's"; failures=$((failures + 1))
fi
# The fixed release's findings all come from outside ordinary loops, and each says so.
rc=0
"$bin" fuzz --target deepspeed@0.19.0 --seed 1 --trials 1000 --quiet --no-corpus --findings ordinary-f > ordinary.out 2>&1 || rc=$?
found=$(grep -c '^FOUND' ordinary.out || true)
labelled=$(grep -c 'outside ordinary training: needs .*not confirmed by running the real release' ordinary.out || true)
checks=$((checks + 1))
if [ "$rc" -ne 1 ] || [ "$found" -eq 0 ] || [ "$found" -ne "$labelled" ]; then
  echo "FAIL: deepspeed@0.19.0: exit $rc, $found finding(s), $labelled labelled outside ordinary training"; failures=$((failures + 1))
fi
expect 0 "0 finding" -- fuzz --target deepspeed@0.19.0 --seed 1 --trials 1000 --quiet --no-corpus --ordinary --findings ordinary-g
expect 0 "Exit status: 0 clean; 1 findings" -- --help
expect 0 "default: findings" -- fuzz --help
first=$("$bin" fuzz --target reference --seed 77 --trials 1 --quiet --findings out | head -1)
[ "$first" = "accumcheck fuzz: seed 77" ] || { echo "FAIL: the seed is not printed first: $first"; failures=$((failures + 1)); }
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
