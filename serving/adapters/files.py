"""An adapter folder's files: the checks before upload and after download, and its content version.

The store (``serving.adapters.store``) validates a folder with :func:`validate_adapter` before
upload and names the upload by :func:`content_version`, so equal files always get the same
version; an LLM replica checks each download with :func:`verify_adapter_folder` before the
engine sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from serving.errors import AdapterInvalid, AdapterLoadFailed

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


def validate_adapter(path: str | Path, *, base_source: str | None, max_rank: int) -> dict[str, Any]:
    """Check a local adapter folder before upload; returns its adapter_config.

    Checks: both files exist, the config is a LoRA (peft) config, its rank is within
    ``max_rank``, its base model matches ``base_source`` when both are known, and the weights
    load as safetensors with LoRA A/B tensors of that rank.

    Raises:
        AdapterInvalid: naming the first problem found.
    """
    folder = Path(path)
    for fname in (CONFIG, WEIGHTS):
        if not (folder / fname).is_file():
            raise AdapterInvalid(f"{folder} has no {fname}")
    try:
        cfg = json.loads((folder / CONFIG).read_text())
    except json.JSONDecodeError as exc:
        raise AdapterInvalid(f"{CONFIG} is not valid JSON: {exc}") from None
    if str(cfg.get("peft_type", "")).upper() != "LORA":
        raise AdapterInvalid(f"{CONFIG} is not a LoRA adapter (peft_type={cfg.get('peft_type')!r})")
    rank = cfg.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise AdapterInvalid(f"{CONFIG} has no valid rank r (got {rank!r})")
    if rank > max_rank:
        raise AdapterInvalid(f"adapter rank {rank} exceeds the gateway's max_lora_rank {max_rank}")
    declared = cfg.get("base_model_name_or_path")
    if base_source and declared and Path(str(declared)).name != Path(base_source).name:
        raise AdapterInvalid(f"adapter was trained on {declared!r}, not on this base ({base_source!r})")
    _check_weights(folder / WEIGHTS, rank)
    return cfg


def _check_weights(path: Path, rank: int) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:
            keys = list(fh.keys())
            shapes = {k: fh.get_slice(k).get_shape() for k in keys}
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types for corrupt files
        raise AdapterInvalid(f"{WEIGHTS} does not load: {exc}") from None
    lora = [k for k in keys if "lora_A" in k or "lora_B" in k]
    if not lora:
        raise AdapterInvalid(f"{WEIGHTS} holds no lora_A/lora_B tensors")
    for k in lora:
        dim = shapes[k][0] if "lora_A" in k else shapes[k][-1]
        if dim != rank:
            raise AdapterInvalid(f"tensor {k} has rank {dim}, config says {rank}")


def content_version(folder: str | Path) -> str:
    """Short content hash of config + weights: equal files, equal version."""
    h = hashlib.sha256()
    for fname in (CONFIG, WEIGHTS):
        h.update((Path(folder) / fname).read_bytes())
    return h.hexdigest()[:12]


def verify_adapter_folder(path: str) -> None:
    """Raise :class:`AdapterLoadFailed` unless ``path`` holds a complete, loadable LoRA adapter."""
    from safetensors import safe_open

    for fname in (CONFIG, WEIGHTS):
        if not os.path.isfile(os.path.join(path, fname)) or os.path.getsize(os.path.join(path, fname)) == 0:
            raise AdapterLoadFailed(f"adapter download incomplete: {fname} missing or empty")
    try:
        with open(os.path.join(path, CONFIG)) as fh:
            json.load(fh)
        with safe_open(os.path.join(path, WEIGHTS), framework="numpy") as fh:
            keys = list(fh.keys())
    except Exception as exc:  # noqa: BLE001 - json/safetensors raise several types for corrupt files
        raise AdapterLoadFailed(f"adapter files do not load: {type(exc).__name__}: {exc}") from None
    if not any("lora_A" in k for k in keys):
        raise AdapterLoadFailed(f"{WEIGHTS} holds no LoRA tensors")


__all__ = ["CONFIG", "WEIGHTS", "content_version", "validate_adapter", "verify_adapter_folder"]
