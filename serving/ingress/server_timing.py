"""``Server-Timing``: where a request's time went, on every gateway response (W3C Server Timing).

The ingress keeps one :class:`RequestTiming` per HTTP request (made by
:class:`~serving.ingress.middleware.GatewayMiddleware`, reached through :data:`TIMING`). The request
is always in exactly one phase; :func:`enter` closes the running phase at the current instant and
starts the next, so the ingress's phases add up to its ``total`` by construction (every instant is
counted once). The phases, in the order a request meets them:

=========== ================================================================================
``auth``    the key gate: key lookup and limits (absent when the gateway runs without keys)
``resolve`` the model name to ``base`` or ``base:name@version`` (the adapter store's refs)
``checks``  the request checks (roles, images: bytes and pixels) before the engine sees it
``gateway`` everything else the ingress does: reading and parsing the body, its middlewares,
            building and sending the response
``queue``   Serve: the handle call to the replica, its routing and queue, the transfer both ways
            (the handle call until the first item came back, less the replica's own time)
``load``    on the replica, an adapter request's adapter resolve (cold: download and register)
``prefill`` on the replica, to the first token: input processing (template, images), the
            engine's queue and the prefill (vLLM's own first-token instant, so also for a
            response that is not streamed)
``decode``  on the replica, first token to the whole response (not streamed)
``batch``   on the replica, first token to the first chunk out (streams: Ray Serve LLM's stream
            batching interval, ``stream_batching_ms``, and the chunk's formatting)
``total``   the ingress's time from its first middleware to the response start
=========== ================================================================================

:class:`~serving.ingress.middleware.GatewayMiddleware` makes the record before its own clock starts
and reads the response's start before the header is made, so its ``response_start`` metric measures
the same interval within ``total``: a ``total`` below it would be a header that left time out.

A stream's header leaves with its first chunk, so it holds what was known then: its ``total``
is the time to the first chunk and it has no ``decode``. Proxies, the network and the HTTP
server's parsing lie outside ``total``.

The channel from the replica: the replica measures its own parts
(:mod:`serving.engine.replica_timing`, started in ``GatewayLLMServer._run_request``) and sends them
*with the response*: its first item leaves wrapped in ``Stamped`` (the only item a non-streamed
request has, so its parts are complete). The ingress's ``_get_response`` unwraps it (:func:`unstamp`)
before Ray's code or the client sees it. Carried with the response, the parts need no shared state,
so the same code works when ingress and LLM server are separate deployments on separate nodes (only
durations cross, never one process's clock readings compared with another's) and in the colocated
replica, where the handle is an in-process call; a per-request record both sides share would work
only there. An error raised on the replica carries them as an attribute of the exception (pickled
with it across Ray; :func:`unstamp_error`). A request whose replica sent no parts (another server
class) shows its whole Serve and replica time as ``queue``.

The cost (``benchmarks/server_timing.py``, ``cost``): ~7 us per request at the ingress (its phases
and the header), ~1 us on the replica, ~3 us to pickle the stamp where it crosses Ray, and under
0.1 us per engine output for the first-token layer over vLLM's ``generate``; a request takes 60 ms.
"""

from __future__ import annotations

import contextvars
import re
import time
from typing import Any

from serving.engine import replica_timing

# What each metric measures, as the header's `desc` (no commas or quotes: simple to read back).
DESCRIPTIONS = {
    "auth": "API key and limits",
    "resolve": "model name to version",
    "checks": "request checks",
    "gateway": "ingress parsing and response",
    "queue": "Serve routing and queue",
    "load": "adapter load on the replica",
    "prefill": "replica to first token",
    "decode": "first token to response",
    "batch": "first token to first chunk",
    "total": "ingress to response start",
}
ORDER = tuple(DESCRIPTIONS)
_PREFIX = {name: f'{name};desc="{desc}";dur=' for name, desc in DESCRIPTIONS.items()}
HEADER = b"server-timing"


