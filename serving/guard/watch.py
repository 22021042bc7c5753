"""The live guard's keeper: counts a session's reported outcome into the ledger of the canary that
split it, and acts on the verdict (``serving.guard.ledger``).

State lives with the name in the adapter store, beside its ref (adapter names cannot start with
``_``)::

    _guard/{name}.json   the ledger of the name's current canary run (replaced by conditional writes)

so every gateway replica counts into the same ledger, and a restarted gateway carries on where the
last left off. An outcome counts only for a running canary, from a session the split sends to the
version the outcome names (the ref is read fresh, not from the resolver's cache, so a canary that
just ended or moved takes no late outcomes). A verdict is carried out on the ref first (a
conditional write that does nothing once that canary run is over) and then noted in the ledger, so a
gateway that stops between the two finds the same verdict again and repeats a move that is already
made, which changes nothing.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from serving.adapters import AdapterStore, Canary, ModelId, canary_of, policy_in_force as in_force, serves_canary
from serving.config import GuardPolicy, GuardSpec
from serving.errors import AdapterRefConflict, BadRequest
from serving.guard.ledger import Outcome, fold, fresh, judge, same_canary, summary, with_verdict
from serving.metrics import metric

log = logging.getLogger(__name__)
GUARD_PREFIX = "_guard/"
# Every session of a canary's name writes the one ledger: rounds of conditional writes, apart by a
# random backoff, before a report gives up (a busy name sees many reports at once, a ref few moves).
WRITE_ROUNDS = 6
BACKOFF_S = 0.02


@dataclass(frozen=True)
class Counted:
    """What became of one reported outcome: ``counted`` or not and why (``reason``), the arm it
    counted for, and the decision it led to (``decision``: rollback, promote, better), if any."""

    counted: bool
    reason: str
    arm: str | None = None
    decision: str | None = None


class CanaryGuard:
    """The live guard over the names of one adapter store, under the policies of ``spec``
    (``adapters.guard``). Blocking: the gateway calls it from a worker thread."""

    def __init__(self, store: AdapterStore, spec: GuardSpec):
        self.store, self.spec = store, spec
        self.objects = store.objects.scoped(GUARD_PREFIX)

    def policy(self, name: str, doc: dict[str, Any] | None = None) -> GuardPolicy:
        """``name``'s guard policy in force: ``spec``'s for the name with the name's own changes
        (``serving.adapters.policies``; ``doc``: its ref, read when not given)."""
        return in_force(self.spec.policy(name), doc if doc is not None else self.store.refs.require(name), "guard")

    def ledger(self, name: str) -> dict[str, Any] | None:
        """The name's current canary ledger, as shown to operators (None: none was kept)."""
        doc, _ = self.objects.read_json(f"{name}.json")
        return summary(doc) if doc else None

    def state(self, name: str) -> dict[str, Any]:
        """What ``GET /v1/adapters/{name}/guard`` and ``maze-serve adapters guard NAME`` show: the name's
        policy and its canary ledger.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        doc = self.store.refs.require(name)
        return {"object": "adapter.guard", "name": name, "policy": self.policy(name, doc).model_dump(),
                "ledger": self.ledger(name)}

    def report(self, model: str, session: str, outcome: Outcome) -> Counted:
        """Count the outcome of session ``session``, served by ``model`` (``base:name@version``, as the
        gateway named it in its answers), and act on the verdict it completes.

        Raises:
            BadRequest (400: ``model`` names no adapter version), AdapterNotFound (404),
            AdapterRefConflict (409), AdapterStoreUnavailable (503).
        """
        served = ModelId.parse(model).checked()
        if not served.is_adapter or served.version is None:
            raise BadRequest(f"model {model!r} names no adapter version: report the model the gateway answered "
                             "with (base:name@version)")
        name = served.name
        doc = self.store.refs.require(name)
        policy = self.policy(name, doc)
        if not policy.enabled:
            return self._skip(name, f"the live guard is off for {name!r}")
        canary = canary_of(doc)
        if canary is None:
            return self._skip(name, f"{name!r} runs no canary")
        arm = "canary" if served.version == canary.version else "stable" if served.version == doc["version"] else None
        if arm is None:
            return self._skip(name, f"version {served.version} is neither {name!r}'s canary ({canary.version}) nor "
                                    f"the version it serves ({doc['version']})")
        if (arm == "canary") != serves_canary(name, canary, session):
            return self._skip(name, f"the canary split sends this session to the other version, not {served.version}")
        return self._count(name, canary, doc["version"], arm, session, outcome, policy)

    def _replace(self, name: str, change) -> None:
        """The ledger replaced by ``change`` (``ObjectStore.replace_json``), retried in rounds with a
        growing random backoff while other reports win the race.

        Raises:
            AdapterRefConflict (409): it lost every round.
        """
        for round_ in range(WRITE_ROUNDS):
            try:
                self.objects.replace_json(f"{name}.json", change, f"the live guard of {name!r}")
                return
            except AdapterRefConflict:
                if round_ == WRITE_ROUNDS - 1:
                    raise
                time.sleep(random.uniform(0, BACKOFF_S * 2**round_))

    def _skip(self, name: str, reason: str) -> Counted:
        metric("guard_outcomes").inc(tags={"adapter": name, "arm": "none", "result": "not_counted"})
        return Counted(False, reason)

    def _count(self, name: str, canary: Canary, stable: str, arm: str, session: str, outcome: Outcome,
               policy: GuardPolicy) -> Counted:
        state: dict[str, Any] = {}

        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if not same_canary(doc, canary.version, canary.started_at, stable):
                doc = fresh(name, canary.version, canary.started_at, stable)
            state["why"] = "the guard decided on this canary already" if doc["verdict"] else None
            new = None if doc["verdict"] else fold(doc, arm, session, outcome, now=time.time(),
                                                   horizon_s=policy.horizon_s, pending_max=policy.pending_max)
            if new is None and not state["why"]:
                state["why"] = "this session's outcome was counted already"
            state["doc"] = new or doc
            return new

        self._replace(name, change)
        if state["why"]:
            return self._skip(name, state["why"])
        metric("guard_outcomes").inc(tags={"adapter": name, "arm": arm, "result": "counted"})
        verdict = judge(state["doc"], policy)
        if verdict is None:
            return Counted(True, "counted", arm)
        made = self.store.guard_decision(name, canary, verdict.action, verdict.reason, verdict.evidence)
        if made is None:  # another report carried the same verdict out first, or the canary ended meanwhile
            return Counted(True, "counted", arm)
        self._replace(name, lambda doc: with_verdict(doc, verdict, made.action) if same_canary(
            doc, canary.version, canary.started_at, stable) and not doc.get("verdict") else None)
        metric("guard_decisions").inc(tags={"adapter": name, "decision": verdict.action})
        log.warning("adapter %s: live guard on canary %s against %s: %s: %s (%s)", name, canary.version, stable,
                    verdict.action, verdict.reason, made.action)
        return Counted(True, verdict.reason, arm, verdict.action)


__all__ = ["GUARD_PREFIX", "CanaryGuard", "Counted"]
