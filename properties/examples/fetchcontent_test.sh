#!/usr/bin/env bash
# examples/own-engine consuming accumcheck through FetchContent instead of an installed package: configure it with
# -DOWN_ENGINE_FETCH_ACCUMCHECK=ON against this source tree and check that the build it generates has the
# example's binary and accumcheck's libraries, but none of accumcheck's tests or benchmarks (they default to off
# when accumcheck is not the top-level project). Building it would rebuild all of accumcheck (about 15 minutes on
# two cores), so the build itself is what install_own_engine_example covers through the installed package.
# Usage: fetchcontent_test.sh SOURCE_DIR [GENERATOR]
set -euo pipefail
source_dir=$1 generator=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
configure=(cmake -S "$source_dir/examples/own-engine" -B "$work/build" -DOWN_ENGINE_FETCH_ACCUMCHECK=ON
           -DOWN_ENGINE_ACCUMCHECK_SOURCE_DIR="$source_dir" -DCMAKE_BUILD_TYPE=Release)
[ -n "$generator" ] && configure+=(-G "$generator")
"${configure[@]}" > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configuring with FetchContent failed"; }
cmake --build "$work/build" --target help > "$work/targets" 2>&1 || { cat "$work/targets"; fail "no target list"; }
for wanted in own-engine accumcheck_surface accumcheck_fuzz accumcheck_sim accumcheck_models; do
  grep -q -- "$wanted" "$work/targets" || fail "the FetchContent build has no target $wanted"
done
for unwanted in sim_engine_contract_test surface_cli_test engine_bench accumcheck_cuda; do
  if grep -q -- "$unwanted" "$work/targets"; then fail "the FetchContent build has accumcheck's $unwanted: tests, benchmarks and CUDA must default to off"; fi
done
grep -q "ACCUMCHECK_BUILD_TESTS:BOOL=OFF" "$work/build/CMakeCache.txt" || fail "ACCUMCHECK_BUILD_TESTS is not OFF in the cache"
echo "FetchContent configuration checks passed"
