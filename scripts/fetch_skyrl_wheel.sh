#!/usr/bin/env bash
# The skyrl wheel whose config keys training/skyrl/skyrl_config_keys_<version>.txt lists, into
# .cache/wheels/ (ignored by git), so tests/training/skyrl/test_keys.py checks the shipped list
# against it. Downloaded only (pip download --no-deps): SkyRL itself needs Python >= 3.12 and GPUs
# to install, and scripts/extract_skyrl_keys.py reads one module out of the wheel. Idempotent.
# Usage: scripts/fetch_skyrl_wheel.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
version="$(sed -n 's/^SKYRL_VERSION = "\(.*\)"$/\1/p' training/skyrl/keys.py)"
dest=.cache/wheels
wheel="$dest/skyrl-$version-py3-none-any.whl"
[ -f "$wheel" ] && exit 0
mkdir -p "$dest"
"$venv/bin/python" -m pip download -q --no-deps "skyrl==$version" --python-version 3.12 --only-binary=:all: -d "$dest"
[ -f "$wheel" ] || { echo "pip download skyrl==$version did not leave $wheel" >&2; exit 1; }
