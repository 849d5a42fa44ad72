#!/usr/bin/env bash
# The accumcheck command's exit codes and messages: 0 clean, 1 findings, 2 usage or input error with the
# problem named. Usage: cli_test.sh ACCUMCHECK_BINARY
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
expect 2 "not a 64-bit unsigned" -- fuzz --target reference --seed -3 --trials 5
expect 2 "unknown unit" -- fuzz --target reference --time 5y
expect 2 "fixed point rounds products without such a bound" -- fuzz --target reference --trials 5 --scalar fixed32
expect 0 "clean  reference  accumulated_update_equals_full_batch_update  64 trials" -- fuzz --target reference --trials 64 --scalar fp32 --no-corpus --findings fp32-findings
expect 1 "FOUND  deepspeed@0.16.0  accumulated_update_equals_full_batch_update" -- fuzz --target deepspeed@0.16.0 --property accumulated_update_equals_full_batch_update --trials 64 --scalar fp32 --no-corpus --ordinary --findings fp32-findings
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
first=$("$bin" fuzz --target reference --seed 77 --trials 1 --quiet --findings out | head -1)
[ "$first" = "accumcheck fuzz: seed 77" ] || { echo "FAIL: the seed is not printed first: $first"; failures=$((failures + 1)); }
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
