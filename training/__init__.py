"""Training for the embedded maze VLM: model builder, demonstrations, SFT, local GRPO, scoring.

Importing the package makes PyPI's CUDA-only torchvision importable on a CPU torch (the Qwen-VL
image and video processors import it but need none of its compiled ops); see
``scripts/torchvision_cpu_fix.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_FIX = Path(__file__).resolve().parent.parent / "scripts" / "torchvision_cpu_fix.py"
# The fix keeps its torch.library.Library in a module global; hold the module so that the
# schema definitions are not garbage-collected (which would undefine them again).
_FIX_MODULE = None


def _install_torchvision_fix() -> None:
    global _FIX_MODULE
    if not _FIX.exists():
        return
    spec = importlib.util.spec_from_file_location("_maze_torchvision_cpu_fix", _FIX)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.install()
    _FIX_MODULE = module


_install_torchvision_fix()
