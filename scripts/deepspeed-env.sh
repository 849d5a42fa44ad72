#!/usr/bin/env bash
# Installs real DeepSpeed releases side by side for the adapter:deepspeed-X.Y.Z targets (docs/deepspeed-adapter.md).
#
# Every release shares the torch of .venv/torch (scripts/adapters-env.sh builds it): each goes, without its
# dependencies, into its own folder .venv/deepspeed/X.Y.Z (pip install --no-deps --target), and the small
# pure-Python packages DeepSpeed needs that the torch environment lacks go once into .venv/deepspeed/_deps, pinned
# below to versions every pinned release accepts (their requirements/requirements.txt ask only for
# pydantic>=2.0.0 and packaging>=20.0; numpy and packaging come from .venv/torch). The adapter puts
# .venv/deepspeed/X.Y.Z and .venv/deepspeed/_deps in front of sys.path (adapters/deepspeed/adapter.py --version).
# .venv/deepspeed/X.Y.Z/bin/python is a two-line launcher of .venv/torch/bin/python: the adapter's environment
# is "deepspeed/X.Y.Z", so that `accumcheck list targets` shows a release installed exactly when it is.
#
# Idempotent: a stamp per release holds its version and a hash of the interpreter, torch's version and the pinned
# dependencies; a rerun with nothing changed returns at once, offline. Each release is checked to import on CPU as
# the adapter loads it before its stamp is written. 20-60 s per release (pip's isolated build of the sdist), about
# 3-4 minutes for all. ACCUMCHECK_DEEPSPEED_RELEASES="0.16.4 0.18.9" installs only those (they must be pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
torch_python="$repo/.venv/torch/bin/python"
root="$repo/.venv/deepspeed"
deps="$root/_deps"

# The releases the adapters are named after: the band edges of docs/upstream-notes.md and the newest 0.19.x on
# PyPI when this was written (pip index versions deepspeed: 0.19.8), keep in step with adapters/deepspeed-*/; and
# 0.19.1, which OpenRLHF 0.10.4 pins and which runs only under it (adapters/openrlhf-0.10.4+deepspeed-0.19.1).
RELEASES=(0.15.1 0.16.4 0.17.6 0.18.9 0.19.0 0.19.1 0.19.8)
# DeepSpeed's runtime requirements that .venv/torch lacks (hjson: the config parser; pydantic: the config models;
# py-cpuinfo: the CPU accelerator; psutil, tqdm, msgpack, einops, ninja: imported at module level or by the op
# builders). pydantic 2.10 is the newest line whose pydantic-core, annotated-types pins all predate every release.
DEPS=(hjson==3.1.0 py-cpuinfo==9.0.0 psutil==6.1.1 tqdm==4.67.1 msgpack==1.1.0 einops==0.8.1 ninja==1.11.1.3
      pydantic==2.10.6 pydantic-core==2.27.2 annotated-types==0.7.0)

fail() { echo "deepspeed-env: $*" >&2; exit 1; }

[ -x "$torch_python" ] || fail "no $torch_python: run scripts/adapters-env.sh first (torch 2.6.0)"
wanted=("${RELEASES[@]}")
if [ -n "${ACCUMCHECK_DEEPSPEED_RELEASES:-}" ]; then
  read -r -a wanted <<< "$ACCUMCHECK_DEEPSPEED_RELEASES"
  for v in "${wanted[@]}"; do
    [[ " ${RELEASES[*]} " == *" $v "* ]] || fail "release $v is not pinned here (pinned: ${RELEASES[*]})"
  done
fi

# What an installed folder depends on: the interpreter, torch's version and the pinned dependencies (not the
# rest of this script, so that editing a message does not reinstall every release).
inputs_hash=$( { "$torch_python" --version 2>&1; "$torch_python" -c 'import importlib.metadata as m; print(m.version("torch"))';
                 echo "${DEPS[*]}"; } | sha256sum | cut -d' ' -f1)
pip=("$torch_python" -m pip --disable-pip-version-check --no-input install --progress-bar off --no-deps
     --upgrade --target)
mkdir -p "$root"

if [ "$(cat "$deps/.accumcheck-stamp" 2>/dev/null)" != "$inputs_hash" ]; then
  echo "deepspeed-env: installing ${DEPS[*]} into $deps"
  rm -rf "$deps"
  "${pip[@]}" "$deps" "${DEPS[@]}" >"$root/_deps.log" 2>&1 || { tail -20 "$root/_deps.log" >&2; fail "pip could not install the dependencies (log: $root/_deps.log)"; }
  echo "$inputs_hash" > "$deps/.accumcheck-stamp"
fi

for v in "${wanted[@]}"; do
  dir="$root/$v"
  if [ "$(cat "$dir/.accumcheck-stamp" 2>/dev/null)" = "$v $inputs_hash" ]; then
    echo "deepspeed-env: deepspeed $v is up to date ($dir)"
    continue
  fi
  start=$(date +%s)
  rm -rf "$dir"
  # DeepSpeed ships only a source distribution. pip builds it in an isolated environment without torch, so
  # setup.py builds no native op (DS_BUILD_OPS=0 is its default anyway, pinned here) and records none installed.
  DS_BUILD_OPS=0 "${pip[@]}" "$dir" "deepspeed==$v" >"$root/$v.log" 2>&1 \
    || { tail -20 "$root/$v.log" >&2; fail "pip could not install deepspeed==$v (log: $root/$v.log)"; }
  mkdir -p "$dir/bin"
  printf '#!/bin/sh\n# deepspeed %s runs on the shared torch interpreter (scripts/deepspeed-env.sh)\nexec "$(dirname "$0")/../../../torch/bin/python" "$@"\n' "$v" > "$dir/bin/python"
  chmod +x "$dir/bin/python"
  # The check the adapter relies on: this release imports on CPU with the shared torch, as the adapter loads it
  # (adapters/deepspeed/release.py), and reports its version.
  got=$(ACCUMCHECK_VENV_DIR="$repo/.venv" "$dir/bin/python" "$repo/adapters/deepspeed/release.py" --version "$v" \
        2>>"$root/$v.log" | tail -1) || { tail -20 "$root/$v.log" >&2; fail "deepspeed $v does not import on CPU with this torch (log: $root/$v.log)"; }
  [ "$got" = "$v" ] || fail "deepspeed $v imports as version '$got' (log: $root/$v.log)"
  echo "$v $inputs_hash" > "$dir/.accumcheck-stamp"
  echo "deepspeed-env: deepspeed $v installed and imports on CPU ($(( $(date +%s) - start )) s, $dir)"
done
echo "deepspeed-env: ready: ${wanted[*]} under $root"
