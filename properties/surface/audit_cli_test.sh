#!/usr/bin/env bash
# `accumcheck audit` on the command line: the exit codes (0 clean, 1 affected, 2 usage or input error, 3 cannot
# tell), the table of a folder of runs, --json, flags, and clear refusals of bad input.
# Usage: audit_cli_test.sh ACCUMCHECK_BINARY AUDIT_RUNS_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$1"
runs="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$here/../expect.sh"

expect 1 "At G = 8 only micro-batches 0 and 7 of each window reach the optimizer: 2/8" -- audit "$runs/llamafactory-z2-offload-g8"
expect 0 "llamafactory-z2-offload-g8-fixed: not affected" -- audit "$runs/llamafactory-z2-offload-g8-fixed"
expect 3 "world size >= 2: unknown \(give --world-size\)" -- audit "$runs/llamafactory-z2-offload-g2"
expect 0 "llamafactory-z2-offload-g2: not affected" -- audit "$runs/llamafactory-z2-offload-g2" --world-size 1
# A real DeepSpeed checkpoint folder: its model states, read by the kit's saved_run.py, say ZeRO-2 + offload, G = 3.
expect 1 "At G = 3 only micro-batches 0 and 2 of each window reach the optimizer: 2/3" -- audit "$runs/deepspeed-checkpoint-zero2-offload"
# A folder of runs: one row each, and the worst verdict decides the exit code.
expect 1 "trl-zero2-offload \| affected \| deepspeed-zero2-offload-drop, transformers-per-rank-token-count, transformers-deepspeed-extra-division-by-g" -- audit "$runs"
expect 1 "openrlhf-sft-adam-offload-fixed \| not affected \| -" -- audit "$runs"
# Flags alone describe a run; a flag that contradicts a file is an error naming both.
expect 1 "At G = 3 only micro-batches 0 and 2 of each window" -- audit --package deepspeed==0.17.6 --zero-stage 2 --offload cpu --accumulation-steps 3 --world-size 1 --framework deepspeed
expect 0 "not affected" -- audit --package deepspeed==0.19.0 --zero-stage 2 --offload cpu --accumulation-steps 3 --world-size 1 --framework deepspeed
expect 2 "gradient_accumulation_steps is 8 in llama3_full_sft.yaml but 4 in --accumulation-steps" -- audit "$runs/llamafactory-z2-offload-g8" --accumulation-steps 4
expect 2 "--package 'deepspeed' is not NAME==VERSION" -- audit --package deepspeed
# Bad input: named, exit 2, never a crash.
expect 2 "does-not-exist: no such file or folder" -- audit does-not-exist
echo '{"zero_optimization": {"stage": "two"}}' > ds_config.json
expect 2 "ds_config.json: zero_optimization.stage is \"two\", not an integer" -- audit ds_config.json
printf 'stage: sft\ndeepspeed: [unclosed\n' > train.yaml
expect 2 "train.yaml: not valid YAML" -- audit train.yaml
mkdir empty
expect 2 "empty: no run found" -- audit empty
echo 'garbage' > training_args.bin
expect 2 "training_args.bin" -- audit training_args.bin
# --json: one document a machine can read, with the same verdicts.
checks=$((checks + 1))
if "$bin" audit "$runs" --json > audit.json; [ $? -ne 1 ]; then
  echo "FAIL: audit --json exit code"; failures=$((failures + 1))
elif ! python3 - audit.json <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
verdicts = {r["run"].rstrip("/").split("/")[-1]: r["verdict"] for r in d["runs"]}
assert verdicts == {"deepspeed-checkpoint-zero2-offload": "affected",
    "llamafactory-z2-offload-g2": "cannot tell", "llamafactory-z2-offload-g8": "affected",
    "llamafactory-z2-offload-g8-fixed": "not affected", "openrlhf-sft-adam-offload": "affected",
    "openrlhf-sft-adam-offload-fixed": "not affected", "trl-zero2-offload": "affected",
    "trl-zero2-offload-fixed": "not affected"}, verdicts
run = next(r for r in d["runs"] if r["run"].endswith("openrlhf-sft-adam-offload"))
drop = next(x for x in run["defects"] if x["id"] == "deepspeed-zero2-offload-drop")
assert drop["numbers"]["micro_batches_reaching_optimizer"] == [0, 15], drop
assert d["exit_code"] == 1
PY
  echo "FAIL: audit --json content"; failures=$((failures + 1))
else
  echo "ok:   accumcheck audit --json"
fi
echo "$checks checks, $failures failures"
[ "$failures" -eq 0 ]
