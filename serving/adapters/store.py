"""The adapter store: validated, atomic, versioned LoRA adapters, in S3 (or a local folder).

Layout under the configured prefix (``s3://bucket/prefix``; :mod:`serving.adapters.layout`)::

    {name}@{version}/adapter_model.safetensors   immutable; version = content hash
    {name}@{version}/adapter_config.json         written after the weights: its presence
                                                 marks a complete upload
    _refs/{name}.json                            {"version", "base", "rank", "pushed_at", "history",
                                                 "canary", "parity"}: written last, publishes the version

A name is an alias to one immutable version. The ref is the alias: one small object replaced by a
single conditional PUT (``If-Match`` its ETag, or ``If-None-Match: *`` when new), so a push,
:meth:`AdapterStore.promote` or :meth:`AdapterStore.rollback` moves it atomically and two writers
racing never lose an update (the loser re-reads and retries). The alias's moves live in the same
object (``history``, newest first), so the move and its record can never disagree. A canary
(:meth:`AdapterStore.canary`, ``serving.adapters.canary``) is a second version the name serves to a weighted
share of sessions; it lives in the same object, next to the version it is tested against, and ends
by :meth:`AdapterStore.promote` (it becomes the version) or :meth:`AdapterStore.abort_canary`. The
offline gate (``maze-eval gate``) asks :meth:`AdapterStore.gate_target` whether a candidate may be
gated and under which policy, and records its decision with :meth:`AdapterStore.decide`.

:class:`AdapterStore` is composed: its objects are the door (:mod:`serving.adapters.objects`, the
implementation its prefix's scheme picks: :mod:`serving.adapters.backends`); the ref documents and
the versions' files are :class:`~serving.adapters.layout.Refs` and
:class:`~serving.adapters.layout.Versions` over it; the alias moves (promote, rollback, canary,
abort) are :class:`~serving.adapters.moves.AliasMoves` and the version checks (verify, parity
records) :class:`~serving.adapters.checks.VersionChecks`, each given those two. This module keeps
the reads, listing, push and remove, and hands the rest to its parts.

Ray Serve LLM downloads ``{prefix}/{adapter_id}/``; the gateway resolves a user's
``base:name`` to ``base:name@version`` through ``_refs``, so a replica's cache is keyed by
content and an adapter re-pushed under the same name is never served stale, and a half-uploaded
adapter is never visible (its ref is not written yet).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.adapters import policies
from serving.adapters.backends import open_objects
from serving.adapters.canary import Canary, check_weight
from serving.adapters.checks import VerifyReport, VersionChecks
from serving.adapters.files import content_version, validate_adapter
from serving.adapters.gating import GateEvidence, GateTarget
from serving.adapters.layout import Refs, Versions
from serving.adapters.moves import AliasMoves
from serving.adapters.objects import PAGE, ObjectStore
from serving.adapters.parity import ParityRecord, parity_of
from serving.adapters.refs import (
    ADAPTER_NAME,
    AdapterRef,
    AliasMove,
    check_name,
    check_version,
    history_of,
    now,
    ref_of,
)
from serving.config import AdapterStoreSpec
from serving.errors import (
    AdapterExists,
    AdapterNotFound,
    BadAdapterName,
    InvalidCanary,
)

__all__ = ["AdapterStore"]

log = logging.getLogger(__name__)


def _doc_of(part_method: Callable) -> Callable:
    """A delegating method keeps the docs of the part's method it hands the call to."""
    def keep(method: Callable) -> Callable:
        method.__doc__ = part_method.__doc__
        return method
    return keep


