#!/usr/bin/env bash
# Download the GPU serving stack's wheels (scripts/serving-requirements-gpu.txt) for a GPU machine
# without network. Run it on any machine with network: pip is told the GPU machine's Python and
# platform, so this machine's own do not matter. Then carry DIR there and run
# `scripts/install_serving_gpu.sh DIR` (docs/gpu.md).
#
#   scripts/download_serving_gpu.sh [DIR]        default DIR: .gpu-wheels
#
# GPU_GLIBC (default 2.39, Ubuntu 24.04's; `ldd --version` on the GPU machine prints it) bounds the
# manylinux tags asked for. Each wheel names the oldest glibc it runs on and pip takes only the tags
# it is given, so every tag from manylinux_2_17 up to that glibc is passed: with manylinux_2_28 alone
# llguidance 1.7.6 (manylinux_2_31 only) has no wheel. Wheels come with --no-deps: the lock is the
# whole set beside the GPU image. SHA256SUMS in DIR lets the install check the copy.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=scripts/serving-requirements-gpu.txt
PYTHON_VERSION=3.12
GPU_GLIBC="${GPU_GLIBC:-2.39}"
dir="${1:-.gpu-wheels}"

glibc_minor="${GPU_GLIBC#2.}"
if ! [[ "$GPU_GLIBC" == 2.* && "$glibc_minor" =~ ^[0-9]+$ && "$glibc_minor" -ge 17 ]]; then
  echo "error: GPU_GLIBC must be the GPU machine's glibc as 2.N with N >= 17, got '$GPU_GLIBC'" >&2
  exit 2
fi
platforms=()
for minor in $(seq "$glibc_minor" -1 17); do
  platforms+=(--platform "manylinux_2_${minor}_x86_64")
done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)

mkdir -p "$dir"
python3 -m pip download --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
  "${platforms[@]}" -r "$LOCK" -d "$dir"
(cd "$dir" && sha256sum -- *.whl > SHA256SUMS)
echo "$(find "$dir" -maxdepth 1 -name '*.whl' | wc -l) wheels in $dir ($(du -sh "$dir" | cut -f1)); carry the folder" \
  "to the GPU machine and run: scripts/install_serving_gpu.sh $dir"
