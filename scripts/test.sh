#!/usr/bin/env bash
# README command 2: install what is missing, then build and run the whole test suite through CTest twice:
# release with assertions on, and debug with AddressSanitizer + UndefinedBehaviorSanitizer.
# ACCUMCHECK_TEST_PRESETS="release" limits it to one preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The PyTorch environment of the shipped adapters (adapters/): pinned versions from PyPI, reused when up to date.
scripts/adapters-env.sh
# Seven real DeepSpeed releases side by side over that torch (docs/deepspeed-adapter.md), for the short real-DeepSpeed
# campaigns and exports; about 4 minutes the first time, instant when up to date.
scripts/deepspeed-env.sh
# Three real transformers releases (docs/transformers-adapter.md), each with its accelerate, over that torch.
scripts/transformers-env.sh
# Two real LLaMA-Factory releases (docs/llamafactory-adapter.md), each with everything it pins, over that torch and a
# DeepSpeed release of the above; about 1.3 GB and 2-6 minutes each the first time (DeepSpeedCPUAdam's op compiles).
scripts/llamafactory-env.sh
# Three real OpenRLHF releases (docs/openrlhf-adapter.md), each with everything it pins and flash-attn built without
# CUDA, over that torch and the DeepSpeed each pins; about 1.1 GB and 2-5 minutes each the first time (DeepSpeed's two
# Adam ops compile once per DeepSpeed release).
scripts/openrlhf-env.sh
# Two real TRL releases (docs/trl-adapter.md), each with what it needs beyond its transformers release of the above,
# over that torch and a DeepSpeed release of the above; about 1.5 minutes each the first time (CPU Adam compiles).
scripts/trl-env.sh
jobs=$(nproc)
for preset in ${ACCUMCHECK_TEST_PRESETS:-release asan}; do
  echo "== preset $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j"$jobs"
  ctest --preset "$preset" -j"$jobs"
done
