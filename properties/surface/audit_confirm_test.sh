#!/usr/bin/env bash
# `accumcheck audit --confirm` on the DeepSpeed rows of audit_runs/: the real installed release and our model of
# it must agree on each row, the buggy releases must show the drop, the fixed ones must not, and the finding a
# confirmation writes must replay. A row whose release is not installed is skipped and named; with none
# installed the test skips (exit 77).
# Usage: audit_confirm_test.sh ACCUMCHECK_BINARY AUDIT_RUNS_DIR
set -u
bin="$1"
runs="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
installed=$("$bin" list targets)
checks=0
failures=0
ran=0
# folder, flags, release, does the real release show the defect
rows=(
  "deepspeed-checkpoint-zero2-offload||0.16.4|true"
  "llamafactory-z2-offload-g8|--world-size 1|0.16.4|true"
  "llamafactory-z2-offload-g8-fixed|--world-size 1|0.19.8|false"
  "trl-zero2-offload||0.16.4|true"
  "trl-zero2-offload-fixed||0.19.8|false"
  "openrlhf-sft-adam-offload||0.18.9|true"
)
for row in "${rows[@]}"; do
  IFS='|' read -r folder flags release shows <<<"$row"
  if ! grep -qE "adapter:deepspeed-$release .*\[installed\]" <<<"$installed"; then
    echo "skip: $folder (DeepSpeed $release is not installed)"
    continue
  fi
  ran=$((ran + 1))
  checks=$((checks + 1))
  # shellcheck disable=SC2086
  "$bin" audit "$runs/$folder" $flags --confirm --json --findings "findings-$folder" > "$folder.json" 2> "$folder.err"
  if python3 - "$folder.json" "$shows" <<'PY'; then
import json, sys
c = json.load(open(sys.argv[1]))["runs"][0]["confirmation"]
want = sys.argv[2] == "true"
assert c["ran"], c["why_not"]
assert c["real_shows_defect"] is want and c["model_shows_defect"] is want and c["agree"], c
assert (c["finding"] is not None) is want, c
PY
    echo "ok:   $folder: the real DeepSpeed $release and our model agree (defect shows: $shows)"
  else
    echo "FAIL: $folder"; tail -5 "$folder.err"; failures=$((failures + 1))
  fi
  if [ "$shows" = true ]; then
    checks=$((checks + 1))
    finding=$(ls "findings-$folder"/*.json 2>/dev/null | head -1)
    if [ -n "$finding" ] && "$bin" replay "$finding" 2>&1 | grep -q "reproduced bit for bit" && ls "findings-$folder"/*_deepspeed.py >/dev/null 2>&1; then
      echo "ok:   $folder: the confirmation's finding replays, its deepspeed reproducer is beside it"
    else
      echo "FAIL: $folder: the finding does not replay or has no reproducer"; failures=$((failures + 1))
    fi
  fi
done
echo "$checks checks, $failures failures, $ran of ${#rows[@]} rows run"
[ "$ran" -eq 0 ] && exit 77
[ "$failures" -eq 0 ]
