#!/usr/bin/env bash
# Trials per second of property 1: accumcheck beside the Hypothesis + PyTorch peer, on one core each.
#
# Runs the peer (bench/peer/hypothesis_property1.py, Debian's python3-hypothesis and python3-torch) and then
# `accumcheck fuzz` on the reference target with the linear model, one after the other and pinned to the same
# core, so the two figures are one-core figures taken under the same conditions; prints both and their ratio.
# The goal in the issue is a ratio of at least 1000.
#
# Usage: bench/peer/compare.sh [BUILD_DIR]        (default build/release; needs BUILD_DIR/surface/accumcheck)
# Environment: PEER_TRIALS (default 2000), OUR_TRIALS (default 200000), SEED (default 1).
# Exit status: 0 when both ran, 2 when the accumcheck binary or the peer's Python packages are missing,
# 1 when either side failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

build_dir=${1:-build/release}
peer_trials=${PEER_TRIALS:-2000}
our_trials=${OUR_TRIALS:-200000}
seed=${SEED:-1}
# The Debian interpreter: python3 on PATH may be another one without Debian's dist-packages.
python=/usr/bin/python3
accumcheck=$build_dir/surface/accumcheck

# Check both sides can run before spending a minute on either.
if [[ ! -x $accumcheck ]]; then
  echo "compare.sh: $accumcheck not found or not executable." >&2
  echo "  Build it first: cmake --preset release && cmake --build --preset release --target accumcheck" >&2
  echo "  (or pass the build dir as the first argument). The peer alone runs with:" >&2
  echo "  $python bench/peer/hypothesis_property1.py --trials $peer_trials" >&2
  exit 2
fi
if ! "$python" -c "import torch, hypothesis" 2>/dev/null; then
  echo "compare.sh: $python cannot import torch and hypothesis." >&2
  echo "  Install them: apt-get install -y python3-hypothesis python3-torch" >&2
  exit 2
fi

# One core for both: the lowest CPU this process may run on.
core=$("$python" -c 'import os; print(min(os.sched_getaffinity(0)))')
on_one_core=(taskset -c "$core")
if ! command -v taskset >/dev/null; then
  echo "compare.sh: taskset not found; running unpinned (the peer is single-threaded, accumcheck runs --jobs 1)" >&2
  on_one_core=()
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); core $core; $(nproc) cores visible"

echo "peer: $python bench/peer/hypothesis_property1.py --trials $peer_trials --seed $seed"
if ! "${on_one_core[@]}" "$python" bench/peer/hypothesis_property1.py --trials "$peer_trials" --seed "$seed" \
    >"$work/peer.json"; then
  echo "compare.sh: the peer failed (its property failed or it crashed); its output:" >&2
  cat "$work/peer.json" >&2
  exit 1
fi

our_command=("$accumcheck" fuzz --target reference --property accumulated_update_equals_full_batch_update
             --model linear --seed "$seed" --trials "$our_trials" --jobs 1 --report "$work/ours.json")
echo "ours: ${our_command[*]}"
if ! "${on_one_core[@]}" "${our_command[@]}" >"$work/ours.log" 2>&1; then
  echo "compare.sh: accumcheck failed; its output:" >&2
  cat "$work/ours.log" >&2
  exit 1
fi

# Both reports carry "trials", "seconds" and "trials_per_second" at the top level.
"$python" - "$work/peer.json" "$work/ours.json" <<'EOF'
import json
import sys


def two_significant_digits(x):
    rounded = float(f"{x:.2g}")
    return f"{rounded:,.0f}" if rounded >= 10 else f"{rounded:g}"


def load(path, label):
    """The file as a JSON object with the three fields both sides report."""
    try:
        with open(path) as f:
            report = json.load(f)
        missing = [key for key in ("trials", "seconds", "trials_per_second") if key not in report]
    except (OSError, ValueError, TypeError) as error:
        missing = [repr(error)]
    if missing:
        sys.exit(f"compare.sh: the {label} report {path} lacks {missing}; expected a JSON object with "
                 f'"trials", "seconds" and "trials_per_second"')
    return report


peer = load(sys.argv[1], "peer")
ours = load(sys.argv[2], "accumcheck")
if peer["trials_per_second"] <= 0:
    sys.exit(f"compare.sh: the peer reported {peer['trials_per_second']} trials/s; no ratio")
ratio = ours["trials_per_second"] / peer["trials_per_second"]
versions = f"torch {peer.get('torch', '?')}, hypothesis {peer.get('hypothesis', '?')}"
print(f"peer (hypothesis+pytorch, {versions}): {peer['trials']} trials in {peer['seconds']:.2f} s = "
      f"{peer['trials_per_second']:.1f} trials/s")
print(f"accumcheck (reference, linear, --jobs 1): {ours['trials']} trials in {ours['seconds']:.2f} s = "
      f"{ours['trials_per_second']:.1f} trials/s")
print(f"ratio: {two_significant_digits(ratio)}x the peer's trials per second "
      f"({'meets' if ratio >= 1000 else 'below'} the goal of 1000x)")
EOF
