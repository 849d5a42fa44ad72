#!/usr/bin/env bash
# The pages of `accumcheck report` and `accumcheck gallery` as a real browser draws them: headless Chromium
# (Debian's chromium) opens each page from a file, runs its scripts, and the DOM it dumps must show every chart
# drawn (each canvas records the elements Chart.js laid out and the pixels it painted, surface/html_page.h), no
# chart error, and the verdict. Pages: a corpus finding, a short campaign's report, the audit of the shipped
# configurations (audit --json), and the gallery.
# Usage: report_browser_test.sh ACCUMCHECK_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: no chromium on PATH (scripts/install-deps.sh installs Debian's chromium)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
. "$src/properties/expect.sh"

cp "$src/fuzz/corpus/deepspeed@0.16.0--accumulated_update_equals_full_batch_update--7.json" finding.json
expect 0 "wrote finding.html" -- report finding.json
expect 1 "finding" -- fuzz --target deepspeed@0.16.0 --target deepspeed@0.19.0 --property accumulated_update_equals_full_batch_update \
  --ordinary --offload on --trials 40 --seed 1 --no-corpus --quiet --report report.json
expect 0 "wrote report.html" -- report report.json
"$bin" audit "$src/properties/surface/audit_runs" --json > audit.json
expect 0 "wrote audit.html" -- report audit.json -o audit.html
expect 0 "wrote gallery/index.html" -- gallery gallery
# Bad input is refused with the problem named.
echo '{"format": "accumcheck-report"}' > broken.json
expect 2 "broken.json: a field is missing or has the wrong type" -- report broken.json
echo 'not json' > garbage.json
expect 2 "garbage.json" -- report garbage.json

# page, then regular expressions the rendered DOM must hold (the verdict, a figure's caption words).
check_page() {
  local page="$1"
  shift
  checks=$((checks + 1))
  if timeout 120 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" --dump-dom "file://$work/$page" \
      > "$page.dom" 2> "$page.err" && python3 - "$page.dom" "$@" <<'PY'; then
import re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
canvases = re.findall(r"<canvas[^>]*>", dom)
problems = []
if not canvases:
    problems.append("no canvas in the rendered page")
drawn = re.search(r'<body[^>]*data-charts-drawn="(\d+)"', dom)
if not drawn or int(drawn.group(1)) != len(canvases):
    problems.append(f"the drawing script did not finish: body data-charts-drawn={drawn and drawn.group(1)}, {len(canvases)} canvases")
for c in canvases:
    cid = re.search(r'id="([^"]+)"', c).group(1)
    error = re.search(r'data-chart-error="([^"]*)"', c)
    if error:
        problems.append(cid + ": " + error.group(1))
        continue
    points = re.search(r'data-drawn-points="(\d+)"', c)
    painted = re.search(r'data-painted-pixels="(\d+)"', c)
    if not points or int(points.group(1)) == 0:
        problems.append(f"{cid}: no element drawn")
    if not painted or int(painted.group(1)) < 2000:
        problems.append(f"{cid}: only {painted and painted.group(1)} pixels painted")
text = re.sub(r"<[^>]+>", " ", dom)
for want in sys.argv[2:]:
    if not re.search(want, text):
        problems.append(f"the rendered text lacks /{want}/")
if problems:
    sys.exit("\n".join(problems))
print(f"{len(canvases)} charts drawn")
PY
    echo "ok:   $page in Chromium"
  else
    echo "FAIL: $page in Chromium"
    tail -5 "$page.err"
    failures=$((failures + 1))
  fi
}
check_page finding.html "FAIL: the applied gradient" "s0 k1 r0: weight 0 in its own step \(dropped\)"
check_page report.html "finding" "deepspeed@0\.19\.0"
check_page audit.html "runs affected" "deepspeed-zero2-offload-drop: affected" "reached the optimizer"
check_page gallery/index.html "First step, checked exactly on deepspeed@0\.16\.0: FAIL" "deepspeed-zero2-offload-drop|DeepSpeed ZeRO-2 with the optimizer offloaded"

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
