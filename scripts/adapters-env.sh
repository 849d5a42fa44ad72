#!/usr/bin/env bash
# Builds the Python environment for the PyTorch adapters at .venv/torch: the pinned packages of
# adapters/requirements-torch.txt, then the kit (adapters/python) in editable mode.
# Idempotent: a stamp holds a hash of the inputs, and a rerun with nothing changed returns at once, offline.
# ACCUMCHECK_ADAPTERS_PYTHON picks the base interpreter (default python3). Needs root or sudo only when the
# Debian package python3-venv is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
venv="$repo/.venv/torch"
requirements="$repo/adapters/requirements-torch.txt"
kit="$repo/adapters/python"
stamp="$venv/.accumcheck-stamp"
base_python=${ACCUMCHECK_ADAPTERS_PYTHON:-python3}

fail() { echo "adapters-env: $*" >&2; exit 1; }

command -v "$base_python" >/dev/null || fail "no '$base_python' on PATH (set ACCUMCHECK_ADAPTERS_PYTHON)"
[ -f "$requirements" ] || fail "missing $requirements"
[ -f "$kit/pyproject.toml" ] || fail "missing $kit/pyproject.toml"

inputs_hash=$( { "$base_python" --version 2>&1; cat "$requirements" "$kit/pyproject.toml" "$0"; } | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs_hash" ]; then
  echo "adapters-env: $venv is up to date"
  exit 0
fi

# python3 -m venv needs ensurepip, which Debian ships separately (python3-venv / python3.X-venv).
if ! "$base_python" -c 'import ensurepip, venv' 2>/dev/null; then
  command -v apt-get >/dev/null || fail "'$base_python' lacks venv/ensurepip and there is no apt-get to install it"
  version=$("$base_python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || fail "need root or sudo to install python3-venv"
    sudo_cmd=(sudo)
  fi
  echo "adapters-env: installing python3-venv python$version-venv with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv "python$version-venv" \
    || "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv \
    || fail "apt-get could not install python3-venv"
fi

rm -f "$stamp"
if [ ! -x "$venv/bin/python" ]; then
  echo "adapters-env: creating $venv with $("$base_python" --version 2>&1)"
  "$base_python" -m venv "$venv" || fail "python -m venv $venv failed"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
echo "adapters-env: installing $(grep -Ev '^\s*(#|$)' "$requirements" | tr '\n' ' ')(torch is about 3 GB with its CUDA libraries)"
"${pip[@]}" install --progress-bar off -r "$requirements" || fail "pip install -r $requirements failed"
echo "adapters-env: installing the kit from $kit (editable)"
"${pip[@]}" install --progress-bar off -e "$kit" || fail "pip install -e $kit failed"
"$venv/bin/python" -c 'import torch, accumcheck_adapter; print("adapters-env: torch", torch.__version__)' \
  || fail "the new environment cannot import torch and accumcheck_adapter"
echo "$inputs_hash" > "$stamp"
echo "adapters-env: ready: $venv/bin/python"
