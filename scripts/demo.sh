#!/usr/bin/env bash
# README command 1: install what is missing, build (release, assertions on), run `accumcheck demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target accumcheck
exec build/release/surface/accumcheck demo "$@"
