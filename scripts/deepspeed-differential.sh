#!/usr/bin/env bash
# The long differential run of docs/deepspeed-adapter.md: every installed real DeepSpeed release against its
# behavioural model (adapter:deepspeed-X.Y.Z against deepspeed@X.Y.Z, property 10), on the generator's whole
# range (world sizes 1 and 2, routed experts without a gradient, manual boundaries, the boundary on every
# backward, several backwards per step, checkpoints, clipping, Adam), then one line per release with its trials,
# the trials that could not run, findings, and trials per second.
#
#   scripts/deepspeed-differential.sh [TRIALS]        default 10000 per release
#
# ACCUMCHECK_DIFFERENTIAL_TARGETS names other adapter targets instead, each against its own "model", e.g. the Trainer
# over DeepSpeed (docs/transformers-adapter.md): ACCUMCHECK_DIFFERENTIAL_TARGETS="adapter:transformers-4.46.3+deepspeed-0.16.4
# adapter:transformers-5.24.0+deepspeed-0.19.8" scripts/deepspeed-differential.sh 2000.
# ACCUMCHECK_DEEPSPEED_RELEASES="0.16.4 0.19.8" limits the releases; ACCUMCHECK names the binary; ACCUMCHECK_DIFFERENTIAL_SEED (default 1),
# ACCUMCHECK_DIFFERENTIAL_JOBS (default: the cores) and ACCUMCHECK_DIFFERENTIAL_OUT (default
# build/differential) the rest. Reports, logs and any findings go under OUT/X.Y.Z/. A finding is a
# disagreement beyond the float bound: `accumcheck explain` it and fix the model (sim/deepspeed_zero*.h), or
# write it up. Exits 1 when any release disagrees, 3 on target faults, as accumcheck fuzz does.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-10000}
seed=${ACCUMCHECK_DIFFERENTIAL_SEED:-1}
jobs=${ACCUMCHECK_DIFFERENTIAL_JOBS:-$(nproc)}
out=${ACCUMCHECK_DIFFERENTIAL_OUT:-build/differential}
accumcheck=${ACCUMCHECK:-build/release/surface/accumcheck}
[ -x "$accumcheck" ] || { echo "deepspeed-differential: build first (scripts/demo.sh or cmake --build --preset release)" >&2; exit 2; }
read -r -a releases <<< "${ACCUMCHECK_DEEPSPEED_RELEASES:-0.15.1 0.16.4 0.17.6 0.18.9 0.19.0 0.19.8}"
targets=()
for v in "${releases[@]}"; do targets+=("adapter:deepspeed-$v"); done
[ -n "${ACCUMCHECK_DIFFERENTIAL_TARGETS:-}" ] && read -r -a targets <<< "$ACCUMCHECK_DIFFERENTIAL_TARGETS"
status=0
summary=()
for target in "${targets[@]}"; do
  v=${target#adapter:}
  v=${v#deepspeed-}
  dir="$out/$v"
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== $target against its behavioural model: $trials trials, seed $seed, $jobs jobs"
  rc=0
  "$accumcheck" fuzz --target "$target" --differential --trials "$trials" --seed "$seed" --jobs "$jobs" \
    --no-corpus --quiet --findings "$dir/findings" --report "$dir/report.json" 2>&1 | tee "$dir/log.txt" || rc=$?
  [ "$rc" -gt "$status" ] && status=$rc
  if [ ! -f "$dir/report.json" ]; then
    summary+=("$v: no report: accumcheck exited $rc before the campaign ran (its message is in $dir/log.txt)")
    continue
  fi
  summary+=("$(python3 - "$dir/report.json" "$v" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["results"]["pairs"][0]
gap = p["rounding_gap"]
print(f"{sys.argv[2]:<8} {p['trials']:>7} trials {p['cannot_run']:>6} could not run {r['results']['findings']:>2} finding(s) "
      f"{r['trials_per_second']:>6.1f} trials/s  largest rounding gap {gap['largest_ratio_to_bound'] if gap else 0:.3f} of its bound")
e = p.get("exercised", {})
print("         ran with: " + ", ".join(f"{k} {e.get(k, 0)}" for k in (
    "2 ranks", "a parameter without a gradient in a micro-batch", "manual boundary", "boundary on every backward",
    "several backwards per step()", "checkpoint and resume", "clipping", "Adam or AdamW")))
PY
)")
done
echo "== summary (release, trials, could not run, findings, trials/s)"
printf '%s\n' "${summary[@]}"
exit "$status"
