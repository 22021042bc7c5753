"""Make PyPI's CUDA torchvision importable on a CPU-only torch (pytorch/vision#9085).

PyPI only ships CUDA builds of torchvision. On torch+cpu their compiled extension fails to load,
so the ``torchvision::nms`` / ``torchvision::qnms`` operators are never defined and torchvision's
own ``_meta_registrations`` dies at import with "operator torchvision::nms does not exist".
vLLM and the Qwen-VL image/video processors import torchvision but need none of its compiled ops,
so defining the two schemas (no kernels) before torchvision's first import is enough.

This module is copied into site-packages by ``scripts/install_serving.sh`` together with a
``.pth`` file that calls :func:`install`. The hook is lazy: it only imports torch when something
imports ``torchvision``, so unrelated processes (Ray workers, CLIs) pay nothing.
Set ``MAZE_TORCHVISION_FIX=0`` to disable it.
"""

from __future__ import annotations

import os
import sys

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
# torch.library.Library removes its definitions when garbage-collected: keep it alive.
_LIBRARY = None


def _op_exists(torch, name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        return True
    except RuntimeError:
        return False


def register_schemas() -> None:
    """Define the missing torchvision operator schemas (idempotent)."""
    global _LIBRARY
    import torch

    # A CPU torchvision build registers real kernels from C++; defining the schema first would
    # make its registration fail, so leave matching builds alone.
    if torch.version.cuda is not None:
        return
    try:
        from importlib.metadata import version

        if "+cpu" in version("torchvision"):
            return
    except Exception:  # noqa: BLE001 - metadata lookup must never break an import
        pass
    missing = [s for s in _SCHEMAS if not _op_exists(torch, s.split("(", 1)[0])]
    if not missing:
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in missing:
        lib.define(schema)
    _LIBRARY = lib


class _TorchvisionHook:
    """Meta-path finder that runs :func:`register_schemas` once, then gets out of the way."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002 - finder protocol
        if fullname != "torchvision":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            register_schemas()
        except Exception as exc:  # noqa: BLE001 - fall back to torchvision's own error
            print(f"torchvision_cpu_fix: could not register schemas: {exc}", file=sys.stderr)
        return None  # let the normal finders import torchvision


def install() -> None:
    """Install the lazy hook (called from the .pth file at interpreter start-up)."""
    if os.environ.get("MAZE_TORCHVISION_FIX", "1") == "0":
        return
    if "torchvision" in sys.modules:
        return
    if any(isinstance(f, _TorchvisionHook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TorchvisionHook())
