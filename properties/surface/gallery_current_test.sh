#!/usr/bin/env bash
# docs/gallery is generated (accumcheck gallery docs/gallery) and committed: it must be what the command writes
# today, so the gallery stays true when the models change. A difference fails with the command that updates it.
# Every entry's first step must fail exactly on the buggy release and pass on the fixed one.
# Usage: gallery_current_test.sh ACCUMCHECK_BINARY GALLERY_DIR
set -u
bin="$1"
committed="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "$bin" gallery "$work/gallery" > "$work/out.txt" 2>&1; then
  echo "FAIL: accumcheck gallery exited non-zero:"; cat "$work/out.txt"; exit 1
fi
failures=0
for f in README.md gallery.json; do
  if ! diff -q "$committed/$f" "$work/gallery/$f" > /dev/null; then
    echo "FAIL: docs/gallery/$f is not what accumcheck gallery writes now; run: build/release/surface/accumcheck gallery docs/gallery"
    diff "$committed/$f" "$work/gallery/$f" | head -20
    failures=$((failures + 1))
  else
    echo "ok:   docs/gallery/$f is current"
  fi
done
if python3 - "$work/gallery/gallery.json" <<'PY'; then
import json, sys
entries = json.load(open(sys.argv[1]))["entries"]
bad = [e["id"] for e in entries if (e["first_step"]["buggy"]["outcome"], e["first_step"]["fixed"]["outcome"]) != ("fail", "pass")]
sys.exit(f"first step not fail/pass: {bad}" if bad else 0)
PY
  echo "ok:   every entry's first step fails on the buggy release and passes on the fixed one"
else
  failures=$((failures + 1))
fi
echo "$((3 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
