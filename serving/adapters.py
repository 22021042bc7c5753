"""The S3 adapter store: validated, atomic, versioned LoRA adapters.

Layout under the configured prefix (``s3://bucket/prefix``)::

    {name}@{version}/adapter_model.safetensors   immutable; version = content hash
    {name}@{version}/adapter_config.json         written after the weights: its presence
                                                 marks a complete upload
    _refs/{name}.json                            {"version", "base", "rank", "pushed_at"}:
                                                 written last, publishes the version

Ray Serve LLM downloads ``{prefix}/{adapter_id}/``; the gateway resolves a user's
``base:name`` to ``base:name@version`` through ``_refs``, so a replica's cache is keyed by
content and an adapter re-pushed under the same name is never served stale, and a half-uploaded
adapter is never visible (its ref is not written yet).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serving.config import AdapterStoreSpec
from serving.errors import (
    AdapterExists,
    AdapterInvalid,
    AdapterNotFound,
    AdapterStoreUnavailable,
    BadAdapterName,
)

log = logging.getLogger(__name__)

ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
REFS = "_refs"


def check_name(name: str) -> str:
    """Raise :class:`BadAdapterName` unless ``name`` is 1-64 of ``[A-Za-z0-9._-]``, not starting with a symbol."""
    if not isinstance(name, str) or not ADAPTER_NAME.match(name):
        raise BadAdapterName(f"invalid adapter name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return name


@dataclass(frozen=True)
class AdapterRef:
    """A published adapter: its name, current version and what it was trained for."""

    name: str
    version: str
    base: str | None
    rank: int | None
    pushed_at: str

    @property
    def folder(self) -> str:
        return f"{self.name}@{self.version}"


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


class AdapterStore:
    """Adapters under an S3 prefix. S3 failures become :class:`AdapterStoreUnavailable` (503),
    never "not found", so a transient outage is not remembered as a missing adapter."""

    def __init__(self, spec: AdapterStoreSpec, client: Any | None = None):
        self.spec = spec
        self.bucket, self.root = spec.bucket, spec.key_prefix
        self._client = client

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.spec.endpoint_url, region_name=self.spec.region,
                config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}),
            )
        return self._client

    def _call(self, fn: str, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, fn)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise KeyError(kwargs.get("Key")) from None
            raise AdapterStoreUnavailable(f"S3 {fn} failed: {code or exc}") from None
        except BotoCoreError as exc:
            raise AdapterStoreUnavailable(f"S3 unreachable: {exc}") from None

    # -- reads ---------------------------------------------------------------------------
    def resolve(self, name: str) -> AdapterRef:
        """The published version of ``name``.

        Raises:
            BadAdapterName, AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        check_name(name)
        try:
            body = self._call("get_object", Key=f"{self.root}{REFS}/{name}.json")["Body"].read()
        except KeyError:
            raise AdapterNotFound(f"adapter {name!r} not found under {self.spec.prefix}") from None
        return AdapterRef(name=name, **json.loads(body))

    def list(self) -> list[AdapterRef]:
        """Every published adapter, following S3 pagination (any number of adapters)."""
        refs: list[AdapterRef] = []
        kwargs: dict[str, Any] = {"Prefix": f"{self.root}{REFS}/"}
        while True:
            page = self._call("list_objects_v2", **kwargs)
            for obj in page.get("Contents", []):
                name = obj["Key"].rsplit("/", 1)[1].removesuffix(".json")
                try:
                    refs.append(self.resolve(name))
                except (AdapterNotFound, BadAdapterName):  # removed meanwhile, or a stray key
                    continue
            if not page.get("IsTruncated"):
                return sorted(refs, key=lambda r: r.name)
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def list_names(self) -> list[str]:
        """Adapter names only (one LIST call per 1000, no per-adapter reads)."""
        names: list[str] = []
        kwargs: dict[str, Any] = {"Prefix": f"{self.root}{REFS}/"}
        while True:
            page = self._call("list_objects_v2", **kwargs)
            names += [o["Key"].rsplit("/", 1)[1].removesuffix(".json") for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(n for n in names if ADAPTER_NAME.match(n))
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def page_names(self, after: str | None = None, limit: int = 100) -> tuple[list[str], bool]:
        """One page of adapter names in key order, starting after ``after``; returns (names, has_more).

        Uses S3's ``StartAfter``, so a page costs one LIST call however many adapters exist.
        """
        kwargs: dict[str, Any] = {"Prefix": f"{self.root}{REFS}/", "MaxKeys": min(limit + 1, 1000)}
        if after:
            kwargs["StartAfter"] = f"{self.root}{REFS}/{after}.json"
        names: list[str] = []
        while True:
            page = self._call("list_objects_v2", **kwargs)
            for obj in page.get("Contents", []):
                name = obj["Key"].rsplit("/", 1)[1].removesuffix(".json")
                if ADAPTER_NAME.match(name):
                    names.append(name)
                if len(names) > limit:
                    return names[:limit], True
            if not page.get("IsTruncated"):
                return names, False
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    # -- writes --------------------------------------------------------------------------
    def push(self, folder: str | Path, name: str, *, base: str | None = None, base_source: str | None = None,
             max_rank: int = 32, force: bool = False) -> AdapterRef:
        """Validate and publish a local adapter folder as ``name``.

        Weights go up first, then adapter_config.json, then the ref that makes the version
        visible. An existing name is refused unless ``force``; pushing identical files again
        is a no-op.

        Raises:
            BadAdapterName, AdapterInvalid (400), AdapterExists (409), AdapterStoreUnavailable (503).
        """
        check_name(name)
        cfg = validate_adapter(folder, base_source=base_source, max_rank=max_rank)
        version = content_version(folder)
        try:
            current = self.resolve(name)
        except AdapterNotFound:
            current = None
        if current is not None and current.version == version:
            return current
        if current is not None and not force:
            raise AdapterExists(f"adapter {name!r} exists (version {current.version}); push with force to replace it")
        ref = AdapterRef(name=name, version=version, base=base, rank=cfg["r"],
                         pushed_at=datetime.now(UTC).isoformat(timespec="seconds"))
        key = f"{self.root}{ref.folder}/"
        self._call("put_object", Key=key + WEIGHTS, Body=(Path(folder) / WEIGHTS).read_bytes())
        self._call("put_object", Key=key + CONFIG, Body=(Path(folder) / CONFIG).read_bytes())
        body = json.dumps({"version": ref.version, "base": ref.base, "rank": ref.rank, "pushed_at": ref.pushed_at})
        self._call("put_object", Key=f"{self.root}{REFS}/{name}.json", Body=body.encode(), ContentType="application/json")
        log.info("published adapter %s version %s", name, version)
        return ref

    def remove(self, name: str) -> AdapterRef:
        """Unpublish ``name`` (ref first, so it disappears at once) and delete its versions."""
        ref = self.resolve(name)
        self._call("delete_object", Key=f"{self.root}{REFS}/{name}.json")
        kwargs: dict[str, Any] = {"Prefix": f"{self.root}{name}@"}
        while True:
            page = self._call("list_objects_v2", **kwargs)
            for obj in page.get("Contents", []):
                self._call("delete_object", Key=obj["Key"])
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return ref

    def ensure_bucket(self) -> None:
        """Create the bucket if missing (local S3 servers start empty)."""
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self.client.create_bucket(Bucket=self.bucket)
