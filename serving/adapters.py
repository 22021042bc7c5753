"""The S3 adapter store: validated, atomic, versioned LoRA adapters.

Layout under the configured prefix (``s3://bucket/prefix``)::

    {name}@{version}/adapter_model.safetensors   immutable; version = content hash
    {name}@{version}/adapter_config.json         written after the weights: its presence
                                                 marks a complete upload
    _refs/{name}.json                            {"version", "base", "rank", "pushed_at", "history",
                                                 "canary"}: written last, publishes the version

A name is an alias to one immutable version. The ref is the alias: one small object replaced by a
single conditional PUT (``If-Match`` its ETag, or ``If-None-Match: *`` when new), so a push,
:meth:`AdapterStore.promote` or :meth:`AdapterStore.rollback` moves it atomically and two writers
racing never lose an update (the loser re-reads and retries). The alias's moves live in the same
object (``history``, newest first), so the move and its record can never disagree. A canary
(:meth:`AdapterStore.canary`, ``serving.canary``) is a second version the name serves to a weighted
share of sessions; it lives in the same object, next to the version it is tested against, and ends
by :meth:`AdapterStore.promote` (it becomes the version) or :meth:`AdapterStore.abort_canary`.

Ray Serve LLM downloads ``{prefix}/{adapter_id}/``; the gateway resolves a user's
``base:name`` to ``base:name@version`` through ``_refs``, so a replica's cache is keyed by
content and an adapter re-pushed under the same name is never served stale, and a half-uploaded
adapter is never visible (its ref is not written yet).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serving.adapter_files import CONFIG, WEIGHTS, content_version, validate_adapter
from serving.canary import Canary, canary_of, check_weight
from serving.config import AdapterStoreSpec
from serving.errors import (
    AdapterExists,
    AdapterNotFound,
    AdapterRefConflict,
    AdapterStoreUnavailable,
    BadAdapterName,
    InvalidCanary,
    NoCanary,
    NoRollbackTarget,
)

log = logging.getLogger(__name__)

ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REFS = "_refs"
VERSION = re.compile(r"^[0-9a-f]{12}$")  # content_version's form
HISTORY_KEEP = 100  # alias moves kept in the ref (the ref stays a small object)
REF_WRITE_ATTEMPTS = 5  # conditional-write retries before a move gives up as conflicting
STABLE_MOVES = ("push", "promote", "rollback")  # history actions that moved the version served; the others
# (canary, abort) started, re-weighted or ended a canary


def check_name(name: str) -> str:
    """Raise :class:`BadAdapterName` unless ``name`` is 1-64 of ``[A-Za-z0-9._-]``, not starting with a symbol."""
    if not isinstance(name, str) or not ADAPTER_NAME.match(name):
        raise BadAdapterName(f"invalid adapter name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return name


def check_version(version: str) -> str:
    """Raise :class:`BadAdapterName` unless ``version`` has the store's version form (12 hex digits)."""
    if not isinstance(version, str) or not VERSION.match(version):
        raise BadAdapterName(f"invalid adapter version {version!r}: versions are 12 lowercase hex digits")
    return version


def split_model_name(text: str) -> tuple[str, str | None]:
    """``name`` or ``name@version`` -> (name, version or None), both checked."""
    name, sep, version = text.partition("@")
    check_name(name)
    if sep and not VERSION.match(version):
        raise BadAdapterName(f"invalid adapter version in {text!r}: versions are 12 lowercase hex digits")
    return name, (version if sep else None)


@dataclass(frozen=True)
class AliasMove:
    """One move of an alias: which version it pointed to from when on, and why; for a canary
    (``canary``: started or re-weighted, ``abort``: ended unpromoted) the canary's version."""

    version: str
    at: str
    action: str  # push | promote | rollback | canary | abort
    base: str | None = None
    rank: int | None = None
    weight: float | None = None  # the canary's share in percent (canary moves only)


