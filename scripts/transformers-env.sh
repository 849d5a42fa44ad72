#!/usr/bin/env bash
# Installs real Hugging Face transformers releases side by side for the adapter:transformers-X.Y.Z targets
# (docs/transformers-adapter.md).
#
# Every release shares the torch of .venv/torch (scripts/adapters-env.sh builds it): each goes, without resolving
# dependencies, into its own folder .venv/transformers/X.Y.Z (pip install --no-deps --target) together with the
# accelerate release the Trainer drives and the small packages transformers needs that the torch environment lacks,
# all pinned below per release (numpy, packaging, filelock, fsspec and typing-extensions come from .venv/torch).
# The 4.x and 5.x lines need different huggingface-hub and tokenizers lines, so each release folder carries its own
# copy; nothing is shared between releases but torch. The adapter puts .venv/transformers/X.Y.Z in front of
# sys.path (adapters/transformers/release.py). .venv/transformers/X.Y.Z/bin/python is a two-line launcher of
# .venv/torch/bin/python: the adapter's environment is "transformers/X.Y.Z", so that `accumcheck list targets`
# shows a release installed exactly when it is.
#
# Idempotent: a stamp per release holds its version and a hash of the interpreter, torch's version and that
# release's pins; a rerun with nothing changed returns at once, offline. Each release is checked to import
# transformers.Trainer on CPU as the adapter loads it before its stamp is written. About 10-30 s per release
# (wheels only, no build). ACCUMCHECK_TRANSFORMERS_RELEASES="4.46.3" installs only those (they must be pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
torch_python="$repo/.venv/torch/bin/python"
root="$repo/.venv/transformers"

# The releases the adapters are named after: 4.45.2, the last release whose Trainer divides each micro-batch's
# mean loss by G (sim/loss_normaliser.cpp, transformers@4.45); 4.46.3, the last 4.46.x, the first line that counts
# num_items_in_batch over the accumulation window (PRs #34191, #34198; transformers@4.46); and the newest release
# on PyPI when this was written (pip index versions transformers: 5.24.0), which asks for torch >= 2.6 and
# Python >= 3.11, both met by .venv/torch. Keep in step with adapters/transformers-*/.
RELEASES=(4.45.2 4.46.3 5.24.0)

# Per release: accelerate (the Trainer's Accelerator, GradientAccumulationPlugin and backward) pinned to the
# release current when that transformers release came out (1.0.1: October 2024; 1.1.1: November 2024; 1.15.0: the
# newest, as 5.24.0 is), then transformers' own runtime requirements that .venv/torch lacks, at the versions pip's
# resolver picked for that pair against .venv/torch (pip install --dry-run --report), each inside the ranges of the
# release's METADATA (4.x: huggingface-hub >=0.23.2,<1.0, tokenizers >=0.20,<0.21, safetensors >=0.4.1;
# 5.24.0: huggingface-hub >=1.31,<3.0, tokenizers >=0.23.1,<0.24, safetensors >=0.8.0, regex >=2025.10.22, typer).
DEPS_4=(huggingface-hub==0.36.2 tokenizers==0.20.3 safetensors==0.8.0 regex==2026.11.19 pyyaml==6.0.4 tqdm==4.70.1
        psutil==7.2.2 hf-xet==1.8.0 requests==2.34.2 certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20
        urllib3==2.8.0)
DEPS_5=(huggingface-hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 regex==2026.11.19 pyyaml==6.0.4 tqdm==4.70.1
        psutil==7.2.2 hf-xet==1.8.0 typer==0.29.2 annotated-doc==0.0.7 click==8.5.1 httpx2==2.16.2
        httpcore2==2.16.2 pydantic==2.14.4 pydantic-core==2.50.5 rich==15.0.0 shellingham==1.5.4
        annotated-types==0.8.0 anyio==4.16.0 idna==3.20 markdown-it-py==4.3.0 pygments==2.21.0 truststore==0.10.5
        typing-inspection==0.4.5 h11==0.16.0 mdurl==0.1.2)
declare -A ACCELERATE=([4.45.2]=1.0.1 [4.46.3]=1.1.1 [5.24.0]=1.15.0)

fail() { echo "transformers-env: $*" >&2; exit 1; }

pins_of() {  # the pinned packages of release $1, one line
  local v=$1
  case "$v" in
    4.*) echo "transformers==$v accelerate==${ACCELERATE[$v]} ${DEPS_4[*]}" ;;
    5.*) echo "transformers==$v accelerate==${ACCELERATE[$v]} ${DEPS_5[*]}" ;;
    *) fail "no dependency pins for release $v" ;;
  esac
}

[ -x "$torch_python" ] || fail "no $torch_python: run scripts/adapters-env.sh first (torch 2.6.0)"
wanted=("${RELEASES[@]}")
if [ -n "${ACCUMCHECK_TRANSFORMERS_RELEASES:-}" ]; then
  read -r -a wanted <<< "$ACCUMCHECK_TRANSFORMERS_RELEASES"
  for v in "${wanted[@]}"; do
    [[ " ${RELEASES[*]} " == *" $v "* ]] || fail "release $v is not pinned here (pinned: ${RELEASES[*]})"
  done
fi

# What the interpreter contributes to every folder: its version and torch's (not the rest of this script, so that
# editing a message does not reinstall every release).
base_hash=$( { "$torch_python" --version 2>&1; "$torch_python" -c 'import importlib.metadata as m; print(m.version("torch"))'; } \
             | sha256sum | cut -d' ' -f1)
pip=("$torch_python" -m pip --disable-pip-version-check --no-input install --progress-bar off --no-deps
     --upgrade --target)
mkdir -p "$root"

for v in "${wanted[@]}"; do
  dir="$root/$v"
  read -r -a pins <<< "$(pins_of "$v")"
  stamp="$v $(echo "$base_hash ${pins[*]}" | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$dir/.accumcheck-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "transformers-env: transformers $v is up to date ($dir)"
    continue
  fi
  start=$(date +%s)
  rm -rf "$dir"
  "${pip[@]}" "$dir" "${pins[@]}" >"$root/$v.log" 2>&1 \
    || { tail -20 "$root/$v.log" >&2; fail "pip could not install transformers==$v and its pins (log: $root/$v.log)"; }
  mkdir -p "$dir/bin"
  printf '#!/bin/sh\n# transformers %s runs on the shared torch interpreter (scripts/transformers-env.sh)\nexec "$(dirname "$0")/../../../torch/bin/python" "$@"\n' "$v" > "$dir/bin/python"
  chmod +x "$dir/bin/python"
  # The check the adapter relies on: this release imports transformers.Trainer on CPU with the shared torch, as
  # the adapter loads it (adapters/transformers/release.py), and reports its version.
  got=$(ACCUMCHECK_VENV_DIR="$repo/.venv" "$dir/bin/python" "$repo/adapters/transformers/release.py" --version "$v" \
        2>>"$root/$v.log" | tail -1) || { tail -20 "$root/$v.log" >&2; fail "transformers $v does not import Trainer on CPU with this torch (log: $root/$v.log)"; }
  [ "$got" = "$v" ] || fail "transformers $v imports as version '$got' (log: $root/$v.log)"
  echo "$stamp" > "$dir/.accumcheck-stamp"
  echo "transformers-env: transformers $v (accelerate ${ACCELERATE[$v]}) installed, imports Trainer on CPU ($(( $(date +%s) - start )) s, $dir)"
done
echo "transformers-env: ready: ${wanted[*]} under $root"
