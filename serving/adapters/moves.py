"""Moves of an adapter's alias: promote, rollback, their history, and canaries (start, re-weight, abort).

Each move is one conditional replacement of the name's ref (:meth:`Refs.update
<serving.adapters.layout.Refs.update>`), recorded in the ref's own ``history``, so the
move and its record never disagree and two writers racing never lose an update. A canary
(``serving.adapters.canary``) is a second version the name serves to a weighted share of sessions; it
lives in the same ref, next to the version it is tested against, and ends by :meth:`promote`
(it becomes the version) or :meth:`abort_canary`. Every move that starts a version serving (promote,
rollback, a canary at any weight, a push over a published name) is judged by the version's parity
record (``serving.adapters.parity``): one that does not pass is refused unless forced, and a forced
move records what it was forced past. :func:`stop_failed` is the other half: a version whose parity
fails while it serves stops serving. Every move keeps the parity records of the versions its
history still holds.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import replace
from typing import Any

from serving.adapters.canary import Canary, canary_of, check_weight
from serving.adapters.gating import GateEvidence, check_candidate, gate_evidence
from serving.adapters.layout import Refs, Versions
from serving.adapters.parity import ParityRecord, kept_parity, parity_gate, parity_label, parity_of, passes
from serving.adapters.refs import (
    CANDIDATE,
    GATE,
    GUARD,
    STABLE_MOVES,
    AdapterRef,
    AliasMove,
    check_version,
    history_of,
    move_of,
    now,
    ref_of,
    with_move,
)
from serving.errors import AdapterNotFound, InvalidCanary, NoCanary, NoRollbackTarget

log = logging.getLogger(__name__)


class AliasMoves:
    """The alias moves of :class:`serving.adapters.AdapterStore`, given what they use: the names' refs
    (read, conditionally replaced), the versions' files (a version's presence and rank) and whether a
    parity check without a reference lets a version start serving (``adapters.parity_without_reference``)."""

    def __init__(self, refs: Refs, versions: Versions, *, reference_free: bool = False):
        self.refs, self.versions, self.reference_free = refs, versions, reference_free

    def history(self, name: str) -> list[AliasMove]:
        """The alias's moves and gate decisions, newest first (the first push, promote or rollback is the
        version served now).

        Raises:
            BadAdapterName, AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        return [move_of(m) for m in history_of(self.refs.require(name))]

    def promote(self, name: str, version: str | None = None, *, force_parity: bool = False,
                forced_by: str | None = None) -> AdapterRef:
        """Point ``name`` at ``version``, any version ever pushed under that name; without
        ``version``, at the canary's (promoting the canary). A running canary ends when its
        version becomes the one served, and keeps running otherwise.

        The version must pass its parity record (:meth:`gate`) unless ``force_parity`` (a forced move
        records what it was forced past and ``forced_by``). Promoting the version already served
        changes nothing (no history entry).

        Raises:
            BadAdapterName (400), AdapterNotFound (404: unknown name or version), NoCanary (409: no
            version given and no canary runs), ParityNotPassed (409: ParityFailed, ParityNotCompared;
            not forced), AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        doc = self.refs.require(name)
        if version is None:
            version = self._running_canary(name, doc).version
        check_version(version)
        self.versions.require(name, version)
        base, rank = self._version_info(name, version, doc)
        ref = self.point(name, AliasMove(version=version, at=now(), action="promote", base=base, rank=rank),
                         check=self._published(name), force_parity=force_parity, forced_by=forced_by)
        log.info("promoted adapter %s to version %s%s", name, version, " (parity forced)" if force_parity else "")
        return ref

    def rollback(self, name: str, *, force_parity: bool = False, forced_by: str | None = None) -> AdapterRef:
        """Point ``name`` back at the version it served before its last move (canary moves aside:
        a running canary keeps running; :meth:`abort_canary` ends it).

        Two rollbacks in a row return to where they started (like ``cd -``): each is a move, and the
        version rolled back to must pass its parity record as a promote's does.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), NoRollbackTarget (409: the alias never
            pointed elsewhere), ParityNotPassed (409: not forced), AdapterRefConflict (409),
            AdapterStoreUnavailable (503).
        """
        def previous(doc: dict[str, Any]) -> AliasMove:
            moves = [m for m in history_of(doc) if m["action"] in STABLE_MOVES]
            if len(moves) < 2:
                raise NoRollbackTarget(f"adapter {name!r} has only ever served version {doc['version']}: "
                                       "nothing to roll back to")
            return back_to(moves[1])

        ref = self.point(name, previous, check=self._published(name), force_parity=force_parity, forced_by=forced_by)
        log.info("rolled adapter %s back to version %s", name, ref.version)
        return ref

    def canary(self, name: str, version: str, weight: float, *, force_parity: bool = False,
               forced_by: str | None = None) -> AdapterRef:
        """Serve ``version`` to ``weight`` percent of ``name``'s sessions (``serving.adapters.canary``), the
        version served now to the rest; starts a canary, or re-weights or replaces a running one.
        The version must pass its parity record (:meth:`gate`) at any weight unless ``force_parity``.

        Raises:
            BadAdapterName (400), InvalidCanary (400: weight outside 0-100, or ``version`` is the
            one served), AdapterNotFound (404), ParityNotPassed (409: not forced), AdapterRefConflict
            (409), AdapterStoreUnavailable (503).
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
            forced = self.gate(name, version, doc, "canary", force=force_parity)
            started = current.started_at if current is not None and current.version == version else now()
            move = AliasMove(version=version, at=now(), action="canary", base=base, rank=rank, weight=weight,
                             forced=forced, by=forced_by if forced else None)
            canary = Canary(version=version, weight=weight, base=base, rank=rank, started_at=started)
            return {**doc, "canary": canary.__dict__, "history": with_move(doc, move)}

        ref = ref_of(name, self.refs.update(name, change))
        log.info("adapter %s: canary %s at %s%%%s", name, version, weight, " (parity forced)" if force_parity else "")
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

    def guard_decision(self, name: str, canary: Canary, action: str, reason: str,
                       evidence: dict[str, Any]) -> AliasMove | None:
        """The live guard's decision (``serving.guard``) on the canary run ``canary`` of ``name``, in one
        conditional write: ``rollback`` ends it (an ``abort`` carrying the evidence and ``reason``);
        ``promote`` makes its version the one served while its parity record passes (else a ``guard``
        entry says why it was not); ``better`` records the finding as a ``guard`` entry. Nothing is
        written when that run is over (the canary ended, was replaced or restarted meanwhile).

        Returns:
            The history entry made, or None when nothing was written.

        Raises:
            AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        made: list[AliasMove] = []

        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            made.clear()
            running = canary_of(doc) if doc else None
            if running is None or (running.version, running.started_at) != (canary.version, canary.started_at):
                return None
            if action == "better" and any(m["action"] == GUARD and m["version"] == running.version and
                                          m["at"] >= running.started_at for m in history_of(doc)):
                return None  # this run's finding is recorded already (another report reached it too)
            entry = AliasMove(version=running.version, at=now(), action=GUARD, base=running.base, rank=running.rank,
                              reason=reason, guard=evidence)
            if action == "rollback":
                made.append(replace(entry, action="abort"))
                return {**{k: v for k, v in doc.items() if k != "canary"}, "history": with_move(doc, made[-1])}
            if action == "promote":
                parity = parity_of(doc).get(running.version)
                if parity is not None and passes(parity, reference_free=self.reference_free):
                    made.append(replace(entry, action="promote"))
                    return repointed(doc, made[-1])
                entry = replace(entry, reason=f"{reason}; not promoted: its parity is {parity_label(parity)} now")
            made.append(entry)
            return {**doc, "history": with_move(doc, entry)}

        self.refs.update(name, change)
        if made:
            log.info("adapter %s: live guard on canary %s: %s (%s)", name, canary.version, made[-1].action, reason)
        return made[-1] if made else None

    def propose(self, name: str, version: str, *, base: str | None, rank: int | None) -> AdapterRef:
        """Record ``version`` (uploaded) as a candidate of ``name`` for the offline gate: a ``candidate``
        history entry, the alias unchanged; nothing is written when the history holds the version
        already. It starts nothing serving, so no parity gate applies; its parity can then be recorded.

        Raises:
            BadAdapterName (400), AdapterNotFound (404: the name is not published), AdapterRefConflict
            (409), AdapterStoreUnavailable (503).
        """
        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            self._published(name)(doc)
            if any(m["version"] == version for m in history_of(doc)):
                return None
            move = AliasMove(version=version, at=now(), action=CANDIDATE, base=base, rank=rank)
            return {**doc, "history": with_move(doc, move)}

        ref = ref_of(name, self.refs.update(name, change))
        log.info("adapter %s: version %s pushed as a candidate (%s serves)", name, version, ref.version)
        return ref

    def gate_candidate(self, name: str, version: str) -> tuple[str, str | None, str]:
        """Whether ``version`` of ``name`` may go through the offline gate, before anything is played
        (:func:`~serving.adapters.gating.check_candidate`): (the version served now, its base, the
        candidate's parity label).

        Raises:
            BadAdapterName (400), InvalidCanary (400: it is the version served), AdapterNotFound (404),
            ParityNotPassed (409: ParityNotMeasured, ParityFailed, ParityNotCompared), AdapterStoreUnavailable (503).
        """
        check_version(version)
        doc = self.refs.require(name)
        self.versions.require(name, version)
        parity = check_candidate(name, version, doc, reference_free=self.reference_free)
        return doc["version"], doc.get("base"), parity

    def decide(self, name: str, version: str, evidence: GateEvidence | dict[str, Any]) -> tuple[AdapterRef, AliasMove]:
        """Record the offline gate's decision on ``version`` in one conditional write: the ref now in
        force and the history entry made.

        A ``better`` verdict promotes the candidate (a promote move carrying the evidence) only while
        the name serves ``evidence.against``, the version it was played against, and the candidate's
        parity record still passes (a version never measured does not); otherwise, and on ``worse``
        and ``undecided``, the alias stays and a ``gate`` entry records the evidence (and, for a
        better candidate left unpromoted, why: ``reason``).

        Raises:
            BadAdapterName, BadRequest (400: malformed evidence), AdapterNotFound (404),
            AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        evidence = gate_evidence(evidence)
        check_version(version)
        self.versions.require(name, version)
        base, rank = self._version_info(name, version, self.refs.require(name))
        made: list[AliasMove] = []

        def change(doc: dict[str, Any] | None) -> dict[str, Any]:
            self._published(name)(doc)
            made.clear()
            new, move = self._decided(doc, name, version, evidence, base, rank)
            made.append(move)
            return new

        ref = ref_of(name, self.refs.update(name, change))
        move = made[-1]
        log.info("adapter %s: gate on %s against %s: %s, %s", name, version, evidence.against, evidence.verdict,
                 "promoted" if move.action == "promote" else move.reason or "left")
        return ref, move

    def _decided(self, doc: dict[str, Any], name: str, version: str, evidence: GateEvidence, base: str | None,
                 rank: int | None) -> tuple[dict[str, Any], AliasMove]:
        """The ref ``doc`` after the decision, and its history entry (pure: see :meth:`decide`)."""
        record, reason = dataclasses.asdict(evidence), None
        if evidence.verdict == "better":
            parity = parity_of(doc).get(version)
            if doc["version"] != evidence.against:
                reason = (f"not promoted: {name} served {doc['version']} by the decision, not {evidence.against} that "
                          "the candidate was played against; gate it again against the version served")
            elif parity is None or not passes(parity, reference_free=self.reference_free):
                reason = f"not promoted: its parity is {parity_label(parity)} now"
            else:
                move = AliasMove(version=version, at=now(), action="promote", base=base, rank=rank, gate=record)
                return repointed(doc, move), move
        move = AliasMove(version=version, at=now(), action=GATE, base=base, rank=rank, reason=reason, gate=record)
        return {**doc, "history": with_move(doc, move)}, move

    def gate(self, name: str, version: str, doc: dict[str, Any] | None, action: str, *, force: bool) -> str | None:
        """:func:`~serving.adapters.parity.parity_gate` on ``version``'s record in the ref ``doc``
        (judged on the ref the move replaces, in the same write): None when it passes, the parity it
        was forced past when forced, else the refusal (ParityNotPassed, 409)."""
        return parity_gate(name, version, parity_of(doc).get(version), action=action,
                           reference_free=self.reference_free, force=force)

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

    def point(self, name: str, move, *, check=None, force_parity: bool = False,
              forced_by: str | None = None) -> AdapterRef:
        """Point the alias at a version (one conditional write of the ref, :meth:`Refs.update
        <serving.adapters.layout.Refs.update>`), recording the move: a push, promote or rollback. A
        running canary stays unless its version is the one now served (then it was promoted, and ends).

        ``move`` is an :class:`AliasMove`, or a function of the current ref document returning one
        (so a rollback computes its target from the ref it replaces); ``check`` may raise to refuse.
        The version pointed at must pass :meth:`gate` unless ``force_parity``.
        """
        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if check is not None:
                check(doc)
            step = move(doc) if callable(move) else move
            if doc is not None and doc["version"] == step.version:
                return None
            forced = self.gate(name, step.version, doc, step.action, force=force_parity)
            if forced:
                step = replace(step, forced=forced, by=forced_by)
            return repointed(doc, step)

        return ref_of(name, self.refs.update(name, change))


def back_to(entry: dict[str, Any]) -> AliasMove:
    """A rollback to the stable move ``entry`` of a history (what a forced or stopping move noted
    there is not carried over)."""
    return replace(move_of(entry), at=now(), action="rollback", forced=None, by=None, reason=None)


def repointed(doc: dict[str, Any] | None, step: AliasMove) -> dict[str, Any]:
    """The ref document ``doc`` with its alias at ``step.version``, ``step`` recorded (pure: see
    :meth:`AliasMoves.point`)."""
    history = with_move(doc, step)
    pushed_at = next((m["at"] for m in history if m["version"] == step.version and m["action"] == "push"), step.at)
    new = {"version": step.version, "base": step.base, "rank": step.rank, "pushed_at": pushed_at, "history": history}
    canary = (doc or {}).get("canary")
    if canary and canary["version"] != step.version:
        new["canary"] = canary
    parity = kept_parity(doc, [m["version"] for m in history] + ([canary["version"]] if canary else []))
    if parity:
        new["parity"] = parity
    if (doc or {}).get("policy"):  # the name's own policy changes (serving.adapters.policies) stay with it
        new["policy"] = doc["policy"]
    return new


def _forced_past_failure(doc: dict[str, Any], version: str, actions: tuple[str, ...]) -> bool:
    """Whether the move that last started ``version`` serving (one of ``actions``) was forced past a
    failed parity: an admin chose to serve it as it measures."""
    last = next((m for m in history_of(doc) if m["action"] in actions), None)
    return last is not None and last["version"] == version and str(last.get("forced") or "").startswith("FAILED")


def stop_failed(doc: dict[str, Any], version: str, record: ParityRecord, *,
                reference_free: bool) -> tuple[dict[str, Any], AliasMove | None]:
    """The ref document ``doc`` after ``version``'s parity was recorded FAILED, and the move that
    stopped it serving (None when none was made; pure, written by the caller's conditional write).

    The canary's version: the canary ends (an ``abort``). The version served: the alias rolls back to
    the version served before, when that one passes its own parity (see :func:`passes
    <serving.adapters.parity.passes>`); with none, it keeps serving. Each such move records why
    (``reason``). A version an admin forced into its role past a failed parity keeps it: that
    decision stands until an admin moves it.
    """
    reason = f"{version} stopped serving: its parity {parity_label(record)}"
    canary = canary_of(doc)
    if canary is not None and canary.version == version:
        if _forced_past_failure(doc, version, ("canary",)):
            return doc, None
        move = AliasMove(version=version, at=now(), action="abort", base=canary.base, rank=canary.rank, reason=reason)
        rest = {k: v for k, v in doc.items() if k != "canary"}
        return {**rest, "history": with_move(doc, move)}, move
    if doc["version"] != version or _forced_past_failure(doc, version, STABLE_MOVES):
        return doc, None
    stable = [m for m in history_of(doc) if m["action"] in STABLE_MOVES]
    if len(stable) < 2 or not passes(parity_of(doc).get(stable[1]["version"]), reference_free=reference_free):
        return doc, None
    step = replace(back_to(stable[1]), reason=reason)
    return repointed(doc, step), step
