#!/usr/bin/env bash
# Create the project venv and install the package with its test extras. Idempotent: re-runs only
# when pyproject.toml changed. Usage: scripts/setup.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
py="$(command -v python3.11 || command -v python3)"
scripts/install_system_deps.sh
stamp="$venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ]; then exit 0; fi
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e '.[dev]'
rm -f "$venv"/.installed-*
touch "$stamp"
echo "setup: $venv ready"