class _RefChanged(Exception):
    """A conditional ref write lost a race (the ref changed or vanished since it was read)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class AdapterRef:
    """A published adapter: its name, current version and what it was trained for, and the canary
    version it serves to a share of sessions, if one runs."""

    name: str
    version: str
    base: str | None
    rank: int | None
    pushed_at: str
    canary: Canary | None = None

    @property
    def folder(self) -> str:
        return f"{self.name}@{self.version}"


def _history_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ref's moves, newest first; a ref written without history counts as one push."""
    if doc.get("history"):
        return list(doc["history"])
    return [{"version": doc["version"], "at": doc.get("pushed_at", ""), "action": "push",
             "base": doc.get("base"), "rank": doc.get("rank")}]


def _ref_of(name: str, doc: dict[str, Any]) -> AdapterRef:
    return AdapterRef(name=name, version=doc["version"], base=doc.get("base"), rank=doc.get("rank"),
                      pushed_at=doc.get("pushed_at", ""), canary=canary_of(doc))


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
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise _RefChanged(kwargs.get("Key")) from None
            raise AdapterStoreUnavailable(f"S3 {fn} failed: {code or exc}") from None
        except BotoCoreError as exc:
            raise AdapterStoreUnavailable(f"S3 unreachable: {exc}") from None

    # -- reads ---------------------------------------------------------------------------
    def resolve(self, name: str) -> AdapterRef:
        """The published version of ``name``.

        Raises:
            BadAdapterName, AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        doc, _ = self._read_ref(name)
        if doc is None:
            raise AdapterNotFound(f"adapter {name!r} not found under {self.spec.prefix}")
        return _ref_of(name, doc)

    def history(self, name: str) -> list[AliasMove]:
        """The alias's moves, newest first (the first is the version served now).

        Raises:
            BadAdapterName, AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        doc, _ = self._read_ref(name)
        if doc is None:
            raise AdapterNotFound(f"adapter {name!r} not found under {self.spec.prefix}")
        return [AliasMove(**m) for m in _history_of(doc)]

    def resolve_version(self, name: str, version: str) -> AdapterRef:
        """An explicit version of ``name``, current or not, when its files are in the store.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        check_name(name)
        check_version(version)
        self._require_version(name, version)
        doc, _ = self._read_ref(name)
        move = next((m for m in _history_of(doc) if m["version"] == version), None) if doc else None
        return AdapterRef(name=name, version=version, base=(move or doc or {}).get("base"),
                          rank=(move or {}).get("rank"), pushed_at=(move or {}).get("at", ""))

    def _require_version(self, name: str, version: str) -> None:
        try:
            # adapter_config.json is written after the weights: its presence marks a complete upload.
            self._call("head_object", Key=f"{self.root}{name}@{version}/{CONFIG}")
        except KeyError:
            raise AdapterNotFound(f"adapter {name!r} has no version {version!r} under {self.spec.prefix}") from None

    def _read_ref(self, name: str) -> tuple[dict[str, Any] | None, str | None]:
        """The ref document and its ETag, or (None, None) when the name is not published."""
        check_name(name)
        try:
            obj = self._call("get_object", Key=self._ref_key(name))
        except KeyError:
            return None, None
        return json.loads(obj["Body"].read()), obj.get("ETag")

    def _ref_key(self, name: str) -> str:
        return f"{self.root}{REFS}/{name}.json"

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

        Raises:
            BadAdapterName (400) when ``after`` is not an adapter name: it becomes part of an S3 key.
        """
        if after:
            check_name(after)
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
             max_rank: int = 32, force: bool = False, canary: float | None = None) -> AdapterRef:
        """Validate and publish a local adapter folder as ``name``.

        Weights go up first, then adapter_config.json, then the ref that makes the version
        visible. An existing name is refused unless ``force``; pushing identical files again
        is a no-op. With ``canary`` (a percentage) the new version does not replace the one
        served: it becomes the name's canary at that weight (:meth:`canary`).

        Raises:
            BadAdapterName, AdapterInvalid (400), InvalidCanary (400), AdapterExists (409),
            AdapterNotFound (404: a canary for a name not published yet), AdapterStoreUnavailable (503).
        """
        check_name(name)
        weight = None if canary is None else check_weight(canary)
        cfg = validate_adapter(folder, base_source=base_source, max_rank=max_rank)
        version = content_version(folder)
        if weight is not None:
            if self._read_ref(name)[0] is None:
                raise AdapterNotFound(f"adapter {name!r} is not published yet: a canary needs a version served "
                                      "to split with (push it without a canary first)")
            self._upload(folder, name, version)
            return self.canary(name, version, weight)

        def check(doc: dict[str, Any] | None) -> None:
            if doc is not None and doc["version"] != version and not force:
                raise AdapterExists(f"adapter {name!r} exists (version {doc['version']}); push with force to replace it")

        current, _ = self._read_ref(name)
        check(current)
        if current is not None and current["version"] == version:
            return _ref_of(name, current)
        self._upload(folder, name, version)
        move = AliasMove(version=version, at=_now(), action="push", base=base, rank=cfg["r"])
        ref = self._move(name, move, check=check)
        log.info("published adapter %s version %s", name, version)
        return ref

    def _upload(self, folder: str | Path, name: str, version: str) -> None:
        key = f"{self.root}{name}@{version}/"
        self._call("put_object", Key=key + WEIGHTS, Body=(Path(folder) / WEIGHTS).read_bytes())
        self._call("put_object", Key=key + CONFIG, Body=(Path(folder) / CONFIG).read_bytes())

    def promote(self, name: str, version: str | None = None) -> AdapterRef:
        """Point ``name`` at ``version``, any version ever pushed under that name; without
        ``version``, at the canary's (promoting the canary). A running canary ends when its
        version becomes the one served, and keeps running otherwise.

        Promoting the version already served changes nothing (no history entry).

        Raises:
            BadAdapterName (400), AdapterNotFound (404: unknown name or version), NoCanary (409: no
            version given and no canary runs), AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        doc, _ = self._read_ref(name)
        if doc is None:
            raise AdapterNotFound(f"adapter {name!r} not found under {self.spec.prefix}")
        if version is None:
            version = self._running_canary(name, doc).version
        check_version(version)
        self._require_version(name, version)
        base, rank = self._version_info(name, version, doc)
        ref = self._move(name, AliasMove(version=version, at=_now(), action="promote", base=base, rank=rank),
                         check=self._published(name))
        log.info("promoted adapter %s to version %s", name, version)
        return ref

    def rollback(self, name: str) -> AdapterRef:
        """Point ``name`` back at the version it served before its last move (canary moves aside:
        a running canary keeps running; :meth:`abort_canary` ends it).

        Two rollbacks in a row return to where they started (like ``cd -``): each is a move.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), NoRollbackTarget (409: the alias never
            pointed elsewhere), AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        def previous(doc: dict[str, Any]) -> AliasMove:
            moves = [m for m in _history_of(doc) if m["action"] in STABLE_MOVES]
            if len(moves) < 2:
                raise NoRollbackTarget(f"adapter {name!r} has only ever served version {doc['version']}: "
                                       "nothing to roll back to")
            return AliasMove(**{**moves[1], "at": _now(), "action": "rollback"})

        ref = self._move(name, previous, check=self._published(name))
        log.info("rolled adapter %s back to version %s", name, ref.version)
        return ref

    def canary(self, name: str, version: str, weight: float) -> AdapterRef:
        """Serve ``version`` to ``weight`` percent of ``name``'s sessions (``serving.canary``), the
        version served now to the rest; starts a canary, or re-weights or replaces a running one.

        Raises:
            BadAdapterName (400), InvalidCanary (400: weight outside 0-100, or ``version`` is the
            one served), AdapterNotFound (404), AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        weight = check_weight(weight)
        check_version(version)
        doc, _ = self._read_ref(name)
        if doc is None:
            raise AdapterNotFound(f"adapter {name!r} not found under {self.spec.prefix}")
        self._require_version(name, version)
        base, rank = self._version_info(name, version, doc)

        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            self._published(name)(doc)
            if doc["version"] == version:
                raise InvalidCanary(f"adapter {name!r} serves version {version} already: a canary needs another "
                                    "version (see `adapters history NAME`)")
            current = canary_of(doc)
            if current is not None and (current.version, current.weight) == (version, weight):
                return None
            started = current.started_at if current is not None and current.version == version else _now()
            move = AliasMove(version=version, at=_now(), action="canary", base=base, rank=rank, weight=weight)
            canary = Canary(version=version, weight=weight, base=base, rank=rank, started_at=started)
            return {**doc, "canary": canary.__dict__, "history": [move.__dict__, *_history_of(doc)][:HISTORY_KEEP]}

        ref = _ref_of(name, self._update_ref(name, change))
        log.info("adapter %s: canary %s at %s%%", name, version, weight)
        return ref

    def abort_canary(self, name: str) -> AdapterRef:
        """End ``name``'s canary unpromoted: its version served now serves every session again.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), NoCanary (409), AdapterRefConflict (409),
            AdapterStoreUnavailable (503).
        """
        def change(doc: dict[str, Any] | None) -> dict[str, Any]:
            self._published(name)(doc)
            canary = self._running_canary(name, doc)
            move = AliasMove(version=canary.version, at=_now(), action="abort", base=canary.base, rank=canary.rank)
            rest = {k: v for k, v in doc.items() if k != "canary"}
            return {**rest, "history": [move.__dict__, *_history_of(doc)][:HISTORY_KEEP]}

        ref = _ref_of(name, self._update_ref(name, change))
        log.info("adapter %s: canary aborted, version %s serves everything", name, ref.version)
        return ref

    def _running_canary(self, name: str, doc: dict[str, Any]) -> Canary:
        canary = canary_of(doc)
        if canary is None:
            raise NoCanary(f"adapter {name!r} runs no canary (start one with `adapters canary {name}@VERSION "
                           "--weight PERCENT`)")
        return canary

    def _version_info(self, name: str, version: str, doc: dict[str, Any]) -> tuple[str | None, int | None]:
        """(base, rank) of a version of ``name``: from the alias's history, else from its files."""
        known = next((m for m in _history_of(doc) if m["version"] == version), None)
        if known is not None:
            return known.get("base"), known.get("rank")
        rank = json.loads(self._call("get_object", Key=f"{self.root}{name}@{version}/{CONFIG}")["Body"].read()).get("r")
        return doc.get("base"), rank if isinstance(rank, int) else None

    def _published(self, name: str):
        """A ``_move`` check: a promote or rollback never re-creates a name removed meanwhile."""
        def check(doc: dict[str, Any] | None) -> None:
            if doc is None:
                raise AdapterNotFound(f"adapter {name!r} not found under {self.spec.prefix}")
        return check

    def _move(self, name: str, move, *, check=None) -> AdapterRef:
        """Point the alias at a version (see :meth:`_update_ref`); a running canary stays unless its
        version is the one now served (then it was promoted, and ends).

        ``move`` is an :class:`AliasMove`, or a function of the current ref document returning one
        (so a rollback computes its target from the ref it replaces); ``check`` may raise to refuse.
        """
        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if check is not None:
                check(doc)
            step = move(doc) if callable(move) else move
            if doc is not None and doc["version"] == step.version:
                return None
            history = [step.__dict__, *_history_of(doc)][:HISTORY_KEEP] if doc else [step.__dict__]
            pushed_at = next((m["at"] for m in history if m["version"] == step.version and m["action"] == "push"),
                             step.at)
            new = {"version": step.version, "base": step.base, "rank": step.rank, "pushed_at": pushed_at,
                   "history": history}
            canary = (doc or {}).get("canary")
            if canary and canary["version"] != step.version:
                new["canary"] = canary
            return new

        return _ref_of(name, self._update_ref(name, change))

    def _update_ref(self, name: str, change) -> dict[str, Any]:
        """Replace the ref with ``change(current document)`` in one conditional PUT (``If-Match`` the
        ETag read, ``If-None-Match: *`` when new), re-reading and re-applying on a lost race;
        ``change`` returns None to leave the ref as it is, and may raise to refuse. Returns the
        document now in force."""
        for _ in range(REF_WRITE_ATTEMPTS):
            doc, etag = self._read_ref(name)
            new = change(doc)
            if new is None:
                return doc
            cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                self._call("put_object", Key=self._ref_key(name), Body=json.dumps(new).encode(),
                           ContentType="application/json", **cond)
            except (_RefChanged, KeyError):  # KeyError: the ref was removed since it was read
                continue
            return new
        raise AdapterRefConflict(f"adapter {name!r} changed concurrently {REF_WRITE_ATTEMPTS} times; try again")

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
