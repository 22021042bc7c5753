"""The live guard's ledger of one canary: what the sessions of each arm reported, the pairs formed
from them, and the verdict it supports. Pure functions over the JSON document the store keeps
(``serving.guard.watch`` reads and writes it).

Pairing: each session is placed at the time it started (the time its outcome came in, less the
duration the client reports), and sessions are paired by those start times, never by the order their
outcomes arrive: a solved maze ends sooner than a failed one, so an order of arrival would pair a new
canary's quick wins with whatever the stable arm reported meanwhile and favour it. Only sessions that
started at least ``horizon_s`` ago are paired (by then every session that started with them has
ended, whatever its outcome), each canary session with the stable one that started nearest to it. So
which sessions make a pair depends on start times and the clock alone, and under equal solve rates
each discordant pair is a fair coin (the test in ``serving.guard.evidence``;
benchmarks/guard_error_rate.py measures the rates on simulated traffic). A session that ran longer
than the horizon is counted in its arm and in no pair (the sessions that started with it may be
paired already), and so is one that started before the canary did: of the sessions already running
when a canary starts, the ones that report after it are mostly the long, failed ones, and pairing
them with the canary's earliest, short sessions would favour the canary. The same rules hold for both arms. A session that ended on an endpoint error solved nothing it could be judged on: it counts in
the error guard rail, not in a pair.
"""

from __future__ import annotations

import hashlib
import math
import time
from datetime import datetime
from dataclasses import asdict, dataclass
from typing import Any

from serving.config import GuardPolicy
from serving.guard.evidence import e_better, e_worse, reaches

ARMS = ("canary", "stable")
SEEN_MAX = 2048  # session ids remembered per canary, so a retried report is not counted twice
TEST = "live pairs, uniform-mixture e-value (anytime-valid)"


@dataclass(frozen=True)
class Outcome:
    """What one session reports: whether its maze was solved, how long it ran (``duration_s``: its
    start is placed that long before the report came in), whether it ended on an endpoint error
    (then ``solved`` is not judged) and its mean turn latency in seconds, when measured."""

    solved: bool
    duration_s: float = 0.0
    error: bool = False
    latency_s: float | None = None


@dataclass(frozen=True)
class Verdict:
    """What the ledger supports: ``action`` ``rollback`` (harm, or a guard rail), ``promote`` (benefit
    where the policy promotes) or ``better`` (benefit, recorded only), ``reason`` in words, and the
    evidence recorded with the decision."""

    action: str
    reason: str
    evidence: dict[str, Any]


def session_hash(session: str) -> str:
    """A short digest of a session id: the ledger never stores what clients sent."""
    return hashlib.sha256(session.encode()).hexdigest()[:16]


def _arm() -> dict[str, Any]:
    return {"sessions": 0, "solved": 0, "errors": 0, "latency_s_sum": 0.0, "latency_n": 0}


def fresh(name: str, canary_version: str, started_at: str, stable: str) -> dict[str, Any]:
    """An empty ledger for the canary ``canary_version`` of ``name`` (started at ``started_at``, ISO
    8601) against ``stable``."""
    since = datetime.fromisoformat(started_at).timestamp() if started_at else 0.0
    return {"name": name, "canary": canary_version, "started_at": started_at, "since": since, "stable": stable,
            "arms": {arm: _arm() for arm in ARMS}, "waiting": [],
            "pairs": {"wins": 0, "losses": 0, "ties": 0}, "seen": [], "found_better": None, "verdict": None,
            "updated_at": time.time()}


def same_canary(doc: dict[str, Any] | None, canary_version: str, started_at: str, stable: str) -> bool:
    """Whether ``doc`` is the ledger of this canary run (a canary restarted, or its stable version
    moved, starts a new one)."""
    return doc is not None and (doc.get("canary"), doc.get("started_at"), doc.get("stable")) == (
        canary_version, started_at, stable)


def _settle(doc: dict[str, Any], now: float, horizon_s: float, pending_max: int) -> None:
    """Pair the waiting sessions that started at least ``horizon_s`` before ``now``: in start order,
    each canary session with the stable one that started nearest to it (see the module). Sessions
    left without a partner wait for later ones; the oldest past ``pending_max`` are dropped."""
    closed = [e for e in doc["waiting"] if e[0] <= now - horizon_s]
    stables = sorted((e for e in closed if e[1] == "s"), key=lambda e: e[0])
    paired: list[list] = []
    for canary in sorted((e for e in closed if e[1] == "c"), key=lambda e: e[0]):
        if not stables:
            break
        nearest = min(range(len(stables)), key=lambda i: abs(stables[i][0] - canary[0]))
        stable = stables.pop(nearest)
        key = "ties" if canary[2] == stable[2] else "wins" if canary[2] else "losses"
        doc["pairs"][key] += 1
        paired += [canary, stable]
    done = {id(e) for e in paired}
    left = [e for e in doc["waiting"] if id(e) not in done]
    doc["waiting"] = sorted(left, key=lambda e: e[0])[-pending_max:]