# -- the ingress's record ------------------------------------------------------------------------
class RequestTiming:
    """One request's phases at the ingress (seconds, ``time.perf_counter``), and the replica's parts."""

    __slots__ = ("parts", "phase", "since", "start")

    def __init__(self) -> None:
        self.start = self.since = time.perf_counter()
        self.phase = "gateway"
        self.parts: dict[str, float] = {}

    def enter(self, phase: str, now: float | None = None) -> None:
        """Close the running phase at ``now`` and start ``phase``."""
        now = time.perf_counter() if now is None else now
        self.parts[self.phase] = self.parts.get(self.phase, 0.0) + now - self.since
        self.phase, self.since = phase, now

    def replica(self, parts: dict[str, float]) -> None:
        """The replica's parts arrived with the first item: they are the replica's share of the
        running ``queue`` phase, which keeps the rest; then the ingress's own work goes on."""
        now = time.perf_counter()
        waited, span = now - self.since, sum(parts.values())
        scale = waited / span if span > waited > 0 else 1.0  # never more than the ingress waited
        for name, seconds in parts.items():
            self.parts[name] = self.parts.get(name, 0.0) + seconds * scale
        self.parts[self.phase] = self.parts.get(self.phase, 0.0) + max(0.0, waited - span)
        self.phase, self.since = "gateway", now

    def header(self) -> bytes:
        """The ``Server-Timing`` value now (the running phase counted until now)."""
        now = time.perf_counter()
        parts = dict(self.parts)
        parts[self.phase] = parts.get(self.phase, 0.0) + now - self.since
        parts["total"] = now - self.start
        return format_header(parts).encode()


TIMING: contextvars.ContextVar[RequestTiming | None] = contextvars.ContextVar("maze_server_timing", default=None)


def enter(phase: str) -> None:
    """Start ``phase`` for the current request (nothing outside one)."""
    timing = TIMING.get()
    if timing is not None:
        timing.enter(phase)


class Phase:
    """ASGI middleware that starts ``phase`` when a request reaches it (placed around the key gate)."""

    def __init__(self, app, *, phase: str):
        self.app, self.phase = app, phase

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            enter(self.phase)
        await self.app(scope, receive, send)


# -- the header ----------------------------------------------------------------------------------
def format_header(parts: dict[str, float]) -> str:
    """``name;desc="...";dur=<ms>`` for each part (seconds), in :data:`ORDER`, unknown names last."""
    names = [n for n in ORDER if n in parts] + [n for n in parts if n not in DESCRIPTIONS]
    return ", ".join(f"{_PREFIX.get(n) or n + ';dur='}{parts[n] * 1000:.3f}" for n in names)


_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_PARAM = re.compile(rf'\s*;\s*({_TOKEN})\s*(?:=\s*({_TOKEN}|"(?:[^"\\]|\\.)*"))?')
_NAME = re.compile(rf"\s*({_TOKEN})")


def parse_header(value: str) -> dict[str, dict[str, Any]]:
    """A ``Server-Timing`` value as ``{name: {"dur": ms or None, "desc": str or None, ...}}`` (RFC
    syntax: token names, parameters with token or quoted-string values; the first of a name wins)."""
    out: dict[str, dict[str, Any]] = {}
    value, pos = value.strip(), 0
    while pos < len(value):
        m = _NAME.match(value, pos)
        if m is None:
            raise ValueError(f"not a Server-Timing metric at {pos}: {value[pos:pos + 40]!r}")
        name, params, pos = m.group(1), {}, m.end()
        while (p := _PARAM.match(value, pos)) is not None:
            raw = p.group(2) or ""
            params[p.group(1).lower()] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
            pos = p.end()
        rest = value[pos:].lstrip()
        if rest and not rest.startswith(","):
            raise ValueError(f"unexpected text after metric {name!r}: {rest[:40]!r}")
        pos = len(value) - len(rest) + 1
        dur = params.get("dur")
        out.setdefault(name, {**params, "dur": float(dur) if dur else None, "desc": params.get("desc")})
    return out


# -- back at the ingress -------------------------------------------------------------------------
def unstamp(item: Any) -> Any:
    """The replica's item without its ``Stamped`` wrapper, its parts recorded for the request
    (an item without parts, the first one from a server that sends none, ends ``queue`` as it is)."""
    timing = TIMING.get()
    if not isinstance(item, replica_timing.Stamped):
        if timing is not None and timing.phase == "queue":
            timing.enter("gateway")
        return item
    if timing is not None:
        timing.replica(item.parts)
    return item.item


def unstamp_error(exc: BaseException) -> None:
    """Record the replica's parts an exception brought back (``replica_timing.stamp_error``)."""
    parts = getattr(exc, "server_timing", None)
    timing = TIMING.get()
    if isinstance(parts, dict) and timing is not None and timing.phase == "queue":
        timing.replica(parts)


__all__ = ["DESCRIPTIONS", "HEADER", "TIMING", "Phase", "RequestTiming", "enter", "format_header", "parse_header",
           "unstamp", "unstamp_error"]
