"""An adapter name's ref document (``_refs/{name}.json``) and the names and versions it holds.

The ref is the alias: ``{"version", "base", "rank", "pushed_at", "history", "canary", "parity"}``, one
small S3 object per name (:mod:`serving.adapters` reads and replaces it). Everything here is pure: name
and version checks, the moves recorded in ``history`` (newest first), and the published view
(:class:`AdapterRef`) of a document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from serving.adapters.canary import Canary, canary_of
from serving.adapters.parity import ParityRecord, parity_of
from serving.errors import BadAdapterName

ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # \Z: "$" would let a trailing newline through
REFS = "_refs"
VERSION = re.compile(r"^[0-9a-f]{12}\Z")  # content_version's form
HISTORY_KEEP = 100  # alias moves kept in the ref (the ref stays a small object)
STABLE_MOVES = ("push", "promote", "rollback")  # history actions that moved the version served; the others
# (canary, abort) started, re-weighted or ended a canary, and a gate entry recorded a decision that left it
GATE = "gate"  # an offline gate's decision that did not move the alias (its promotions are promote moves)
CANDIDATE = "candidate"  # a version pushed for the offline gate, not served
POLICY = "policy"  # a change of the name's own gate or guard policy (serving.adapters.policies)
GUARD = "guard"  # a live guard's finding that did not move the alias (a canary found better, left to a person)
# Entries the history drops first once it is full: records of the gate that moved nothing, so a watcher gating
# every step never pushes out the moves a rollback returns to.
DROPPED_FIRST = (GATE, CANDIDATE, GUARD)


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


@dataclass(frozen=True)
class AliasMove:
    """One move of an alias: which version it pointed to from when on, and why; for a canary
    (``canary``: started or re-weighted, ``abort``: ended unpromoted) the canary's version.

    A move an admin forced past the version's parity (``serving.adapters.parity``) keeps the parity it
    was forced past (``forced``: ``FAILED 0.31``, ``not compared``) and, made through the gateway
    with auth on, the key that forced it (``by``); a move the store made itself says why (``reason``:
    a version whose parity failed while it served stops serving).

    An offline gate's decision (``serving.adapters.gating``) keeps its evidence (``gate``): a promote
    when the candidate passed, a ``gate`` entry for the candidate when the name was left as it was
    (with a ``reason`` when it passed but could not move the name). A ``candidate`` entry is a version
    pushed for the gate without serving it (``push(..., candidate=True)``).

    The live guard (``serving.guard``) keeps its evidence (``guard``) on the moves it makes on a
    canary by itself (an ``abort`` on harm, a ``promote`` on benefit where the name allows) and on a
    ``guard`` entry when it found a canary better and left the promotion to a person."""

    version: str
    at: str
    action: str  # push | promote | rollback | canary | abort | candidate | gate | guard | policy
    base: str | None = None
    rank: int | None = None
    weight: float | None = None  # the canary's share in percent (canary moves only)
    forced: str | None = None
    by: str | None = None
    reason: str | None = None
    gate: dict[str, Any] | None = None  # the offline gate's evidence (serving.adapters.gating.GateEvidence)
    guard: dict[str, Any] | None = None  # the live guard's evidence (serving.guard): its abort, promote or finding


_MOVE_FIELDS = tuple(f.name for f in fields(AliasMove))
# written only when set: readers that predate them keep reading the history
_OPTIONAL = ("forced", "by", "reason", "gate", "guard")


def move_of(entry: dict[str, Any]) -> AliasMove:
    """A history entry as an :class:`AliasMove` (fields a newer writer added are ignored)."""
    return AliasMove(**{k: v for k, v in entry.items() if k in _MOVE_FIELDS})


def entry_of(move: AliasMove) -> dict[str, Any]:
    """``move`` as a history entry: the fields of :data:`_OPTIONAL` only when set."""
    return {k: v for k, v in move.__dict__.items() if v is not None or k not in _OPTIONAL}


@dataclass(frozen=True)
class AdapterRef:
    """A published adapter: its name, current version and what it was trained for, the canary
    version it serves to a share of sessions, if one runs, and the parity records of those versions
    (``serving.adapters.parity``), by version, if any was recorded."""

    name: str
    version: str
    base: str | None
    rank: int | None
    pushed_at: str
    canary: Canary | None = None
    parity: dict[str, ParityRecord] | None = None

    @property
    def folder(self) -> str:
        return f"{self.name}@{self.version}"


def now() -> str:
    """The time a move is recorded with: UTC, ISO 8601, whole seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def history_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ref's moves, newest first; a ref written without history counts as one push."""
    if doc.get("history"):
        return list(doc["history"])
    return [{"version": doc["version"], "at": doc.get("pushed_at", ""), "action": "push",
             "base": doc.get("base"), "rank": doc.get("rank")}]


def with_move(doc: dict[str, Any] | None, move: AliasMove) -> list[dict[str, Any]]:
    """``doc``'s history with ``move`` in front, cut to :data:`HISTORY_KEEP` entries: the oldest of
    :data:`DROPPED_FIRST` (candidates pushed for the gate, its decisions that left the alias) go first,
    so a watcher gating every step never pushes out the moves a rollback returns to."""
    history = [entry_of(move), *history_of(doc)] if doc else [entry_of(move)]
    extra = len(history) - HISTORY_KEEP
    if extra > 0:
        gated = [i for i, entry in enumerate(history) if entry["action"] in DROPPED_FIRST]  # newest first
        dropped = set(gated[-extra:])
        history = [entry for i, entry in enumerate(history) if i not in dropped]
    return history[:HISTORY_KEEP]


def ref_of(name: str, doc: dict[str, Any]) -> AdapterRef:
    """The published view of ``name``'s ref document."""
    canary = canary_of(doc)
    served = {doc["version"], *([canary.version] if canary else [])}
    parity = {v: r for v, r in parity_of(doc).items() if v in served}
    return AdapterRef(name=name, version=doc["version"], base=doc.get("base"), rank=doc.get("rank"),
                      pushed_at=doc.get("pushed_at", ""), canary=canary, parity=parity or None)
