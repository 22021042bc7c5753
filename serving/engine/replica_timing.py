"""The replica's part of the ``Server-Timing`` header (the ingress's: :mod:`serving.ingress.server_timing`).

``GatewayLLMServer._run_request`` starts a :class:`ReplicaClock` for each chat and completions
request: when it arrived, when Ray's run had the adapter (``load``), vLLM's first-token instant
(:func:`time_first_token` reads it from ``RequestOutput.metrics``, so also for a response that is not
streamed, whose only output comes at the end) and when the first item left. :func:`stamped` sends
those parts with the request's first item, wrapped in :class:`Stamped`, which the ingress unwraps;
an exception carries them as an attribute (:func:`stamp_error`). Only durations leave the replica,
so no other process's clock is compared with this one's.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator
from typing import Any


class Stamped:
    """A replica's first response item with the replica's parts (seconds) until it left."""

    __slots__ = ("item", "parts")

    def __init__(self, item: Any, parts: dict[str, float]):
        self.item, self.parts = item, parts

    def __reduce__(self):
        return Stamped, (self.item, self.parts)


class ReplicaClock:
    """A request's instants on the replica (wall clock, as vLLM's first-token instant is)."""

    __slots__ = ("adapter", "first_token", "loaded", "received", "stream")

    def __init__(self, *, adapter: bool, stream: bool):
        self.received, self.loaded, self.first_token = time.time(), None, None
        self.adapter, self.stream = adapter, stream

    def parts(self) -> dict[str, float]:
        """The replica's parts until now: load (adapter requests), prefill, then decode or batch."""
        now = time.time()
        loaded = min(max(self.loaded or now, self.received), now)
        start = loaded if self.adapter else self.received  # a base request's load (a no-op) is prefill's
        parts = {"load": loaded - self.received} if self.adapter else {}
        if self.first_token is None:  # no token (an error): all of it went before one
            parts["prefill"] = now - start
            return parts
        first = min(max(self.first_token, start), now)
        parts["prefill"] = first - start
        parts["batch" if self.stream else "decode"] = now - first
        return parts


REPLICA_CLOCK: contextvars.ContextVar[ReplicaClock | None] = contextvars.ContextVar("maze_replica_clock",
                                                                                    default=None)


async def stamped(stream: AsyncIterator, clock: ReplicaClock) -> AsyncIterator:
    """``stream`` with its first item wrapped in :class:`Stamped` (the engine runs inside the clock)."""
    it = stream.__aiter__()
    token = REPLICA_CLOCK.set(clock)  # read by the engine's generate when the first item is awaited here
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        return
    except Exception as exc:
        stamp_error(exc, clock.parts())
        raise
    finally:
        REPLICA_CLOCK.reset(token)
    try:
        yield Stamped(first, clock.parts())
        async for item in it:
            yield item
    finally:
        close = getattr(it, "aclose", None)
        if close is not None:
            await close()


def stamp_error(exc: BaseException, parts: dict[str, float]) -> None:
    """Leave the replica's parts on an exception that crosses back to the ingress."""
    try:
        exc.server_timing = parts
    except AttributeError:  # an exception type without a __dict__
        pass


def time_first_token(engine_client) -> None:
    """Make ``engine_client.generate`` note each request's first-token instant on its replica clock.

    vLLM's own instant (``RequestOutput.metrics``: arrival + first-token latency, both the front
    end's wall clock) is read, so a request that is not streamed, whose only output comes at the
    end, gets it too; without vLLM's stats, the first output's arrival stands for it."""
    generate = engine_client.generate

    def timed_generate(*args, **kwargs):
        clock = REPLICA_CLOCK.get()
        outputs = generate(*args, **kwargs)
        return outputs if clock is None else _first_token(outputs, clock)

    engine_client.generate = timed_generate


async def _first_token(outputs: AsyncIterator, clock: ReplicaClock) -> AsyncIterator:
    try:
        async for out in outputs:
            if clock.first_token is None:
                stats = getattr(out, "metrics", None)
                latency, arrival = getattr(stats, "first_token_latency", 0.0), getattr(stats, "arrival_time", 0.0)
                clock.first_token = arrival + latency if latency > 0 and arrival > 0 else time.time()
            yield out
    finally:
        close = getattr(outputs, "aclose", None)
        if close is not None:  # a closed stream aborts its engine request now, not when collected
            await close()


__all__ = ["REPLICA_CLOCK", "ReplicaClock", "Stamped", "stamp_error", "stamped", "time_first_token"]
