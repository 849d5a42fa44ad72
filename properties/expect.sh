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
