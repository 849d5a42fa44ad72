#!/usr/bin/env bash
# Every GPU test and benchmark of cuda/ on this machine's GPU, each figure printed, in well under 5 minutes:
# the host tests, the device tests (the exact kernel equal to models/ on random micro-batches and bit-identical across
# launch configurations, a constructed answer at the edge of the integer range, the offload pipeline clean when
# synchronised and found when not, the cuda-offload target equal to its CPU twin and clean under every property, its
# unsynchronised variant found, the same of cuda-offload-fp32, the fp32 kernels of every model bit-identical to their
# twins, the batched check equal to its CPU twin on every model, the resident window's accumulation and fp32
# optimizer step equal to their twins, the cuda-resident targets equal to theirs and clean) and the benchmarks (cuda_exact_bench, and
# cuda_batched_bench: batched exact trials per second against the 2-core CPU path, linear and every model). On a GPU machine a skipped
# device test is a failure. Exit 0 when everything passed.
#
#   cuda/run-gpu-checks.sh                   builds the release preset here (scripts/install-deps.sh first), then runs
#   cuda/run-gpu-checks.sh --pack DIR        builds, then copies the four programs and the libraries they need that
#                                            a bare CUDA machine lacks into DIR, for a GPU machine without the Debian
#                                            development packages (the same processor architecture)
#   cuda/run-gpu-checks.sh --prebuilt DIR    runs the programs packed in DIR, with DIR/lib on LD_LIBRARY_PATH
set -euo pipefail
cd "$(dirname "$0")/.."
programs=(cuda_host_test cuda_device_test cuda_exact_bench cuda_batched_bench)
mode=${1:-build}
case "$mode" in
  build|--pack)
    scripts/install-deps.sh
    cmake --preset release >/dev/null
    cmake --build --preset release -j"$(nproc)" --target "${programs[@]}"
    bin=build/release/cuda
    if [ "$mode" = --pack ]; then
      dir=${2:?--pack needs a folder}
      rm -rf "$dir" && mkdir -p "$dir/lib"
      for p in "${programs[@]}"; do cp "$bin/$p" "$dir/"; done
      # The shared libraries beyond the C library's and the CUDA driver's (the C++ runtime too: the machine's may be
      # older).
      for p in "${programs[@]}"; do ldd "$bin/$p"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda)\.so' |
        while read -r lib; do cp -L "$lib" "$dir/lib/"; done
      echo "run-gpu-checks: packed ${programs[*]} and $(ls "$dir/lib" | wc -l) libraries into $dir"
      exit 0
    fi
    ;;
  --prebuilt)
    bin=${2:?--prebuilt needs a folder}
    export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ;;
  *) echo "run-gpu-checks: unknown mode '$mode' (none, --pack DIR or --prebuilt DIR)" >&2; exit 2 ;;
esac

command -v nvidia-smi >/dev/null && nvidia-smi -L
status=0
start=$(date +%s)
echo "== cuda_host_test"
"$bin/cuda_host_test" || status=1
echo "== cuda_device_test"
log=$(mktemp)
"$bin/cuda_device_test" 2>&1 | tee "$log" || status=1
if grep -q '\[  SKIPPED \]' "$log"; then
  echo "run-gpu-checks: device tests skipped: this machine has no usable CUDA device" >&2
  status=1
fi
rm -f "$log"
echo "== cuda_exact_bench"
"$bin/cuda_exact_bench" || status=1
echo "== cuda_batched_bench"
"$bin/cuda_batched_bench" || status=1
echo "run-gpu-checks: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
exit "$status"
