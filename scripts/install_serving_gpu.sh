#!/usr/bin/env bash
# Install the GPU serving stack (Ray Serve LLM 2.58.1 + vLLM 0.26.0, scripts/serving-requirements-gpu.txt)
# and this checkout on a GPU machine without network, from the wheels scripts/download_serving_gpu.sh
# fetched (docs/gpu.md).
#
#   scripts/install_serving_gpu.sh DIR [VENV]        default VENV: .venv
#
# VENV is made by the image's Python 3.12 with --system-site-packages, so torch (CUDA 13), transformers
# and the rest of the image stay the image's; the venv gets no pip of its own and uses the image's.
# The image is checked against the lock's `# image:` lines before anything is installed; the lock's
# wheels then go into VENV with --no-index --no-deps, and this checkout is installed editable, built by
# the image's setuptools. Last, `python -m serving.compat` checks that every Ray Serve LLM and vLLM
# internal the gateway uses is in place. Idempotent: a stamp in VENV records the lock and this script.
# MAZE_GPU_PYTHON names the image's interpreter (default python3); MAZE_SERVING_FORCE=1 reinstalls.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=scripts/serving-requirements-gpu.txt
PYTHON="${MAZE_GPU_PYTHON:-python3}"

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 WHEEL_DIR [VENV_DIR]  (WHEEL_DIR: what scripts/download_serving_gpu.sh wrote)" >&2
  exit 2
fi
if [[ ! -d "$1" ]]; then
  echo "error: wheel folder $1 not found; make it with scripts/download_serving_gpu.sh where there is network" >&2
  exit 2
fi
dir=$(cd "$1" && pwd)
venv="${2:-.venv}"
log() { echo "[install_serving_gpu] $*" >&2; }

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  echo "error: $PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); the GPU" \
    "stack's wheels are built for 3.12 (set MAZE_GPU_PYTHON to the image's python3.12)" >&2
  exit 2
fi

stamp_value() { cat "$LOCK" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
stamp="$venv/.maze-serving-gpu-stamp"
if [[ "${MAZE_SERVING_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$(stamp_value)" ]]; then
  log "already installed in $venv (stamp matches); nothing to do"
  exit 0
fi

if [[ -f "$dir/SHA256SUMS" ]]; then
  log "checking the wheels against $dir/SHA256SUMS"
  if ! (cd "$dir" && sha256sum --quiet -c SHA256SUMS); then
    echo "error: wheels in $dir differ from SHA256SUMS (a broken copy?); copy the folder again" >&2
    exit 2
  fi
fi

log "checking the image's packages against $LOCK"
"$PYTHON" - "$LOCK" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement

problems = []
for line in open(sys.argv[1]):
    if not line.startswith("# image: "):
        continue
    req = Requirement(line.removeprefix("# image: ").strip())
    try:
        found = version(req.name)
    except PackageNotFoundError:
        problems.append(f"{req} (not installed)")
        continue
    if req.specifier and not req.specifier.contains(found, prereleases=True):
        problems.append(f"{req} (the image has {found})")
if problems:
    sys.exit("error: the image lacks what the GPU stack is built on: " + "; ".join(problems)
             + ". Add the missing wheels to the lock and the download (docs/gpu.md), or use the matching image")
EOF

if [[ ! -x "$venv/bin/python" ]]; then
  log "making $venv (the image's packages visible in it)"
  "$PYTHON" -m venv --system-site-packages --without-pip "$venv"
fi
# An image whose python3 is itself a virtual environment keeps its packages in that environment, which
# --system-site-packages does not reach (it reaches the interpreter's base): a .pth file adds them to
# VENV, after VENV's own, so the lock's wheels still come first.
"$PYTHON" - "$venv" <<'EOF'
import site, sys
from pathlib import Path

if sys.prefix != sys.base_prefix:
    target = Path(sys.argv[1]) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (target / "maze_image_site.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
EOF
PY="$venv/bin/python"
log "installing $(grep -c '^[^#].*==' "$LOCK") pinned wheels from $dir (no index, no dependency resolution)"
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --find-links "$dir" -r "$LOCK"
log "installing this checkout (editable)"
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation -e .

log "checking the installed stack"
"$PY" - "$LOCK" <<'EOF'
import sys
from importlib.metadata import version

pins = dict(line.strip().split("==") for line in open(sys.argv[1]) if line[0].isalnum() and "==" in line)
wrong = [f"{name} {version(name)} (the lock says {pins[name]})" for name in ("ray", "vllm") if version(name) != pins[name]]
if wrong:
    sys.exit(f"error: installed {', '.join(wrong)}: something else on the path shadows the venv")
EOF
"$PY" -m serving.compat
stamp_value > "$stamp"
log "done: $venv holds the GPU serving stack; start it with $venv/bin/maze-serve -c YOUR_GPU_CONFIG up"
