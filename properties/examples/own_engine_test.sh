#!/usr/bin/env bash
# examples/own-engine as a user builds it: install this build tree to a temporary prefix, configure and build the
# example against it with find_package(accumcheck) and the same compiler, build type and flags (so that under the
# asan preset the example is sanitized too), then run its binary: `list targets` shows both user engines, a short
# campaign on the correct engine is clean, one on the faulty engine finds and writes a finding, and the finding
# replays (exit 1), explains (exit 0, naming the engine) and exports to a file, each saying to replay with this
# binary; the installed command replays the installed corpus; --stop-at-first-finding ends at the first failure.
# Usage: own_engine_test.sh BUILD_DIR SOURCE_DIR KEY=VALUE...  with keys GENERATOR, CXX, BUILD_TYPE, CXX_FLAGS,
# CXX_FLAGS_CONFIG (the flags of BUILD_TYPE), LINKER_FLAGS; values may be empty.
set -euo pipefail
build_dir=$1 source_dir=$2
shift 2
generator="" cxx="" build_type="" cxx_flags="" cxx_flags_config="" linker_flags=""
for arg in "$@"; do
  case "$arg" in
    GENERATOR=*) generator=${arg#*=} ;;
    CXX=*) cxx=${arg#*=} ;;
    BUILD_TYPE=*) build_type=${arg#*=} ;;
    CXX_FLAGS=*) cxx_flags=${arg#*=} ;;
    CXX_FLAGS_CONFIG=*) cxx_flags_config=${arg#*=} ;;
    LINKER_FLAGS=*) linker_flags=${arg#*=} ;;
    *) echo "own_engine_test.sh: unknown argument '$arg'"; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

fail() { echo "FAIL: $*"; exit 1; }
# Runs the command with its output in $work/out (and shown), and requires exit status `want`.
expect_status() {
  local want=$1 got=0
  shift
  echo "\$ $*"
  "$@" > "$work/out" 2>&1 || got=$?
  cat "$work/out"
  [ "$got" -eq "$want" ] || fail "exit status $got, expected $want: $*"
}
expect_output() { grep -Eq -- "$1" "$work/out" || fail "the output above has no match for '$1'"; }

prefix=$work/prefix
expect_status 0 cmake --install "$build_dir" --prefix "$prefix"
[ -f "$prefix/lib/cmake/accumcheck/accumcheckConfig.cmake" ] || fail "no accumcheckConfig.cmake under $prefix"
[ -f "$prefix/include/accumcheck/sim/target.h" ] || fail "no sim/target.h under $prefix/include/accumcheck"
ls "$prefix"/share/accumcheck/corpus/*.json > /dev/null || fail "no regression corpus under $prefix/share/accumcheck/corpus"
# The installed command replays the installed corpus, not the source tree's.
expect_status 0 "$prefix/bin/accumcheck" fuzz --target reference --property accumulated_update_equals_full_batch_update \
  --trials 1 --quiet --findings "$work/reference-findings"
expect_output "corpus: $prefix/share/accumcheck/corpus \([0-9]+ finding file"

configure=(cmake -S "$source_dir/examples/own-engine" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix"
           -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$linker_flags")
[ -n "$generator" ] && configure+=(-G "$generator")
[ -n "$cxx" ] && configure+=(-DCMAKE_CXX_COMPILER="$cxx")
[ -n "$build_type" ] && configure+=("-DCMAKE_CXX_FLAGS_${build_type^^}=$cxx_flags_config")
expect_status 0 "${configure[@]}"
expect_status 0 cmake --build "$work/build"
bin=$work/build/own-engine
[ -x "$bin" ] || fail "the build made no $bin"
echo "-- installed and built in $((SECONDS - start))s"

cd "$work"
expect_status 0 "$bin" list targets
expect_output "own-ddp +\[user engine\]"
expect_output "own-ddp-drops-middle +\[user engine\]"
expect_output "deepspeed@0.16.0"

expect_status 0 "$bin" fuzz --target own-ddp --seed 1 --trials 60 --quiet --findings correct-findings
expect_output "clean  own-ddp  accumulated_update_equals_full_batch_update  60 trials"
[ -z "$(ls -A correct-findings 2>/dev/null)" ] || fail "the correct engine left finding files: $(ls correct-findings)"

expect_status 1 "$bin" fuzz --target own-ddp-drops-middle --property accumulated_update_equals_full_batch_update \
  --seed 1 --trials 200 --no-corpus --quiet --findings findings
expect_output "FOUND  own-ddp-drops-middle  accumulated_update_equals_full_batch_update"
expect_output "replay: $bin replay findings/"
finding=$(ls findings/*.json | head -1)
[ -f "$finding" ] || fail "the campaign wrote no finding file"
grep -q "\"replay\": \"$bin replay " "$finding" || fail "the finding file does not say to replay with $bin"

expect_status 1 "$bin" replay "$finding"
expect_output "reproduced bit for bit"
expect_status 0 "$bin" explain "$finding"
expect_output "Target: own-ddp-drops-middle"
expect_output "Replay: $bin replay "
expect_status 0 "$bin" export "$finding" --format markdown -o repro.md
[ -s repro.md ] || fail "export wrote no repro.md"
grep -q "own-ddp-drops-middle" repro.md || fail "repro.md does not name the engine"
grep -q "$bin replay" repro.md || fail "repro.md does not say to replay with $bin"

expect_status 1 "$bin" fuzz --target own-ddp-drops-middle --seed 1 --trials 640 --no-corpus --quiet --findings first \
  --stop-at-first-finding
expect_output "stopped at the first finding \(--stop-at-first-finding\): trial [0-9]+, after"

# The GoogleTest export of a built-in finding, built as its own comment says, against the installed package: it
# fails while the bug is there.
expect_status 1 "$prefix/bin/accumcheck" fuzz --target deepspeed@0.16.0 --property accumulated_update_equals_full_batch_update \
  --seed 3 --trials 500 --no-corpus --quiet --findings gtest-findings
mkdir -p gtest-export
gtest_finding=$(ls gtest-findings/*.json | head -1)
expect_status 0 "$prefix/bin/accumcheck" export "$gtest_finding" --format gtest -o gtest-export/finding_test.cpp
sed -n 's|^//   ||p' gtest-export/finding_test.cpp | sed -n '/^cmake_minimum_required/,/^add_test/p' \
  | sed "s|@FILE@|finding_test.cpp|" > gtest-export/CMakeLists.txt
grep -q "add_executable(finding_test" gtest-export/CMakeLists.txt || fail "no CMake recipe in the gtest export"
sed -i "s|add_executable(finding_test .*)|add_executable(finding_test finding_test.cpp)|" gtest-export/CMakeLists.txt
gtest_configure=(cmake -S gtest-export -B gtest-build -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE="$build_type"
                 -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$linker_flags")
[ -n "$generator" ] && gtest_configure+=(-G "$generator")
[ -n "$cxx" ] && gtest_configure+=(-DCMAKE_CXX_COMPILER="$cxx")
[ -n "$build_type" ] && gtest_configure+=("-DCMAKE_CXX_FLAGS_${build_type^^}=$cxx_flags_config")
expect_status 0 "${gtest_configure[@]}"
expect_status 0 cmake --build gtest-build
expect_status 1 gtest-build/finding_test
expect_output "FAILED"

echo "own-engine example checks passed in $((SECONDS - start))s"
