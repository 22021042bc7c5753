#!/usr/bin/env bash
# Install the framework extras (maze_gateway/) each into a venv of its own, beside the main one:
#   scripts/install_frameworks.sh VENV_DIR     ->  VENV_DIR-openenv, VENV_DIR-verifiers, VENV_DIR-inspect
#
# Why not in VENV_DIR: openenv-core's gradio needs pillow<13, verifiers needs openai<3 and
# inspect-ai's aiobotocore needs botocore<1.43.118, each below the serving stack's pins (pillow 13,
# openai 3.57, boto3/botocore 1.44); and verifiers' openai<3 excludes inspect-ai's openai>=3.4.
# Each venv holds one framework and this package (editable, its core dependencies only), resolved
# with scripts/framework-pins/EXTRA.txt as constraints (a pip freeze of the tested venv).
# Idempotent: a stamp per venv records a hash of pyproject.toml, this script and the pins.
# MAZE_FRAMEWORKS_FREEZE=1 rewrites the pins from the result.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ne 1 ]]; then
  echo "usage: $0 VENV_DIR" >&2
  exit 2
fi
venv="$1"
py="$(command -v python3.11 || command -v python3)"
source scripts/pip_install.sh
setup_uv "$venv"
for extra in openenv verifiers inspect; do
  target="$venv-$extra"
  pins="scripts/framework-pins/$extra.txt"
  stamp="$target/.installed-$(cat pyproject.toml "$0" "$pins" | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && continue
  [ -x "$target/bin/python" ] || "$py" -m venv "$target"
  constraints=(-c "$pins")
  [ "${MAZE_FRAMEWORKS_FREEZE:-0}" = 1 ] && constraints=()
  # No compile_bytecode here (37 s for the three): only the tests run these venvs, a few processes
  # each, and tests/maze_gateway/venvs.py lets the first of them write the bytecode of what it imports.
  pip_install "$target/bin/python" -q "${constraints[@]}" -e ".[$extra]"
  if [ "${MAZE_FRAMEWORKS_FREEZE:-0}" = 1 ]; then
    {
      echo "# Tested environment of the $extra extra (pip freeze of .venv-$extra, Python 3.11): constraints for"
      echo "# scripts/setup.sh, so a fresh venv resolves to what the tests ran on. Regenerate with MAZE_FRAMEWORKS_FREEZE=1."
      "$target/bin/python" -m pip freeze --exclude-editable | grep -v '^-e '
    } > "$pins"
  fi
  rm -f "$target"/.installed-*
  touch "$target/.installed-$(cat pyproject.toml "$0" "$pins" | sha256sum | cut -c1-16)"
done
