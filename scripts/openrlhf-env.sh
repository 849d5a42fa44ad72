#!/usr/bin/env bash
# Installs real OpenRLHF releases side by side for the adapter:openrlhf-X.Y.Z+deepspeed-A.B.C targets
# (docs/openrlhf-adapter.md).
#
# Every release shares the torch of .venv/torch (scripts/adapters-env.sh builds it) and the DeepSpeed release it pins,
# as scripts/deepspeed-env.sh installs it. Each goes, without resolving dependencies, into its own folder
# .venv/openrlhf/X.Y.Z (pip install --no-deps --target) together with everything `pip install openrlhf==X.Y.Z`
# brings beside torch 2.6.0, pinned in adapters/openrlhf/requirements-X.Y.Z.txt (which says how pip's resolver
# produced it): transformers, ray, bitsandbytes, peft, wandb and the rest, about 1.1 GB and 2-3 minutes per release.
#
# flash-attn 2.8.3, which OpenRLHF's requirements.txt names and whose pure-Python bert_padding it imports at module
# level, has no wheel on PyPI: it is built from its source distribution without its CUDA extension
# (FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE, --no-build-isolation over .venv/torch, with wheel==0.45.1 in
# .venv/openrlhf/_buildtools for its setup.py), about 20 s.
#
# DeepSpeed's Adam ops: OpenRLHF hands DeepSpeed an {"type": "AdamW"} optimizer section, which DeepSpeed builds as
# DeepSpeedCPUAdam with the optimizer offloaded and as FusedAdam without; on the CPU accelerator each is a C++ op
# DeepSpeed compiles at first use (1-2 minutes). Both are compiled here, once per DeepSpeed release, into
# .venv/openrlhf/_ops/A.B.C (the adapter sets TORCH_EXTENSIONS_DIR to it), so that an adapter starts within
# accumcheck's start deadline.
#
# Idempotent: a stamp per release holds its version and a hash of the interpreter, torch's version, the DeepSpeed
# release and the requirements file; a rerun with nothing changed returns at once, offline. Each release is checked
# to import OpenRLHF's SFT trainer, strategy and models on CPU as the adapter loads them, and to step both Adam ops
# once, before its stamp is written. ACCUMCHECK_OPENRLHF_RELEASES="0.10.2" installs only those (they must be pinned).
set -euo pipefail
cd -P "$(dirname "$0")/.."
repo=$(pwd)
torch_python="$repo/.venv/torch/bin/python"
root="$repo/.venv/openrlhf"

# The three releases of the catalogue's OpenRLHF entries (docs/upstream-notes.md section 2), each over the DeepSpeed
# its requirements.txt pins (deepspeed==0.18.9 in 0.10.2 and 0.10.3, deepspeed==0.19.1 in 0.10.4). Keep in step with
# adapters/openrlhf-*/.
RELEASES=(0.10.2 0.10.3 0.10.4)
declare -A DEEPSPEED=([0.10.2]=0.18.9 [0.10.3]=0.18.9 [0.10.4]=0.19.1)
FLASH_ATTN=2.8.3
WHEEL=0.45.1

fail() { echo "openrlhf-env: $*" >&2; exit 1; }

[ -x "$torch_python" ] || fail "no $torch_python: run scripts/adapters-env.sh first (torch 2.6.0)"
wanted=("${RELEASES[@]}")
if [ -n "${ACCUMCHECK_OPENRLHF_RELEASES:-}" ]; then
  read -r -a wanted <<< "$ACCUMCHECK_OPENRLHF_RELEASES"
  for v in "${wanted[@]}"; do
    [[ " ${RELEASES[*]} " == *" $v "* ]] || fail "release $v is not pinned here (pinned: ${RELEASES[*]})"
  done
fi

base_hash=$( { "$torch_python" --version 2>&1; "$torch_python" -c 'import importlib.metadata as m; print(m.version("torch"))'; } \
             | sha256sum | cut -d' ' -f1)
pip=("$torch_python" -m pip --disable-pip-version-check --no-input install --progress-bar off --no-deps
     --upgrade --target)
