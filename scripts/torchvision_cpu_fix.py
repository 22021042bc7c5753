"""Make PyPI's CUDA torchvision importable on a CPU-only torch (pytorch/vision#9085).

PyPI only ships CUDA builds of torchvision. On torch+cpu their compiled extension fails to load,
so the ``torchvision::nms`` / ``torchvision::qnms`` operators are never defined and torchvision's
own ``_meta_registrations`` dies at import with "operator torchvision::nms does not exist".
vLLM and the Qwen-VL image/video processors import torchvision but need none of its compiled ops,
so defining the two schemas (no kernels) before torchvision's first import is enough.

The same CUDA build's image codec extension (``torchvision/image.so``) cannot load either, and
transformers' torchvision-backend image processors decode image URLs / data: URLs with
``torchvision.io.decode_image``. Right after torchvision is imported, and only if its image
extension is unavailable, the decoders are replaced by Pillow-based equivalents (same uint8
``[C, H, W]`` tensors).

This module is copied into site-packages by ``scripts/install_serving.sh`` together with a
``.pth`` file that calls :func:`install`. The hook is lazy: it only imports torch when something
imports ``torchvision``, so unrelated processes (Ray workers, CLIs) pay nothing.
Set ``MAZE_TORCHVISION_FIX=0`` to disable it.
"""

from __future__ import annotations

import io
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
    from importlib.metadata import PackageNotFoundError, version

    try:
        if "+cpu" in version("torchvision"):
            return
    except PackageNotFoundError:
        return  # nothing to fix
    missing = [s for s in _SCHEMAS if not _op_exists(torch, s.split("(", 1)[0])]
    if not missing:
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in missing:
        lib.define(schema)
    _LIBRARY = lib


# -- Pillow fallbacks for torchvision.io's decoders -------------------------------------------
_PIL_MODES = {"RGB": "RGB", "RGB_ALPHA": "RGBA", "GRAY": "L", "GRAY_ALPHA": "LA"}


def _to_bytes(data) -> bytes:
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as fh:
            return fh.read()
    return data.detach().cpu().contiguous().numpy().tobytes()  # 1-D uint8 tensor


def _pil_decode(data, mode="UNCHANGED", apply_exif_orientation=False):
    import numpy as np
    import torch
    from PIL import Image, ImageOps

    if isinstance(data, (list, tuple)):  # decode_jpeg accepts a batch
        return [_pil_decode(d, mode, apply_exif_orientation) for d in data]
    image = Image.open(io.BytesIO(_to_bytes(data)))
    if apply_exif_orientation:
        image = ImageOps.exif_transpose(image)
    name = mode.name if hasattr(mode, "name") else str(mode).upper()
    if name in _PIL_MODES:
        image = image.convert(_PIL_MODES[name])
    elif image.mode not in ("L", "LA", "RGB", "RGBA"):
        image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    array = np.array(image, dtype=np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


def _pil_read_file(path):
    import torch

    return torch.frombuffer(bytearray(_to_bytes(path)), dtype=torch.uint8)


def _pil_decode_image(input, mode="UNCHANGED", apply_exif_orientation=False):
    return _pil_decode(input, mode, apply_exif_orientation)


def _pil_decode_jpeg(input, mode="UNCHANGED", device="cpu", apply_exif_orientation=False):
    return _pil_decode(input, mode, apply_exif_orientation)


def _pil_read_image(path, mode="UNCHANGED", apply_exif_orientation=False):
    return _pil_decode(path, mode, apply_exif_orientation)


def patch_image_io() -> bool:
    """Swap torchvision.io's decoders for Pillow ones when its image extension did not load."""
    image_mod = sys.modules.get("torchvision.io.image")
    if image_mod is None or image_mod._has_image_ops():
        return False
    io_mod = sys.modules["torchvision.io"]
    replacements = {
        "decode_image": _pil_decode_image,
        "decode_png": _pil_decode_image,
        "decode_jpeg": _pil_decode_jpeg,
        "read_image": _pil_read_image,
        "read_file": _pil_read_file,
    }
    for name, func in replacements.items():
        for mod in (image_mod, io_mod):
            if hasattr(mod, name):
                setattr(mod, name, func)
    return True


class _PatchingLoader:
    """Wraps torchvision's loader: run the real import, then patch torchvision.io."""

    def __init__(self, loader, hook):
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._hook.uninstall()
        try:
            patch_image_io()
        except Exception as exc:  # noqa: BLE001 - never break `import torchvision`
            print(f"torchvision_cpu_fix: could not patch torchvision.io: {exc}", file=sys.stderr)

    def __getattr__(self, name):  # get_resource_reader, is_package, ... pass through
        return getattr(self._loader, name)


class _TorchvisionHook:
    """Meta-path finder for ``torchvision``: schemas first, then the real import, then the patch.

    It stays installed until torchvision has actually been imported: availability checks such
    as transformers' ``importlib.util.find_spec("torchvision")`` also call finders, and the
    import that follows must still get the wrapped loader.
    """

    # Marker shared by every copy of this module (the .pth-installed one, or a copy loaded from
    # the repo by path): at most one hook is installed and hooks never call each other.
    _maze_torchvision_hook = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision":
            return None
        try:
            register_schemas()
        except Exception as exc:  # noqa: BLE001 - fall back to torchvision's own error
            print(f"torchvision_cpu_fix: could not register schemas: {exc}", file=sys.stderr)
            return None
        for finder in list(sys.meta_path):
            if getattr(finder, "_maze_torchvision_hook", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader, self)
            return spec
        return None

    def uninstall(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def install() -> None:
    """Install the lazy hook (called from the .pth file at interpreter start-up)."""
    if os.environ.get("MAZE_TORCHVISION_FIX", "1") == "0":
        return
    if "torchvision" in sys.modules:
        return
    if any(getattr(f, "_maze_torchvision_hook", False) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TorchvisionHook())
