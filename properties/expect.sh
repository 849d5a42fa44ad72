# Shared by the command-line tests (sourced): `expect CODE PATTERN -- ARGS...` runs "$bin" ARGS, and counts a
# check as passed when the exit code is CODE and the output matches the extended regular expression PATTERN.
# The caller sets bin and reads checks and failures.
checks=0
failures=0
expect() {
  local code="$1" pattern="$2"
  shift 3
  local out rc
  checks=$((checks + 1))
  out=$(timeout 600 "$bin" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: accumcheck $* -> exit $rc (want $code, output matching '$pattern'), output:"
    echo "$out" | tail -12
    failures=$((failures + 1))
  else
    echo "ok:   accumcheck $* -> $code"
  fi
}
# `expect_minimal REPORT WANT MESSAGE`: a check that the first pair's minimal scenario in the campaign report REPORT
# has the fields of the JSON object WANT at those values (MESSAGE is printed when it does).
expect_minimal() {
  local report="$1" want="$2" message="$3"
  checks=$((checks + 1))
  if python3 - "$report" "$want" <<'PY'; then
import json, sys
m = json.load(open(sys.argv[1]))["results"]["pairs"][0]["minimal"]
want = json.loads(sys.argv[2])
got = {k: m.get(k) for k in want}
sys.exit(0 if got == want else f"minimal {got}, want {want}")
PY
    echo "ok:   $message"
  else
    failures=$((failures + 1))
  fi
}
# `expect_exercised REPORT FEATURE MESSAGE`: a check that the first pair of the campaign report REPORT ran at least
# one trial with FEATURE (a label of its "exercised" counts, such as "2 ranks").
expect_exercised() {
  local report="$1" feature="$2" message="$3"
  checks=$((checks + 1))
  if python3 - "$report" "$feature" <<'PY'; then
import json, sys
got = json.load(open(sys.argv[1]))["results"]["pairs"][0]["exercised"].get(sys.argv[2], 0)
sys.exit(0 if got > 0 else f"no trial exercised {sys.argv[2]!r}")
PY
    echo "ok:   $message"
  else
    failures=$((failures + 1))
  fi
}
