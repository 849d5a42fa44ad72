#!/usr/bin/env bash
# Installs the Debian packages accumcheck builds against, only those that are missing.
# Safe to run repeatedly; needs root (or sudo) the first time on a fresh machine.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libeigen3-dev libtbb-dev libgmp-dev
  librapidcheck-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libyaml-cpp-dev
  # The accumcheck command's allocator (ACCUMCHECK_MIMALLOC in CMakeLists.txt).
  libmimalloc-dev
  # accumcheck report and gallery: Chart.js, inlined into each page; Chromium draws the pages in the tests.
  libjs-chart.js chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 2; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
