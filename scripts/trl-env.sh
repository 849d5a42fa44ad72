#!/usr/bin/env bash
# Installs real TRL releases side by side for the adapter:trl-X.Y.Z+deepspeed-A.B.C targets (docs/trl-adapter.md).
#
# TRL declares no torch dependency and runs on a transformers release: each TRL release shares the torch of
# .venv/torch (scripts/adapters-env.sh), the transformers release it was released with (.venv/transformers/T,
# scripts/transformers-env.sh, with that release's accelerate) and the DeepSpeed release it is paired with below
# (.venv/deepspeed/A.B.C, scripts/deepspeed-env.sh). Into its own folder .venv/trl/X.Y.Z go, without resolving
# dependencies (pip install --no-deps --target), TRL and what `pip install trl==X.Y.Z` brings beyond those folders
# (datasets, pyarrow, pandas, rich, ...), pinned in adapters/trl/requirements-X.Y.Z.txt (which says how pip's
# resolver produced it), under .venv/trl/X.Y.Z/site-packages. The adapter puts that folder on sys.path behind
# transformers' (adapters/trl/adapter.py). The folder's name matters: dill, which `datasets` uses to fingerprint a
# dataset, pickles a module by reference only where its file is under the interpreter's prefix or a path with
# "site-packages" in it, and by value elsewhere, which fails on pyarrow's C types (datasets 5.2.0's Dataset.from_list
# raised PicklingError: Can't pickle <class 'MonthDayNano'> from a folder named otherwise).
#
# DeepSpeed's CPU Adam: the accelerate config TRL documents for ZeRO-2 (trl/accelerate_configs/zero2.yaml) with the
# optimizer offloaded to the CPU leaves zero_force_ds_cpu_optimizer at its default, so accelerate replaces the
# Trainer's torch optimizer by deepspeed.ops.adam.DeepSpeedCPUAdam, whose C++ op DeepSpeed compiles at first use
# (torch.utils.cpp_extension with ninja and g++, 1-2 minutes). It is compiled here, once per release, into
# .venv/trl/X.Y.Z/torch_extensions (the adapter sets TORCH_EXTENSIONS_DIR to it), so that an adapter starts within
# accumcheck's start deadline.
#
# Idempotent: a stamp per release holds its version and a hash of the interpreter, torch's version, the
# transformers and DeepSpeed releases and the requirements file; a rerun with nothing changed returns at once,
# offline. Each release is checked to import TRL's SFTTrainer and SFTConfig on CPU as the adapter loads them, and
# to step DeepSpeedCPUAdam once, before its stamp is written. ACCUMCHECK_TRL_RELEASES="0.12.2" installs only those
# (they must be pinned).
set -euo pipefail
cd -P "$(dirname "$0")/.."
repo=$(pwd)
torch_python="$repo/.venv/torch/bin/python"
root="$repo/.venv/trl"

# 0.12.2: the last 0.12.x, released with transformers 4.46 (its METADATA asks transformers < 4.47), over 0.16.4, a
# DeepSpeed release with the ZeRO-2 offload drop (catalogue entry 1: 0.15.2 - 0.18.9). 1.14.2: the newest release
# whose SFTTrainer leaves the loss to the model through Trainer.compute_loss (1.15.0 computes its own negative
# log-likelihood in a fused LM head, which needs a causal language model: docs/trl-adapter.md), on the newest
# transformers (5.24.0; it asks >= 4.56.2), over the newest 0.19.x. Keep in step with adapters/trl-*/.
RELEASES=(0.12.2 1.14.2)
declare -A TRANSFORMERS=([0.12.2]=4.46.3 [1.14.2]=5.24.0)
declare -A DEEPSPEED=([0.12.2]=0.16.4 [1.14.2]=0.19.8)

fail() { echo "trl-env: $*" >&2; exit 1; }

[ -x "$torch_python" ] || fail "no $torch_python: run scripts/adapters-env.sh first (torch 2.6.0)"
wanted=("${RELEASES[@]}")
if [ -n "${ACCUMCHECK_TRL_RELEASES:-}" ]; then
  read -r -a wanted <<< "$ACCUMCHECK_TRL_RELEASES"
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
  tf=${TRANSFORMERS[$v]}
  ds=${DEEPSPEED[$v]}
  requirements="$repo/adapters/trl/requirements-$v.txt"
  [ -f "$requirements" ] || fail "no $requirements"
  [ -f "$repo/.venv/transformers/$tf/.accumcheck-stamp" ] \
    || fail "TRL $v runs on transformers $tf, which is not installed: run ACCUMCHECK_TRANSFORMERS_RELEASES=$tf scripts/transformers-env.sh"
  [ -f "$repo/.venv/deepspeed/$ds/.accumcheck-stamp" ] \
    || fail "TRL $v runs over DeepSpeed $ds, which is not installed: run ACCUMCHECK_DEEPSPEED_RELEASES=$ds scripts/deepspeed-env.sh"
  stamp="$v $(echo "site-packages $base_hash $tf $(cat "$repo/.venv/transformers/$tf/.accumcheck-stamp") $ds $(sha256sum < "$requirements")" \
              | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$dir/.accumcheck-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "trl-env: TRL $v is up to date ($dir)"
    continue
  fi
  start=$(date +%s)
  rm -rf "$dir"
  "${pip[@]}" "$dir/site-packages" -r "$requirements" >"$root/$v.log" 2>&1 \
    || { tail -20 "$root/$v.log" >&2; fail "pip could not install trl==$v and its pins (log: $root/$v.log)"; }
  mkdir -p "$dir/bin"
  # The launcher reaches torch by its physical path (cd -P): DeepSpeed rebuilds DeepSpeedCPUAdam's op whenever the
  # include paths in its build file change, so torch must have one path however the folder is reached.
  printf '#!/bin/sh\n# TRL %s runs on the shared torch interpreter (scripts/trl-env.sh)\nexec "$(cd -P "$(dirname "$0")/../../../torch/bin" && pwd)/python" "$@"\n' "$v" > "$dir/bin/python"
  chmod +x "$dir/bin/python"
  # The check the adapter relies on: this release imports as the adapter loads it (adapters/trl/adapter.py), on
  # its transformers and over its DeepSpeed, and DeepSpeedCPUAdam's op compiles and steps; prints the version.
  got=$(ACCUMCHECK_VENV_DIR="$repo/.venv" "$dir/bin/python" "$repo/adapters/trl/adapter.py" --version "$v" \
        --transformers "$tf" --deepspeed "$ds" --check 2>>"$root/$v.log" | tail -1) \
    || { tail -20 "$root/$v.log" >&2; fail "TRL $v does not import and step CPU Adam on transformers $tf over DeepSpeed $ds on CPU (log: $root/$v.log)"; }
  [ "$got" = "$v" ] || fail "TRL $v imports as version '$got' (log: $root/$v.log)"
  echo "$stamp" > "$dir/.accumcheck-stamp"
  echo "trl-env: TRL $v (transformers $tf, DeepSpeed $ds) installed, imports, CPU Adam built ($(( $(date +%s) - start )) s, $dir)"
done
echo "trl-env: ready: ${wanted[*]} under $root"