def fold(doc: dict[str, Any], arm: str, session: str, outcome: Outcome, *, now: float, horizon_s: float,
         pending_max: int) -> dict[str, Any] | None:
    """``doc`` with one session's outcome counted and every session that can be paired now paired
    (a new document), or None when that session was counted already."""
    digest = session_hash(session)
    if digest in doc["seen"]:
        return None
    new = {**doc, "arms": {k: dict(v) for k, v in doc["arms"].items()}, "waiting": [list(e) for e in doc["waiting"]],
           "pairs": dict(doc["pairs"]), "seen": [*doc["seen"], digest][-SEEN_MAX:], "updated_at": now}
    counts = new["arms"][arm]
    counts["sessions"] += 1
    if outcome.latency_s is not None:
        counts["latency_s_sum"] += float(outcome.latency_s)
        counts["latency_n"] += 1
    if outcome.error:
        counts["errors"] += 1
    else:
        counts["solved"] += int(outcome.solved)
        started = math.floor((now - max(0.0, outcome.duration_s)) * 1000) / 1000  # ms, never later than it was
        # Longer than the horizon: sessions that started with it may be paired already. Started before the
        # canary: of those, only the ones still running when it started report, mostly failures.
        if outcome.duration_s <= horizon_s and started >= doc.get("since", 0.0):
            new["waiting"].append([started, "c" if arm == "canary" else "s", int(outcome.solved)])
    _settle(new, now, horizon_s, pending_max)
    return new


def evidence_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The ledger's numbers as recorded with a decision (and shown by ``adapters guard``)."""
    pairs, arms = doc["pairs"], doc["arms"]
    return {"test": TEST, "canary": doc["canary"], "against": doc["stable"], "wins": pairs["wins"],
            "losses": pairs["losses"], "ties": pairs["ties"], "e_better": round(e_better(pairs["wins"], pairs["losses"]), 4),
            "e_worse": round(e_worse(pairs["wins"], pairs["losses"]), 4),
            **{f"{arm}_{k}": arms[arm][k] for arm in ARMS for k in ("sessions", "solved", "errors")},
            **{f"{arm}_latency_s": _mean_latency(arms[arm]) for arm in ARMS}}


def _mean_latency(counts: dict[str, Any]) -> float | None:
    return round(counts["latency_s_sum"] / counts["latency_n"], 4) if counts["latency_n"] else None


def _rail(doc: dict[str, Any], policy: GuardPolicy) -> str | None:
    """Why a guard rail trips, or None."""
    can, sta = doc["arms"]["canary"], doc["arms"]["stable"]
    if min(can["sessions"], sta["sessions"]) < policy.rails_min_sessions:
        return None
    can_err, sta_err = can["errors"] / can["sessions"], sta["errors"] / sta["sessions"]
    if can_err > sta_err + policy.max_error_increase:
        return (f"guard rail: {can_err:.0%} of the canary's sessions ended on an endpoint error against "
                f"{sta_err:.0%} of the stable version's (allowed: {policy.max_error_increase:.0%} more)")
    can_lat, sta_lat = _mean_latency(can), _mean_latency(sta)
    if min(can["latency_n"], sta["latency_n"]) >= policy.rails_min_sessions and sta_lat and \
            can_lat > policy.max_latency_ratio * sta_lat:
        return (f"guard rail: the canary's mean turn latency {can_lat:.3f}s is over {policy.max_latency_ratio:g}x the "
                f"stable version's {sta_lat:.3f}s")
    return None


def judge(doc: dict[str, Any], policy: GuardPolicy) -> Verdict | None:
    """The verdict the ledger supports under ``policy`` now, or None (keep watching). A ledger that
    already found the canary better without promoting it reports that finding once."""
    evidence = {**evidence_of(doc), "alpha_rollback": policy.alpha_rollback, "alpha_promote": policy.alpha_promote,
                "min_discordant": policy.min_discordant}
    rail = _rail(doc, policy)
    if rail:
        return Verdict("rollback", rail, {**evidence, "rail": rail})
    wins, losses = doc["pairs"]["wins"], doc["pairs"]["losses"]
    if wins + losses < policy.min_discordant:
        return None
    if reaches(evidence["e_worse"], policy.alpha_rollback):
        return Verdict("rollback", f"the canary solves fewer mazes: it lost {losses} and won {wins} of the pairs where "
                       f"one arm solved (e-value {evidence['e_worse']:.1f} >= {1 / policy.alpha_rollback:g})", evidence)
    if reaches(evidence["e_better"], policy.alpha_promote):
        why = (f"the canary solves more mazes: it won {wins} and lost {losses} of the pairs where one arm solved "
               f"(e-value {evidence['e_better']:.1f} >= {1 / policy.alpha_promote:g})")
        if policy.promote:
            return Verdict("promote", why, evidence)
        if not doc.get("found_better"):
            return Verdict("better", f"{why}; not promoted: the name's guard policy leaves promotion to a person",
                           evidence)
    return None


def with_verdict(doc: dict[str, Any], verdict: Verdict, outcome: str) -> dict[str, Any]:
    """The ledger with ``verdict`` recorded: a rollback or promote ends it (``outcome``: what the
    alias move found), a ``better`` finding is noted and watching goes on."""
    record = {**asdict(verdict), "outcome": outcome, "at": time.time()}
    if verdict.action == "better":
        return {**doc, "found_better": record}
    return {**doc, "verdict": record}


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The ledger as shown to operators (the session digests left out)."""
    return {**{k: v for k, v in doc.items() if k not in ("seen", "arms", "pairs", "waiting")},
            "waiting": len(doc["waiting"]), "evidence": evidence_of(doc)}


__all__ = ["ARMS", "Outcome", "Verdict", "evidence_of", "fold", "fresh", "judge", "same_canary", "session_hash",
           "summary", "with_verdict"]
