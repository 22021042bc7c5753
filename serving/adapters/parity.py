"""Parity records: whether an adapter version, as served, answers as its reference does.

A parity measurement (elsewhere) compares what the gateway serves for a version with a reference
(the base and adapter under HF + peft) and hands its result to :meth:`AdapterStore.record_parity
<serving.adapters.AdapterStore.record_parity>`. The record lives in the name's ref document,
``parity: {version: record}``, next to the history it is about: written by the same conditional
write as the moves, and kept only for versions the history still holds, so the ref stays small.

A failed record gates promotion (:func:`refuse_failed_parity`): the version is not promoted unless
forced. A version without a record is not blocked: parity is evidence where it was measured, not a
precondition of serving. Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from serving.errors import BadRequest, ParityFailed

DETAIL_KEEP = 300  # characters of a record's detail kept in the ref


@dataclass(frozen=True)
class ParityRecord:
    """One parity measurement of a version: ``ok`` whether it passed, over ``frames`` compared
    frames, the largest absolute difference found (None when none was measured), against which
    ``reference`` (``hf+peft``, or ``base-differs`` when the reference could not use the same base),
    when (``at``, UTC ISO 8601) and a short ``detail``."""

    ok: bool
    frames: int
    max_abs_diff: float | None
    reference: str
    at: str
    detail: str = ""


_FIELDS = tuple(f.name for f in fields(ParityRecord))


def parity_record(result: dict[str, Any] | ParityRecord, *, at: str) -> ParityRecord:
    """A measurement's result checked into a record (``at`` when the result names no time); keys
    other than :class:`ParityRecord`'s are not kept (per-frame output belongs in the measurement's
    own report), and ``detail`` is cut to :data:`DETAIL_KEEP` characters.

    Raises:
        BadRequest (400): a field missing or of the wrong type.
    """
    doc = asdict(result) if isinstance(result, ParityRecord) else dict(result)
    ok, frames, diff, reference = (doc.get(k) for k in ("ok", "frames", "max_abs_diff", "reference"))
    if not isinstance(ok, bool):
        raise BadRequest(f"parity result: ok must be true or false, got {ok!r}")
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 0:
        raise BadRequest(f"parity result: frames must be a count of frames, got {frames!r}")
    if diff is not None and (not isinstance(diff, (int, float)) or isinstance(diff, bool)
                             or not math.isfinite(diff) or diff < 0):
        raise BadRequest(f"parity result: max_abs_diff must be a finite number >= 0 or null, got {diff!r}")
    if not isinstance(reference, str) or not reference:
        raise BadRequest(f"parity result: reference must name what was compared against, got {reference!r}")
    detail = doc.get("detail") or ""
    return ParityRecord(ok=ok, frames=frames, max_abs_diff=None if diff is None else float(diff),
                        reference=reference[:64], at=str(doc.get("at") or at), detail=str(detail)[:DETAIL_KEEP])


def parity_of(doc: dict[str, Any] | None) -> dict[str, ParityRecord]:
    """The parity records of a ref document, by version (fields a newer writer added are ignored)."""
    records = (doc or {}).get("parity") or {}
    return {v: ParityRecord(**{k: r.get(k) for k in _FIELDS if k in r}) for v, r in records.items()}


def kept_parity(doc: dict[str, Any] | None, versions: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``doc``'s parity map as stored, cut to ``versions`` (those the new ref's history holds)."""
    keep = set(versions)
    return {v: r for v, r in ((doc or {}).get("parity") or {}).items() if v in keep}


def parity_label(record: ParityRecord | None) -> str:
    """A record in a few characters: ``ok 0.004``, ``FAILED 0.31``, ``-`` when none was recorded."""
    if record is None:
        return "-"
    state = "ok" if record.ok else "FAILED"
    return state if record.max_abs_diff is None else f"{state} {record.max_abs_diff:.3g}"


def refuse_failed_parity(name: str, version: str, record: ParityRecord | None, *, force: bool) -> None:
    """Raise :class:`ParityFailed` (409) when ``version``'s recorded parity failed and ``force`` is off;
    a version with no record passes."""
    if record is None or record.ok or force:
        return
    diff = "not measured" if record.max_abs_diff is None else f"{record.max_abs_diff:.3g}"
    detail = f" ({record.detail})" if record.detail else ""
    raise ParityFailed(
        f"adapter {name!r} version {version} failed its parity check against {record.reference} at {record.at}: "
        f"max abs difference {diff} over {record.frames} frames{detail}, so it may not answer as trained. "
        "Promote it anyway with --force (force: true over the API)")


__all__ = ["DETAIL_KEEP", "ParityRecord", "kept_parity", "parity_label", "parity_of", "parity_record",
           "refuse_failed_parity"]