mkdir -p "$root"

# flash-attn's setup.py imports wheel (its bdist_wheel command), which .venv/torch does not have.
tools="$root/_buildtools"
if [ "$(cat "$tools/.accumcheck-stamp" 2>/dev/null)" != "wheel==$WHEEL" ]; then
  rm -rf "$tools"
  "${pip[@]}" "$tools" "wheel==$WHEEL" >"$root/_buildtools.log" 2>&1 \
    || { tail -20 "$root/_buildtools.log" >&2; fail "pip could not install wheel==$WHEEL (log: $root/_buildtools.log)"; }
  echo "wheel==$WHEEL" > "$tools/.accumcheck-stamp"
fi

for v in "${wanted[@]}"; do
  dir="$root/$v"
  ds=${DEEPSPEED[$v]}
  requirements="$repo/adapters/openrlhf/requirements-$v.txt"
  [ -f "$requirements" ] || fail "no $requirements"
  [ -f "$repo/.venv/deepspeed/$ds/.accumcheck-stamp" ] \
    || fail "OpenRLHF $v runs over DeepSpeed $ds, which is not installed: run ACCUMCHECK_DEEPSPEED_RELEASES=$ds scripts/deepspeed-env.sh"
  stamp="$v $(echo "$base_hash $ds flash-attn==$FLASH_ATTN $(sha256sum < "$requirements")" | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$dir/.accumcheck-stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$root/_ops/$ds/cpu_adam/cpu_adam.so" ] \
     && [ -f "$root/_ops/$ds/fused_adam/fused_adam.so" ]; then
    echo "openrlhf-env: OpenRLHF $v is up to date ($dir)"
    continue
  fi
  start=$(date +%s)
  rm -rf "$dir"
  "${pip[@]}" "$dir" -r "$requirements" >"$root/$v.log" 2>&1 \
    || { tail -20 "$root/$v.log" >&2; fail "pip could not install openrlhf==$v and its pins (log: $root/$v.log)"; }
  FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE PYTHONPATH="$tools" "${pip[@]}" "$dir" --no-build-isolation \
    "flash-attn==$FLASH_ATTN" >>"$root/$v.log" 2>&1 \
    || { tail -20 "$root/$v.log" >&2; fail "pip could not build flash-attn==$FLASH_ATTN without CUDA (log: $root/$v.log)"; }
  mkdir -p "$dir/bin"
  # The launcher reaches torch by its physical path (cd -P): DeepSpeed rebuilds an op whenever the include paths in
  # its build file change, so torch must have one path however the folder is reached.
  printf '#!/bin/sh\n# OpenRLHF %s runs on the shared torch interpreter (scripts/openrlhf-env.sh)\nexec "$(cd -P "$(dirname "$0")/../../../torch/bin" && pwd)/python" "$@"\n' "$v" > "$dir/bin/python"
  chmod +x "$dir/bin/python"
  # The check the adapter relies on: this release imports as the adapter loads it (adapters/openrlhf/adapter.py),
  # over its DeepSpeed, and both Adam ops compile (into .venv/openrlhf/_ops/$ds, once per DeepSpeed release) and
  # step; prints the release's version.
  got=$(ACCUMCHECK_VENV_DIR="$repo/.venv" "$dir/bin/python" "$repo/adapters/openrlhf/adapter.py" --version "$v" \
        --deepspeed "$ds" --check 2>>"$root/$v.log" | tail -1) \
    || { tail -20 "$root/$v.log" >&2; fail "OpenRLHF $v does not import and step DeepSpeed's Adam ops over DeepSpeed $ds on CPU (log: $root/$v.log)"; }
  [ "$got" = "$v" ] || fail "OpenRLHF $v imports as version '$got' (log: $root/$v.log)"
  echo "$stamp" > "$dir/.accumcheck-stamp"
  echo "openrlhf-env: OpenRLHF $v (over DeepSpeed $ds) installed, imports, Adam ops built ($(( $(date +%s) - start )) s, $dir)"
done
echo "openrlhf-env: ready: ${wanted[*]} under $root"