class AdapterStore:
    """Adapters under a prefix. Store failures become :class:`AdapterStoreUnavailable` (503), never
    "not found", so a transient outage is not remembered as a missing adapter (``objects``: the
    door, :class:`~serving.adapters.objects.ObjectStore`)."""

    def __init__(self, spec: AdapterStoreSpec, objects: ObjectStore | None = None):
        self.spec = spec
        self.objects = open_objects(spec) if objects is None else objects
        self.refs, self.versions = Refs(self.objects), Versions(self.objects)
        reference_free = spec.parity_without_reference
        self.moves = AliasMoves(self.refs, self.versions, reference_free=reference_free)
        self.checks = VersionChecks(self.refs, self.versions, reference_free=reference_free)

    # -- reads ---------------------------------------------------------------------------
    def resolve(self, name: str) -> AdapterRef:
        """The published version of ``name``.

        Raises:
            BadAdapterName, AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        return ref_of(name, self.refs.require(name))

    def resolve_version(self, name: str, version: str) -> AdapterRef:
        """An explicit version of ``name``, current or not, when its files are in the store.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        check_name(name)
        check_version(version)
        self.versions.require(name, version)
        doc, _ = self.refs.read(name)
        move = next((m for m in history_of(doc) if m["version"] == version), None) if doc else None
        parity = parity_of(doc).get(version)
        return AdapterRef(name=name, version=version, base=(move or doc or {}).get("base"),
                          rank=(move or {}).get("rank"), pushed_at=(move or {}).get("at", ""),
                          parity={version: parity} if parity else None)

    def list(self) -> list[AdapterRef]:
        """Every published adapter, following the listing's pages (any number of adapters)."""
        refs: list[AdapterRef] = []
        for name in self.refs.names():
            try:
                refs.append(self.resolve(name))
            except (AdapterNotFound, BadAdapterName):  # removed meanwhile, or a stray key
                continue
        return sorted(refs, key=lambda r: r.name)

    def list_names(self) -> list[str]:
        """Adapter names only (one LIST call per 1000, no per-adapter reads)."""
        return sorted(n for n in self.refs.names() if ADAPTER_NAME.match(n))

    def page_names(self, after: str | None = None, limit: int | None = 100,
                   keep: Callable[[str], bool] | None = None) -> tuple[list[str], bool]:
        """One page of adapter names in key order, starting after ``after``: up to ``limit`` (None:
        all) of the names ``keep`` accepts (default: every name). Returns (names, has_more), where
        ``has_more`` says that another accepted name follows: a caller paging what it may see
        (``keep``) learns nothing from the names it may not.

        ``after`` need not be a name that exists: the page starts where it would sort (S3's
        ``StartAfter``). Without ``keep`` a page costs one LIST call however many adapters exist;
        with it, one per 1000 names passed over.

        Raises:
            BadAdapterName (400) when ``after`` is not an adapter name: it becomes part of an S3 key.
        """
        if after:
            check_name(after)
        page_size = min(limit + 1, PAGE) if limit is not None and keep is None else PAGE
        names: list[str] = []
        for name in self.refs.names(after, page_size):
            if ADAPTER_NAME.match(name) and (keep is None or keep(name)):
                names.append(name)
            if limit is not None and len(names) > limit:
                return names[:limit], True
        return names, False

    # -- writes --------------------------------------------------------------------------
    def push(self, folder: str | Path, name: str, *, base: str | None = None, base_source: str | None = None,
             max_rank: int = 32, force: bool = False, canary: float | None = None, candidate: bool = False,
             vision_tower: bool = False, force_parity: bool = False, forced_by: str | None = None) -> AdapterRef:
        """Validate and publish a local adapter folder as ``name``.

        Weights go up first, then adapter_config.json, then the ref that makes the version
        visible. An existing name is refused unless ``force``; pushing identical files again
        is a no-op. With ``canary`` (a percentage) the new version does not replace the one
        served: it becomes the name's canary at that weight (:meth:`canary`). ``vision_tower`` is the
        serving config's ``lora.vision_tower``: without it, an adapter with trained vision-tower
        modules is refused (the engine would serve it without them), before anything is uploaded.
        Files pushed before under ``name`` are the same version, judged by its parity record as any
        move that starts a version serving (:meth:`AliasMoves.gate
        <serving.adapters.moves.AliasMoves.gate>`), unless ``force_parity``. With ``candidate`` the
        new version serves nothing: it is recorded as a candidate for the offline gate
        (:meth:`AliasMoves.propose <serving.adapters.moves.AliasMoves.propose>`), which moves the
        alias only if it plays better; what is returned is then the candidate version's view
        (:meth:`resolve_version`), not the alias's.

        Raises:
            BadAdapterName, AdapterInvalid (400; AdapterNotServable: served other than trained),
            InvalidCanary (400), AdapterExists (409), ParityNotPassed (409: not forced),
            AdapterNotFound (404: a canary for a name not published yet), AdapterStoreUnavailable (503).
        """
        check_name(name)
        weight = None if canary is None else check_weight(canary)
        if candidate and weight is not None:
            raise InvalidCanary("push either a canary or a candidate for the gate, not both")
        cfg = validate_adapter(folder, base_source=base_source, max_rank=max_rank, vision_tower=vision_tower)
        version = content_version(folder)
        if candidate:
            if self.refs.read(name)[0] is None:
                raise AdapterNotFound(f"adapter {name!r} is not published yet: a candidate is gated against the "
                                      "version served (push it without --candidate first)")
            self.versions.upload(folder, name, version)
            self.moves.propose(name, version, base=base, rank=cfg["r"])
            return self.resolve_version(name, version)
        if weight is not None:
            if self.refs.read(name)[0] is None:
                raise AdapterNotFound(f"adapter {name!r} is not published yet: a canary needs a version served "
                                      "to split with (push it without a canary first)")
            self.versions.upload(folder, name, version)
            return self.canary(name, version, weight, force_parity=force_parity, forced_by=forced_by)

        def check(doc: dict[str, Any] | None) -> None:
            if doc is not None and doc["version"] != version and not force:
                raise AdapterExists(f"adapter {name!r} exists (version {doc['version']}); push with force to replace it")

        current, _ = self.refs.read(name)
        check(current)
        if current is not None and current["version"] == version:
            return ref_of(name, current)
        self.moves.gate(name, version, current, "push", force=force_parity)  # refused before the upload
        self.versions.upload(folder, name, version)
        move = AliasMove(version=version, at=now(), action="push", base=base, rank=cfg["r"])
        ref = self.moves.point(name, move, check=check, force_parity=force_parity, forced_by=forced_by)
        log.info("published adapter %s version %s", name, version)
        return ref

    def remove(self, name: str) -> AdapterRef:
        """Unpublish ``name`` (ref first, so it disappears at once) and delete its versions."""
        ref = self.resolve(name)
        self.refs.delete(name)
        self.versions.delete_all(name)
        return ref

    def ensure_bucket(self) -> None:
        """Create the bucket (the folder) if missing (local S3 servers start empty)."""
        self.objects.ensure_bucket()

    def download_version(self, name: str, version: str, dest: str | Path, *, hashed: bool = True) -> str | None:
        """The store's one download of a version: its two files into ``dest``, streamed and hashed as
        they arrive (what an LLM replica loads); returns their content version (None when not
        ``hashed``), which the caller compares with ``version``.

        Raises:
            AdapterLoadFailed: a file is missing from the store.
            AdapterStoreUnavailable (503): the store failed or went away mid-transfer.
        """
        return self.versions.download(name, version, dest, hashed=hashed)

    # -- the alias moves (serving.adapters.moves) and version checks (serving.adapters.checks) --------
    @_doc_of(AliasMoves.history)
    def history(self, name: str) -> list[AliasMove]:
        return self.moves.history(name)

    @_doc_of(AliasMoves.promote)
    def promote(self, name: str, version: str | None = None, *, force_parity: bool = False,
                forced_by: str | None = None) -> AdapterRef:
        return self.moves.promote(name, version, force_parity=force_parity, forced_by=forced_by)

    @_doc_of(AliasMoves.rollback)
    def rollback(self, name: str, *, force_parity: bool = False, forced_by: str | None = None) -> AdapterRef:
        return self.moves.rollback(name, force_parity=force_parity, forced_by=forced_by)

    @_doc_of(AliasMoves.canary)
    def canary(self, name: str, version: str, weight: float, *, force_parity: bool = False,
               forced_by: str | None = None) -> AdapterRef:
        return self.moves.canary(name, version, weight, force_parity=force_parity, forced_by=forced_by)

    @_doc_of(AliasMoves.abort_canary)
    def abort_canary(self, name: str) -> AdapterRef:
        return self.moves.abort_canary(name)

    @_doc_of(AliasMoves.guard_decision)
    def guard_decision(self, name: str, canary: Canary, action: str, reason: str,
                       evidence: dict[str, Any]) -> AliasMove | None:
        return self.moves.guard_decision(name, canary, action, reason, evidence)

    def gate_target(self, name: str, version: str) -> GateTarget:
        """``version`` of ``name`` cleared for the offline gate (:meth:`AliasMoves.gate_candidate
        <serving.adapters.moves.AliasMoves.gate_candidate>`, whose errors it raises), with the version
        served now and the name's gate policy (``adapters.gate`` with the name's own changes)."""
        current, base, parity = self.moves.gate_candidate(name, version)
        return GateTarget(name=name, version=version, current=current, base=base, parity=parity,
                          policy=self.policy(name, "gate"))

    def policy(self, name: str, kind: str, doc: dict[str, Any] | None = None) -> Any:
        """``name``'s ``kind`` policy in force (``gate`` or ``guard``): the config's for the name with the
        changes kept in its ref (:mod:`~serving.adapters.policies`; ``doc``: the ref already read)."""
        configured = getattr(self.spec, kind).policy(name)
        return policies.in_force(configured, doc if doc is not None else self.refs.require(name), kind)

    def policy_view(self, name: str, doc: dict[str, Any] | None = None) -> dict[str, Any]:
        """What ``maze-serve adapters policy NAME`` and ``GET /v1/adapters/{name}/policy`` show: each policy
        in force and the name's own changes."""
        doc = doc if doc is not None else self.refs.require(name)
        return {"object": "adapter.policy", "name": name,
                **{kind: self.policy(name, kind, doc).model_dump() for kind in policies.KINDS},
                "changes": {kind: policies.changes_of(doc, kind) for kind in policies.KINDS}}

    def set_policy(self, name: str, kind: str, changes: dict[str, Any], *, by: str | None = None) -> Any:
        """Replace ``name``'s own changes to its ``kind`` policy with ``changes`` ({}: the config's again),
        in one conditional write recorded in its history; returns the policy now in force.

        Raises:
            BadAdapterName, BadRequest (400: an unknown kind or field, a value the policy refuses),
            AdapterNotFound (404), AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        configured = getattr(self.spec, kind).policy(name) if kind in policies.KINDS else None
        changes = policies.checked(configured, kind, changes)

        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if doc is None:
                raise AdapterNotFound(f"adapter {name!r} not found")
            if policies.changes_of(doc, kind) == changes:
                return None
            return policies.with_changes(doc, kind, changes, by)

        doc = self.refs.update(name, change)
        log.info("adapter %s: %s policy changes %s", name, kind, changes or "cleared")
        return self.policy(name, kind, doc)

    @_doc_of(AliasMoves.decide)
    def decide(self, name: str, version: str, evidence: GateEvidence | dict[str, Any]) -> tuple[AdapterRef, AliasMove]:
        return self.moves.decide(name, version, evidence)

    @_doc_of(VersionChecks.verify)
    def verify(self, name: str, version: str | None = None, *, check: bool = True) -> VerifyReport:
        return self.checks.verify(name, version, check=check)

    @_doc_of(VersionChecks.fetch)
    def fetch(self, name: str, version: str, dest: str | Path) -> Path:
        return self.checks.fetch(name, version, dest)

    @_doc_of(VersionChecks.record_parity)
    def record_parity(self, name: str, version: str, result: dict[str, Any] | ParityRecord) -> ParityRecord:
        return self.checks.record_parity(name, version, result)

    @_doc_of(VersionChecks.parity)
    def parity(self, name: str) -> dict[str, ParityRecord]:
        return self.checks.parity(name)
