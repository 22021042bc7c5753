"""Parity records: whether an adapter version, as served, answers as its reference does; and the gate
they put on every move that starts a version serving.

A parity measurement (elsewhere) compares what the gateway serves for a version with a reference
(the base and adapter under HF + peft) and hands its result to :meth:`AdapterStore.record_parity
<serving.adapters.AdapterStore.record_parity>`. The record lives in the name's ref document,
``parity: {version: record}``, next to the history it is about: written by the same conditional
write as the moves, and kept only for versions the history still holds, so the ref stays small.

A record is in one of three states: ``ok`` (it matched its reference), ``FAILED`` (it did not, or
it is served as the base), or ``not compared`` (``ok`` null: no reference could be computed where
it was measured, so only the cheap check ran, that its served output differs from the base's).
:func:`parity_gate` judges a version by its record wherever it would start to serve (promote,
canary, rollback, push): ``FAILED`` is refused, ``not compared`` is refused unless the store's
``adapters.parity_without_reference`` says such a check suffices, and a refused version serves
only when an admin forces it (the move then records what it was forced past). A version without a
record is not blocked: parity is evidence where it was measured, not a precondition of serving.
Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from serving.errors import BadRequest, ParityFailed, ParityNotCompared

DETAIL_KEEP = 300  # characters of a record's detail kept in the ref
NOT_COMPARED = "base-differs"  # the reference of a check made against the base's served output alone
FORCE_HINT = "--force-parity (force_parity: true over the API)"


@dataclass(frozen=True)
class ParityRecord:
    """One parity measurement of a version: ``ok`` whether it passed (true), failed (false) or was
    not compared with a reference (null), over ``frames`` compared frames, the largest absolute
    difference found (None when none was measured), against which ``reference`` (``hf+peft``, or
    :data:`NOT_COMPARED` when only the base's served output was there to compare with), when
    (``at``, UTC ISO 8601) and a short ``detail``."""

    ok: bool | None
    frames: int
    max_abs_diff: float | None
    reference: str
    at: str
    detail: str = ""

    @property
    def state(self) -> str:
        """``ok``, ``FAILED`` or ``not compared``."""
        return "ok" if self.ok else "FAILED" if self.ok is False else "not compared"


_FIELDS = tuple(f.name for f in fields(ParityRecord))


def _ok_of(ok: bool | None, reference: Any) -> bool | None:
    # A pass against the base alone is no comparison: records that say "ok" for it read as not compared.
    return None if ok is True and reference == NOT_COMPARED else ok


def parity_record(result: dict[str, Any] | ParityRecord, *, at: str) -> ParityRecord:
    """A measurement's result checked into a record (``at`` when the result names no time); keys
    other than :class:`ParityRecord`'s are not kept (per-frame output belongs in the measurement's
    own report), and ``detail`` is cut to :data:`DETAIL_KEEP` characters. A pass against
    :data:`NOT_COMPARED` is kept as not compared.

    Raises:
        BadRequest (400): a field missing or of the wrong type.
    """
    doc = asdict(result) if isinstance(result, ParityRecord) else dict(result)
    ok, frames, diff, reference = (doc.get(k) for k in ("ok", "frames", "max_abs_diff", "reference"))
    if ok is not None and not isinstance(ok, bool):
        raise BadRequest(f"parity result: ok must be true, false or null (not compared), got {ok!r}")
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 0:
        raise BadRequest(f"parity result: frames must be a count of frames, got {frames!r}")
    if diff is not None and (not isinstance(diff, (int, float)) or isinstance(diff, bool)
                             or not math.isfinite(diff) or diff < 0):
        raise BadRequest(f"parity result: max_abs_diff must be a finite number >= 0 or null, got {diff!r}")
    if not isinstance(reference, str) or not reference:
        raise BadRequest(f"parity result: reference must name what was compared against, got {reference!r}")
    detail = doc.get("detail") or ""
    return ParityRecord(ok=_ok_of(ok, reference), frames=frames, max_abs_diff=None if diff is None else float(diff),
                        reference=reference[:64], at=str(doc.get("at") or at), detail=str(detail)[:DETAIL_KEEP])


def parity_of(doc: dict[str, Any] | None) -> dict[str, ParityRecord]:
    """The parity records of a ref document, by version (fields a newer writer added are ignored)."""
    records = (doc or {}).get("parity") or {}
    out = {}
    for version, raw in records.items():
        kept = {k: raw.get(k) for k in _FIELDS if k in raw}
        out[version] = ParityRecord(**{**kept, "ok": _ok_of(kept.get("ok"), kept.get("reference"))})
    return out


def kept_parity(doc: dict[str, Any] | None, versions: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``doc``'s parity map as stored, cut to ``versions`` (those the new ref's history holds)."""
    keep = set(versions)
    return {v: r for v, r in ((doc or {}).get("parity") or {}).items() if v in keep}


def parity_label(record: ParityRecord | None) -> str:
    """A record in a few characters: ``ok 0.004``, ``FAILED 0.31``, ``not compared``, ``-`` when none
    was recorded."""
    if record is None:
        return "-"
    if record.ok is None or record.max_abs_diff is None:
        return record.state
    return f"{record.state} {record.max_abs_diff:.3g}"


def passes(record: ParityRecord | None, *, reference_free: bool) -> bool:
    """Whether a version with this record may start serving unforced: no record, ``ok``, or ``not
    compared`` where ``reference_free`` (the store's ``adapters.parity_without_reference``) is on."""
    return record is None or record.ok is True or (record.ok is None and reference_free)


def parity_gate(name: str, version: str, record: ParityRecord | None, *, action: str, reference_free: bool,
                force: bool) -> str | None:
    """Judge ``version`` of ``name`` before a move (``action``: promote, canary, rollback, push) starts
    it serving: None when it passes (:func:`passes`), the label of the record it was forced past
    when it does not and ``force`` is on; otherwise the refusal.

    Raises:
        ParityFailed (409): its recorded parity failed.
        ParityNotCompared (409): its parity was not compared with a reference and ``reference_free`` is off.
    """
    if passes(record, reference_free=reference_free):
        return None
    if force:
        return parity_label(record)
    again = f"`maze-serve adapters verify {name}@{version} --parity`"
    if record.ok is False:
        diff = "not measured" if record.max_abs_diff is None else f"{record.max_abs_diff:.3g}"
        detail = f" ({record.detail})" if record.detail else ""
        raise ParityFailed(
            f"adapter {name!r} version {version} failed its parity check against {record.reference} at "
            f"{record.at}: max abs difference {diff} over {record.frames} frames{detail}, so it may not answer as "
            f"trained; {action} refused. Measure it again with {again}, or have an admin force it with {FORCE_HINT}")
    detail = f" ({record.detail})" if record.detail else ""
    raise ParityNotCompared(
        f"adapter {name!r} version {version} has parity not compared: its check at {record.at} found only that its "
        f"served output differs from the base's, with no reference to compare with{detail}, and "
        f"adapters.parity_without_reference is off; {action} refused. Measure it with {again} where the base's "
        "weights are readable, set adapters.parity_without_reference: true if a check against the base suffices, "
        f"or have an admin force it with {FORCE_HINT}")


__all__ = ["DETAIL_KEEP", "FORCE_HINT", "NOT_COMPARED", "ParityRecord", "kept_parity", "parity_gate", "parity_label",
           "parity_of", "parity_record", "passes"]
