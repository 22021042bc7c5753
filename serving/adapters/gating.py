"""The adapter store's side of the offline gate (``maze-eval gate``): which candidate may be gated, and
the decision written into the name's history with its evidence.

The gate itself (evaluation.gate) plays the candidate and the version the name serves on the same
mazes and tests the difference; the store only judges and records. :func:`check_candidate` is asked
before anything is played: the candidate must be another version of a published name, with a
parity record that passes (a version never measured does not pass here, unlike a hand-made promote:
an automatic move needs the evidence that the version is served as trained). :func:`decided` is the
decision's one conditional write: a candidate found better is promoted only while the name still
serves the version it was played against and its parity still passes; otherwise, and for a candidate
found worse or undecided, the name is left and a ``gate`` entry records why. Pure: the caller reads
and writes the ref.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from serving.adapters.parity import parity_gate, parity_label, parity_of
from serving.adapters.refs import check_version
from serving.config import GatePolicy
from serving.errors import BadRequest, InvalidCanary, ParityNotMeasured

VERDICTS = ("better", "worse", "undecided")
RUN_ID_MAX = 64  # the results store's run ids


@dataclass(frozen=True)
class GateEvidence:
    """What a gate found: its ``verdict`` on the candidate against version ``against``, from ``wins``
    (seeds only the candidate solved) and ``losses`` (only ``against``) over ``seeds`` paired seeds, the
    test (``test``, looks ``looks``) with its one-sided ``p_value`` at the deciding look, the wins a
    promotion needed there (``wins_needed``; None: none could) and the overall ``alpha``, and the two
    evaluation runs (``run``: the candidate's, ``run_against``) in the results store."""

    verdict: str
    against: str
    wins: int
    losses: int
    seeds: int
    looks: str
    p_value: float
    wins_needed: int | None
    alpha: float
    test: str
    run: str
    run_against: str


_FIELDS = tuple(f.name for f in fields(GateEvidence))


def _count(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"gate evidence: {key} must be a count, got {value!r}")
    return value


def _text(doc: dict[str, Any], key: str, limit: int) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise BadRequest(f"gate evidence: {key} must be a string of 1-{limit} characters, got {value!r}")
    return value


def gate_evidence(doc: dict[str, Any] | GateEvidence) -> GateEvidence:
    """A decision's evidence checked into a record (keys other than :class:`GateEvidence`'s refused).

    Raises:
        BadRequest (400): a field missing, unknown or of the wrong type or range.
    """
    doc = asdict(doc) if isinstance(doc, GateEvidence) else dict(doc)
    if unknown := sorted(set(doc) - set(_FIELDS)):
        raise BadRequest(f"gate evidence: unknown fields {unknown}")
    if doc.get("verdict") not in VERDICTS:
        raise BadRequest(f"gate evidence: verdict must be one of {list(VERDICTS)}, got {doc.get('verdict')!r}")
    against = doc.get("against")
    if not isinstance(against, str):
        raise BadRequest(f"gate evidence: against must be a version, got {against!r}")
    check_version(against)
    wins, losses, seeds = _count(doc, "wins"), _count(doc, "losses"), _count(doc, "seeds")
    if wins + losses > seeds:
        raise BadRequest(f"gate evidence: {wins} wins and {losses} losses on {seeds} seeds")
    needed = doc.get("wins_needed")
    if needed is not None:
        needed = _count(doc, "wins_needed")
    numbers = {k: doc.get(k) for k in ("p_value", "alpha")}
    for key, value in numbers.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                or not 0 <= value <= 1:
            raise BadRequest(f"gate evidence: {key} must be a probability, got {value!r}")
    return GateEvidence(verdict=doc["verdict"], against=against, wins=wins, losses=losses, seeds=seeds,
                        looks=_text(doc, "looks", 200), p_value=float(numbers["p_value"]), wins_needed=needed,
                        alpha=float(numbers["alpha"]), test=_text(doc, "test", 300), run=_text(doc, "run", RUN_ID_MAX),
                        run_against=_text(doc, "run_against", RUN_ID_MAX))


@dataclass(frozen=True)
class GateTarget:
    """A candidate cleared to be gated: ``version`` of ``name``, against ``current`` (the version the
    name serves now, on base ``base``), under the name's ``policy`` (``adapters.gate``); ``parity`` is
    the candidate's parity label (``ok 0.004``)."""

    name: str
    version: str
    current: str
    base: str | None
    parity: str
    policy: GatePolicy

    def as_dict(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "policy"},
                "policy": self.policy.model_dump()}


def check_candidate(name: str, version: str, doc: dict[str, Any], *, reference_free: bool) -> str:
    """Whether ``version`` may be gated against what the ref ``doc`` serves: returns its parity label.

    Raises:
        InvalidCanary (400): it is the version served (nothing to gate).
        ParityNotMeasured (409): it has no parity record. ParityFailed, ParityNotCompared (409): its
            record does not pass (:func:`~serving.adapters.parity.parity_gate`; never forced here).
    """
    if doc["version"] == version:
        raise InvalidCanary(f"adapter {name!r} serves version {version} already: the gate compares another "
                            "version with it (see `adapters history NAME`)")
    record = parity_of(doc).get(version)
    if record is None:
        raise ParityNotMeasured(
            f"adapter {name!r} version {version} has no parity record: the gate promotes only a version checked to "
            f"be served as trained; measure it with `maze-serve adapters verify {name}@{version} --parity`")
    parity_gate(name, version, record, action="gate", reference_free=reference_free, force=False)
    return parity_label(record)


__all__ = ["VERDICTS", "GateEvidence", "GateTarget", "check_candidate", "gate_evidence"]
