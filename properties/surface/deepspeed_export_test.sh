#!/usr/bin/env bash
# The deepspeed export of a finding, run for real (surface/reproducer.h, docs/deepspeed-adapter.md "Exports"):
#
#   deepspeed_export_test.sh run ACCUMCHECK REPO FINDING RELEASE WANT
#       exports FINDING with `accumcheck export --format deepspeed`, checks that the DeepSpeed config embedded in
#       the script is the one adapters/deepspeed/ds_config.py builds for the scenario, runs the script against
#       DeepSpeed RELEASE of REPO/.venv/deepspeed (the PYTHONPATH the docs give) and passes when it exits WANT
#       (1: the defect shows, 0: every value matches) having printed what that exit means: the release's version
#       first, the comparison, and the verdict line.
#   deepspeed_export_test.sh refuses ACCUMCHECK FINDING PATTERN [SED]
#       passes when the export of FINDING (edited by the sed expression SED first, if given) exits 2 with an
#       error matching the extended regular expression PATTERN.
#
# Exit 77 (CTest's SKIP_RETURN_CODE) when .venv/torch or the release is not installed, naming the command that
# installs it: a test that did not run never passes.
set -u

fail() { echo "FAIL: $*"; exit 1; }

mode=$1
shift
if [ "$mode" = refuses ]; then
  bin=$1 finding=$2 pattern=$3 edit=${4:-}
  if [ -n "$edit" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    sed -E "$edit" "$finding" > "$tmp/finding.json"
    cmp -s "$finding" "$tmp/finding.json" && fail "the sed expression '$edit' changed nothing in $finding"
    finding="$tmp/finding.json"
  fi
  out=$("$bin" export "$finding" --format deepspeed 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "export of $finding exited $rc, want 2; output: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "the refusal does not match '$pattern': $out"
  echo "ok: refused with exit 2: $out"
  exit 0
fi
[ "$mode" = run ] || fail "unknown mode '$mode' (run or refuses)"

bin=$1 repo=$2 finding=$3 release=$4 want=$5
python="$repo/.venv/torch/bin/python"
if [ ! -x "$python" ]; then
  echo "skipped: no $python (run scripts/adapters-env.sh)"
  exit 77
fi
if [ ! -f "$repo/.venv/deepspeed/$release/.accumcheck-stamp" ]; then
  echo "skipped: DeepSpeed $release is not installed (run ACCUMCHECK_DEEPSPEED_RELEASES=$release scripts/deepspeed-env.sh)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
script="$tmp/reproducer_deepspeed.py"
"$bin" export "$finding" --format deepspeed -o "$script" || fail "accumcheck export --format deepspeed $finding"

# The config the script passes (before the release-dependent fields) is ds_config.py's, key for key.
"$python" - "$script" "$repo" <<'PY' || fail "the exported DeepSpeed config differs from adapters/deepspeed/ds_config.py's"
import json
import sys
import types
from fractions import Fraction

script, repo = sys.argv[1], sys.argv[2]
sys.path[:0] = [f"{repo}/adapters/python/src", f"{repo}/adapters/deepspeed"]
import ds_config  # noqa: E402
from accumcheck_adapter.scenario import EngineConfig, ModelSpec  # noqa: E402

text = open(script, encoding="utf-8").read()
start = text.index("FINDING = json.loads(r'''") + len("FINDING = json.loads(r'''")
finding = json.loads(text[start:text.index("''')", start)])
s = finding["scenario"]
mgn = s["training"]["max_grad_norm"]
scenario = types.SimpleNamespace(engine=EngineConfig.from_json(s["engine"]),
                                 model=ModelSpec.from_json(s["training"]["model"]),
                                 max_grad_norm=None if mgn is None else Fraction(mgn))
want = json.loads(json.dumps(ds_config.deepspeed_config(scenario, s["engine"]["rank_count"])))
if finding["deepspeed_config"] != want:
    print("exported:", json.dumps(finding["deepspeed_config"], sort_keys=True))
    print("ds_config:", json.dumps(want, sort_keys=True))
    sys.exit(1)
print("ok: the embedded config is ds_config.py's")
PY

start=$(date +%s)
out=$(cd "$tmp" && PYTHONPATH="$repo/.venv/deepspeed/$release:$repo/.venv/deepspeed/_deps" timeout 900 "$python" "$script" 2>"$tmp/stderr")
rc=$?
echo "$out"
echo "(exit $rc after $(( $(date +%s) - start )) s)"
[ "$rc" -eq "$want" ] || { tail -30 "$tmp/stderr"; fail "the script exited $rc on DeepSpeed $release, want $want"; }
head -1 <<<"$out" | grep -q "^deepspeed $release " || fail "the first line does not name DeepSpeed $release"
grep -q "^torch " <<<"$out" || fail "no torch version printed"
grep -q "^DeepSpeed config passed to deepspeed.initialize:" <<<"$out" || fail "no config printed"
grep -qE "^  step [0-9]+ / gradient / " <<<"$out" || fail "no value was compared"
if [ "$want" -eq 1 ]; then
  grep -q "<- DIFFERS" <<<"$out" || fail "exit 1 but no value marked as differing"
  grep -q "^STILL FAILS on deepspeed $release:" <<<"$out" || fail "no STILL FAILS verdict"
else
  grep -q "<- DIFFERS" <<<"$out" && fail "exit 0 but a value is marked as differing"
  grep -q "^PASSES on deepspeed $release:" <<<"$out" || fail "no PASSES verdict"
fi
echo "ok: DeepSpeed $release, exit $rc as expected"
