"""Canary splits: which of an adapter's two versions serves a request.

An adapter name with a canary (``maze-serve adapters canary NAME@VERSION --weight W``) serves its
stable version to ``100 - W`` percent of sessions and the canary version to ``W`` percent. The
choice is a pure function of (name, canary version, session key): a stable hash of the three put
into one of :data:`BUCKETS` buckets, and the canary serves the buckets below ``W`` percent of them.
So the same session always gets the same version, whichever replica answers and whether or not
the resolver's cache was warm; raising the weight only moves sessions from stable to canary
(their buckets stay where they are); and a new canary version draws a fresh cohort, so the same
users are not always the first to get a new version.

The session key is, first found: the ``X-Session-Id`` header (Ray Serve's own session header, which
the agent's client sends once per episode), the OpenAI ``user`` field, then the request id
(``X-Request-Id``, or the one the gateway assigns), so a client that sends nothing is split per
request.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from serving.errors import InvalidCanary

BUCKETS = 10_000  # weights resolve to 0.01 percent
SESSION_HEADER = "x-session-id"  # Ray Serve's default session header (RAY_SERVE_SESSION_ID_HEADER_KEY)


@dataclass(frozen=True)
class Canary:
    """A running canary: ``version`` serves ``weight`` percent of the name's sessions."""

    version: str
    weight: float
    base: str | None = None
    rank: int | None = None
    started_at: str = ""


def check_weight(weight: Any) -> float:
    """``weight`` as a percentage in [0, 100], or :class:`InvalidCanary` saying what is wrong."""
    try:
        value = float(weight)
    except (TypeError, ValueError):
        raise InvalidCanary(f"canary weight {weight!r} is not a number: give a percentage from 0 to 100") from None
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise InvalidCanary(f"canary weight {weight!r} is out of range: give a percentage from 0 to 100")
    return value


def bucket(name: str, canary_version: str, key: str) -> int:
    """The session's bucket in ``[0, BUCKETS)`` for this name's canary (sha256: stable across
    processes and Python versions, unlike ``hash()``)."""
    digest = hashlib.sha256(f"{name}\0{canary_version}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def serves_canary(name: str, canary: Canary | None, key: str | None) -> bool:
    """Whether the session ``key`` gets the canary version of ``name``.

    Without a key (a caller outside a request) the stable version serves.
    """
    if canary is None or key is None:
        return False
    return bucket(name, canary.version, key) < round(canary.weight * BUCKETS / 100)


def session_key(headers: Any, user: Any, request_id: Any) -> str | None:
    """The key a request is split by: ``X-Session-Id`` header, else the OpenAI ``user`` field, else
    the request id (see the module docstring). ``headers`` is any case-insensitive mapping."""
    for value in (headers.get(SESSION_HEADER) if headers is not None else None, user, request_id):
        if isinstance(value, str) and value:
            return value
    return None


def canary_of(doc: dict[str, Any] | None) -> Canary | None:
    """The canary recorded in an adapter's ref document, if one runs."""
    raw = (doc or {}).get("canary")
    if not raw:
        return None
    return Canary(version=raw["version"], weight=float(raw["weight"]), base=raw.get("base"), rank=raw.get("rank"),
                  started_at=raw.get("started_at", ""))


__all__ = ["BUCKETS", "Canary", "bucket", "canary_of", "check_weight", "serves_canary", "session_key"]
