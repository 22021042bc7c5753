"""Moves of an adapter's alias: promote, rollback, their history, and canaries (start, re-weight, abort).

Each move is one conditional replacement of the name's ref (:meth:`Refs.update
<serving.adapters.layout.Refs.update>`), recorded in the ref's own ``history``, so the
move and its record never disagree and two writers racing never lose an update. A canary
(``serving.adapters.canary``) is a second version the name serves to a weighted share of sessions; it
lives in the same ref, next to the version it is tested against, and ends by :meth:`promote`
(it becomes the version) or :meth:`abort_canary`. A version whose recorded parity failed
(``serving.adapters.parity``) is promoted only when forced; every move keeps the parity records of
the versions its history still holds.
"""

from __future__ import annotations

import logging
from typing import Any

from serving.adapters.canary import Canary, canary_of, check_weight
from serving.adapters.layout import Refs, Versions
from serving.adapters.parity import kept_parity, parity_of, refuse_failed_parity
from serving.adapters.refs import STABLE_MOVES, AdapterRef, AliasMove, check_version, history_of, now, ref_of, with_move
from serving.errors import AdapterNotFound, InvalidCanary, NoCanary, NoRollbackTarget

log = logging.getLogger(__name__)


class AliasMoves:
    """The alias moves of :class:`serving.adapters.AdapterStore`, given what they use: the names' refs
    (read, conditionally replaced) and the versions' files (a version's presence and rank)."""

    def __init__(self, refs: Refs, versions: Versions):
        self.refs, self.versions = refs, versions

    def history(self, name: str) -> list[AliasMove]:
        """The alias's moves, newest first (the first is the version served now).

        Raises:
            BadAdapterName, AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        return [AliasMove(**m) for m in history_of(self.refs.require(name))]

    def promote(self, name: str, version: str | None = None, *, force: bool = False) -> AdapterRef:
        """Point ``name`` at ``version``, any version ever pushed under that name; without
        ``version``, at the canary's (promoting the canary). A running canary ends when its
        version becomes the one served, and keeps running otherwise.

        A version whose recorded parity check failed (:meth:`record_parity
        <serving.adapters.AdapterStore.record_parity>`) is refused unless ``force``; a version with
        no parity record is not blocked. Promoting the version already served changes nothing (no
        history entry).

        Raises:
            BadAdapterName (400), AdapterNotFound (404: unknown name or version), NoCanary (409: no
            version given and no canary runs), ParityFailed (409: its parity failed, not forced),
            AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        doc = self.refs.require(name)
        if version is None:
            version = self._running_canary(name, doc).version
        check_version(version)
        self.versions.require(name, version)
        base, rank = self._version_info(name, version, doc)

        def check(doc: dict[str, Any] | None) -> None:
            self._published(name)(doc)
            if doc["version"] != version:  # judged on the ref being replaced, in the same write
                refuse_failed_parity(name, version, parity_of(doc).get(version), force=force)

        ref = self.point(name, AliasMove(version=version, at=now(), action="promote", base=base, rank=rank),
                         check=check)
        log.info("promoted adapter %s to version %s%s", name, version, " (forced)" if force else "")
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
            moves = [m for m in history_of(doc) if m["action"] in STABLE_MOVES]
            if len(moves) < 2:
                raise NoRollbackTarget(f"adapter {name!r} has only ever served version {doc['version']}: "
                                       "nothing to roll back to")
            return AliasMove(**{**moves[1], "at": now(), "action": "rollback"})

        ref = self.point(name, previous, check=self._published(name))
        log.info("rolled adapter %s back to version %s", name, ref.version)
        return ref

    def canary(self, name: str, version: str, weight: float) -> AdapterRef:
        """Serve ``version`` to ``weight`` percent of ``name``'s sessions (``serving.adapters.canary``), the
        version served now to the rest; starts a canary, or re-weights or replaces a running one.

        Raises:
            BadAdapterName (400), InvalidCanary (400: weight outside 0-100, or ``version`` is the
            one served), AdapterNotFound (404), AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        weight = check_weight(weight)
        check_version(version)
        doc = self.refs.require(name)
        self.versions.require(name, version)
        base, rank = self._version_info(name, version, doc)

        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            self._published(name)(doc)
            if doc["version"] == version:
                raise InvalidCanary(f"adapter {name!r} serves version {version} already: a canary needs another "
                                    "version (see `adapters history NAME`)")
            current = canary_of(doc)
            if current is not None and (current.version, current.weight) == (version, weight):
                return None
            started = current.started_at if current is not None and current.version == version else now()
            move = AliasMove(version=version, at=now(), action="canary", base=base, rank=rank, weight=weight)
            canary = Canary(version=version, weight=weight, base=base, rank=rank, started_at=started)
            return {**doc, "canary": canary.__dict__, "history": with_move(doc, move)}

        ref = ref_of(name, self.refs.update(name, change))
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
            move = AliasMove(version=canary.version, at=now(), action="abort", base=canary.base, rank=canary.rank)
            rest = {k: v for k, v in doc.items() if k != "canary"}
            return {**rest, "history": with_move(doc, move)}

        ref = ref_of(name, self.refs.update(name, change))
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
        known = next((m for m in history_of(doc) if m["version"] == version), None)
        if known is not None:
            return known.get("base"), known.get("rank")
        return doc.get("base"), self.versions.rank(name, version)

    @staticmethod
    def _published(name: str):
        """A :meth:`point` check: a promote or rollback never re-creates a name removed meanwhile."""
        def check(doc: dict[str, Any] | None) -> None:
            if doc is None:
                raise AdapterNotFound(f"adapter {name!r} not found")
        return check

    def point(self, name: str, move, *, check=None) -> AdapterRef:
        """Point the alias at a version (one conditional write of the ref, :meth:`Refs.update
        <serving.adapters.layout.Refs.update>`), recording the move: a push, promote or rollback. A
        running canary stays unless its version is the one now served (then it was promoted, and ends).

        ``move`` is an :class:`AliasMove`, or a function of the current ref document returning one
        (so a rollback computes its target from the ref it replaces); ``check`` may raise to refuse.
        """
        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if check is not None:
                check(doc)
            step = move(doc) if callable(move) else move
            if doc is not None and doc["version"] == step.version:
                return None
            history = with_move(doc, step)
            pushed_at = next((m["at"] for m in history if m["version"] == step.version and m["action"] == "push"),
                             step.at)
            new = {"version": step.version, "base": step.base, "rank": step.rank, "pushed_at": pushed_at,
                   "history": history}
            canary = (doc or {}).get("canary")
            if canary and canary["version"] != step.version:
                new["canary"] = canary
            parity = kept_parity(doc, [m["version"] for m in history] + ([canary["version"]] if canary else []))
            if parity:
                new["parity"] = parity
            return new

        return ref_of(name, self.refs.update(name, change))
