#!/usr/bin/env bash
# Installs real LLaMA-Factory releases side by side for the adapter:llamafactory-X.Y.Z+deepspeed-A.B.C targets
# (docs/llamafactory-adapter.md).
#
# Every release shares the torch of .venv/torch (scripts/adapters-env.sh builds it) and the DeepSpeed release it is
# paired with below (scripts/deepspeed-env.sh installs it). Each goes, without resolving dependencies, into its own
# folder .venv/llamafactory/X.Y.Z (pip install --no-deps --target) together with everything `pip install
# llamafactory==X.Y.Z` brings beside torch 2.6.0, transformers and accelerate included, pinned in
# adapters/llamafactory/requirements-X.Y.Z.txt (which says how pip's resolver produced it). About 1.3 GB per
# release, 1-3 minutes (wheels only).
#
# DeepSpeed's CPU Adam: LLaMA-Factory's ZeRO-2 offload config does not set zero_force_ds_cpu_optimizer, so
# accelerate replaces the Trainer's torch optimizer by deepspeed.ops.adam.DeepSpeedCPUAdam, whose C++ op DeepSpeed
# compiles at first use (torch.utils.cpp_extension with ninja and g++, 1-2 minutes). It is compiled here, once per
# release, into .venv/llamafactory/X.Y.Z/torch_extensions (the adapter sets TORCH_EXTENSIONS_DIR to it), so that
# an adapter starts within accumcheck's start deadline.
#
# Idempotent: a stamp per release holds its version and a hash of the interpreter, torch's version, the DeepSpeed
# release and the requirements file; a rerun with nothing changed returns at once, offline. Each release is checked
# to import LLaMA-Factory's trainer, arguments and Web UI config writer on CPU as the adapter loads them, and to
# step DeepSpeedCPUAdam once, before its stamp is written. ACCUMCHECK_LLAMAFACTORY_RELEASES="0.9.3" installs only
# those (they must be pinned).
set -euo pipefail
cd -P "$(dirname "$0")/.."
repo=$(pwd)
torch_python="$repo/.venv/torch/bin/python"
root="$repo/.venv/llamafactory"

# 0.9.3: the last release whose deepspeed extra (deepspeed<=0.16.9) admits only releases with the ZeRO-2 offload
# drop (catalogue entry 1: 0.15.2 - 0.18.9), over 0.16.4. 0.9.5: the newest on PyPI when this was written (pip index
# versions llamafactory), which declares no DeepSpeed pin, over the newest 0.19.x. Keep in step with
# adapters/llamafactory-*/.
RELEASES=(0.9.3 0.9.5)
declare -A DEEPSPEED=([0.9.3]=0.16.4 [0.9.5]=0.19.8)

fail() { echo "llamafactory-env: $*" >&2; exit 1; }

[ -x "$torch_python" ] || fail "no $torch_python: run scripts/adapters-env.sh first (torch 2.6.0)"
wanted=("${RELEASES[@]}")
if [ -n "${ACCUMCHECK_LLAMAFACTORY_RELEASES:-}" ]; then
  read -r -a wanted <<< "$ACCUMCHECK_LLAMAFACTORY_RELEASES"
  for v in "${wanted[@]}"; do
    [[ " ${RELEASES[*]} " == *" $v "* ]] || fail "release $v is not pinned here (pinned: ${RELEASES[*]})"
  done
fi

base_hash=$( { "$torch_python" --version 2>&1; "$torch_python" -c 'import importlib.metadata as m; print(m.version("torch"))'; } \
             | sha256sum | cut -d' ' -f1)
pip=("$torch_python" -m pip --disable-pip-version-check --no-input install --progress-bar off --no-deps
     --upgrade --target)
mkdir -p "$root"

for v in "${wanted[@]}"; do
  dir="$root/$v"
  ds=${DEEPSPEED[$v]}
  requirements="$repo/adapters/llamafactory/requirements-$v.txt"
  [ -f "$requirements" ] || fail "no $requirements"
  [ -f "$repo/.venv/deepspeed/$ds/.accumcheck-stamp" ] \
    || fail "LLaMA-Factory $v runs over DeepSpeed $ds, which is not installed: run ACCUMCHECK_DEEPSPEED_RELEASES=$ds scripts/deepspeed-env.sh"
  stamp="$v $(echo "$base_hash $ds $(sha256sum < "$requirements")" | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$dir/.accumcheck-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "llamafactory-env: LLaMA-Factory $v is up to date ($dir)"
    continue
  fi
  start=$(date +%s)
  rm -rf "$dir"
  "${pip[@]}" "$dir" -r "$requirements" >"$root/$v.log" 2>&1 \
    || { tail -20 "$root/$v.log" >&2; fail "pip could not install llamafactory==$v and its pins (log: $root/$v.log)"; }
  mkdir -p "$dir/bin"
  # The launcher reaches torch by its physical path (cd -P): DeepSpeed rebuilds DeepSpeedCPUAdam's op whenever the
  # include paths in its build file change, so torch must have one path however the folder is reached.
  printf '#!/bin/sh\n# LLaMA-Factory %s runs on the shared torch interpreter (scripts/llamafactory-env.sh)\nexec "$(cd -P "$(dirname "$0")/../../../torch/bin" && pwd)/python" "$@"\n' "$v" > "$dir/bin/python"
  chmod +x "$dir/bin/python"
  # The check the adapter relies on: this release imports as the adapter loads it (adapters/llamafactory/adapter.py),
  # over its DeepSpeed, and DeepSpeedCPUAdam's op compiles and steps; prints the release's version.
  got=$(ACCUMCHECK_VENV_DIR="$repo/.venv" "$dir/bin/python" "$repo/adapters/llamafactory/adapter.py" --version "$v" \
        --deepspeed "$ds" --check 2>>"$root/$v.log" | tail -1) \
    || { tail -20 "$root/$v.log" >&2; fail "LLaMA-Factory $v does not import and step CPU Adam over DeepSpeed $ds on CPU (log: $root/$v.log)"; }
  [ "$got" = "$v" ] || fail "LLaMA-Factory $v imports as version '$got' (log: $root/$v.log)"
  echo "$stamp" > "$dir/.accumcheck-stamp"
  echo "llamafactory-env: LLaMA-Factory $v (over DeepSpeed $ds) installed, imports, CPU Adam built ($(( $(date +%s) - start )) s, $dir)"
done
echo "llamafactory-env: ready: ${wanted[*]} under $root"
