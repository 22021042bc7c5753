"""An adapter folder's files: the checks before upload and after download, and its content version.

The store (``serving.adapters.store``) validates a folder with :func:`validate_adapter` before
upload (well-formed, and served as trained: :mod:`serving.adapters.modules`) and names the upload
by :func:`content_version`, so equal files always get the same version (:func:`content_version_of`
hashes the bytes, which the store's re-check of its objects uses too); :func:`receive_version` writes
a version's files as the store streams them, hashing them on the way, and an LLM replica checks each
download with :func:`verify_adapter_folder` before the engine sees it.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from serving.adapters.modules import adapter_max_rank, check_servable
from serving.errors import AdapterInvalid, AdapterLoadFailed

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


def validate_adapter(path: str | Path, *, base_source: str | None, max_rank: int,
                     vision_tower: bool = False) -> dict[str, Any]:
    """Check a local adapter folder before upload; returns its adapter_config.

    Checks: both files exist, the config is a LoRA (peft) config, its rank (``r`` and any
    ``rank_pattern``) is within ``max_rank``, its base model matches ``base_source`` when both are
    known, the weights load as safetensors with LoRA A/B tensors of those ranks, and the engine
    would serve it as trained (:func:`~serving.adapters.modules.check_servable`): no peft feature
    vLLM refuses, and no trained module it would leave out (one that names no module of the base
    ``base_source``, or one in the vision tower or its merger unless ``vision_tower``, the serving
    config's ``lora.vision_tower``).

    Raises:
        AdapterInvalid: naming the first problem found (AdapterNotServable when the engine would
            refuse it or serve it other than trained).
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
    top = adapter_max_rank(cfg)
    if top > max_rank:
        raise AdapterInvalid(f"adapter rank {top} exceeds the gateway's max_lora_rank {max_rank}")
    declared = cfg.get("base_model_name_or_path")
    if base_source and declared and Path(str(declared)).name != Path(base_source).name:
        raise AdapterInvalid(f"adapter was trained on {declared!r}, not on this base ({base_source!r})")
    _check_weights(folder / WEIGHTS, rank, set((cfg.get("rank_pattern") or {}).values()))
    check_servable(folder, cfg, base_source=base_source, vision_tower=vision_tower)
    return cfg


def _check_weights(path: Path, rank: int, other_ranks: set[int]) -> None:
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
        if dim != rank and dim not in other_ranks:  # rank_pattern gives some modules their own rank
            raise AdapterInvalid(f"tensor {k} has rank {dim}, config says {rank}")


def content_version(folder: str | Path) -> str:
    """Short content hash of a folder's config + weights: equal files, equal version."""
    return content_version_of((Path(folder) / CONFIG).read_bytes(), (Path(folder) / WEIGHTS).read_bytes())


def content_version_of(config: bytes, weights: bytes) -> str:
    """The content version of an adapter's two files' bytes (sha256 of config then weights, first 12
    hex digits): what :func:`content_version` names a folder by, and what the store re-hashes its
    objects with to check they are still the version they were published as."""
    h = hashlib.sha256()
    for data in (config, weights):
        h.update(data)
    return h.hexdigest()[:12]


MAX_PENDING_CHUNKS = 16  # read ahead of the writes by at most this many chunks


def receive_version(open_stream: Callable[[str], Iterable[bytes]], dest: str | Path, *,
                    hashed: bool = True) -> str | None:
    """Write a version's two files (adapter_config.json, then the weights) into ``dest`` from
    ``open_stream(file name)`` (their bytes in chunks: the store's streamed read,
    :meth:`AdapterStore.download_version <serving.adapters.AdapterStore.download_version>`), hashing
    the bytes as they arrive; returns their content version (None when not ``hashed``), so checking a
    download against its version needs no second read of the files and the hashing overlaps the
    transfer. Each file is written under a temporary name and renamed when complete.

    Raises:
        AdapterLoadFailed: a file is missing from the store (``open_stream`` raised KeyError).
        AdapterStoreUnavailable (503): the store failed or went away mid-transfer.
    """
    digest = hashlib.sha256() if hashed else None
    folder = Path(dest)
    folder.mkdir(parents=True, exist_ok=True)
    # One thread writes and hashes each chunk while this one reads the next from the socket (both
    # release the GIL), so the hash costs about its last chunk's time, not the whole file's.
    with ThreadPoolExecutor(1, thread_name_prefix="adapter-download") as sink:
        for fname in (CONFIG, WEIGHTS):
            try:
                chunks = open_stream(fname)
            except KeyError:
                raise AdapterLoadFailed(f"adapter download incomplete: {fname} is missing from the store") from None
            part = folder / f"{fname}.part"
            with open(part, "wb") as out:
                pending: collections.deque = collections.deque()
                for chunk in chunks:
                    pending.append(sink.submit(_take, chunk, out, digest))
                    if len(pending) > MAX_PENDING_CHUNKS:  # a slow disk holds back the reads, not memory
                        pending.popleft().result()
                for done in pending:
                    done.result()
            os.replace(part, folder / fname)
    return digest.hexdigest()[:12] if digest is not None else None


def _take(chunk: bytes, out: Any, digest: Any) -> None:
    if digest is not None:
        digest.update(chunk)
    out.write(chunk)


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


__all__ = ["CONFIG", "WEIGHTS", "content_version", "content_version_of", "receive_version", "validate_adapter",
           "verify_adapter_folder"]
