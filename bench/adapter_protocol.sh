#!/usr/bin/env bash
# What the adapter protocol costs: torch-loop driven through the protocol (A) against its run() called
# in-process in Python (B), the same scenarios, interleaved rounds, one table. Builds nothing; arguments go to
# the bench (--scenarios N, default 500; --rounds R, default 5; --seed S; --warmup W; --work-dir DIR).
#   bench/adapter_protocol.sh --scenarios 200
#
# Back of envelope, per trial (the bench prints the measured figures under "breakdown"):
# - Bytes: a request is ~4 KB (the scenario twice, as rational strings and as floats, plus the engine calls:
#   ~100-200 numbers at ~10-20 bytes each in both forms), a reply ~1.3 KB (per window the applied gradient,
#   grad_norm and clip coefficient, then the parameters and the optimizer state, each number ~18 bytes as
#   Python's repr of a float32 widened to double).
# - JSON: nlohmann's dump and parse and CPython's json are C/C++ at ~50-200 MB/s: ~20-80 us for 5 KB on each
#   side. What costs more is what happens around them, per number: C++ builds the request through
#   nlohmann::json objects and GMP rationals (to_string, from_double to check exactness), and the kit's
#   RunRequest.from_json checks every value in pure Python (a Fraction per rational string, compared with its
#   float): ~300 numbers at a few us each, ~1 ms.
# - Pipes: two writes, two reads and two context switches per trial, ~20-50 us on an idle machine; more on
#   2 noisy cores, where the C++ client and the Python adapter share them.
# - torch: a run builds the model and the optimizer and does 1-12 tiny forward/backward passes and 1-3
#   optimizer steps, each op ~5-20 us of dispatch and autograd bookkeeping: ~2-5 ms.
# So the protocol should add ~1.5-2.5 ms to ~3.5 ms of torch: a ratio of ~1.4-1.8x, under the issue's 2x.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=build/release/bench/adapter_protocol_bench
venv=${ACCUMCHECK_VENV_DIR:-.venv}/torch

if [ ! -x "$bench" ]; then
  echo "adapter_protocol.sh: $bench is not built: cmake --build --preset release --target adapter_protocol_bench" >&2
  exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "adapter_protocol.sh: the torch environment $venv is absent: run scripts/adapters-env.sh" >&2
  exit 2
fi
exec "$bench" "$@"
