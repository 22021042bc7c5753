"""Usage per key and model: requests, errors, prompt and completion tokens.

Recorded by ``serving.auth.middleware`` once a keyed request has ended, three ways:

* Prometheus (``serving.metrics``): ``maze_gateway_key_requests{key, model, status}`` and
  ``maze_gateway_key_tokens{key, model, kind}``, through Ray's metrics agent like the others;
* per-minute counters for ``GET /v1/usage`` (``maze-serve usage``): in this process, or in the
  shared Redis when ``auth.store`` is ``redis`` (every ingress replica adds to the same
  counters), kept ``auth.usage_retention_s``;
* tokens are read from the response's ``usage``: the JSON body, or a stream's final usage chunk.
  A stream whose client did not ask for usage (``stream_options.include_usage``) is asked for it
  by the gateway (:func:`request_stream_usage`) and the usage chunk is taken out again before it
  reaches the client (:class:`UsageScanner`), so streamed tokens are counted exactly, not estimated.

The ``model`` label is the model the gateway resolved (``base`` or ``base:name``; versions stay in
the per-adapter metrics), ``-`` for requests that named none it serves (a 404, a 429, the model
list): label values are bounded by what is published, never by what a client types.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from dataclasses import dataclass

from serving.config import AuthSpec
from serving.metrics import metric

log = logging.getLogger(__name__)

NO_MODEL = "-"
COUNTERS = ("requests", "errors", "prompt_tokens", "completion_tokens")
_USAGE_ONLY = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_PROMPT = re.compile(r'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(r'"completion_tokens"\s*:\s*(\d+)')


def usage_of(text: str) -> tuple[int, int] | None:
    """(prompt, completion) tokens from a response body or stream chunk carrying ``usage``, else None."""
    prompt, completion = _PROMPT.search(text), _COMPLETION.search(text)
    if prompt is None or completion is None:
        return None
    return int(prompt.group(1)), int(completion.group(1))


def record_metrics(key: str, model: str, status: int, usage: tuple[int, int] | None) -> None:
    """The Prometheus side of one request."""
    metric("key_requests").inc(tags={"key": key, "model": model, "status": str(status)})
    if usage is not None:
        metric("key_tokens").inc(usage[0], tags={"key": key, "model": model, "kind": "prompt"})
        metric("key_tokens").inc(usage[1], tags={"key": key, "model": model, "kind": "completion"})


def increments(status: int, usage: tuple[int, int] | None) -> dict[str, int]:
    out = {"requests": 1}
    if status >= 400:
        out["errors"] = 1
    if usage is not None:
        out["prompt_tokens"], out["completion_tokens"] = usage
    return out


@dataclass(frozen=True)
class UsageRow:
    key: str
    model: str
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def rows_of(totals: dict[tuple[str, str], dict[str, int]]) -> list[dict]:
    return [UsageRow(key=k, model=m, **{c: v.get(c, 0) for c in COUNTERS}).__dict__
            for (k, m), v in sorted(totals.items())]


class LocalUsage:
    """Per-minute usage counters in this process."""

    def __init__(self, retention_s: float, clock=time.time):
        self.retention_s, self._clock = retention_s, clock
        self._minutes: dict[int, dict[tuple[str, str], collections.Counter]] = {}
        self._lock = threading.Lock()

    async def add(self, key: str, model: str, counts: dict[str, int]) -> None:
        minute = int(self._clock() // 60)
        with self._lock:
            bucket = self._minutes.setdefault(minute, collections.defaultdict(collections.Counter))
            bucket[(key, model)].update(counts)
            oldest = minute - int(self.retention_s // 60)
            for m in [m for m in self._minutes if m < oldest]:
                del self._minutes[m]

    async def totals(self, since_s: float, key: str | None = None) -> list[dict]:
        first = int((self._clock() - since_s) // 60)
        out: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
        with self._lock:
            for minute, bucket in self._minutes.items():
                if minute >= first:
                    for (k, m), counts in bucket.items():
                        if key is None or k == key:
                            out[(k, m)].update(counts)
        return rows_of(out)


class RedisUsage:
    """Per-minute usage counters in the shared Redis: one hash per minute, field ``key\\tmodel\\tcounter``."""

    def __init__(self, spec: AuthSpec, limiter, clock=time.time):
        self.spec, self._limiter, self._clock = spec, limiter, clock
        self.local = LocalUsage(spec.usage_retention_s, clock)

    def _hash(self, minute: int) -> str:
        return f"{self.spec.store.prefix}usage:{minute}"

    async def add(self, key: str, model: str, counts: dict[str, int]) -> None:
        minute = int(self._clock() // 60)
        try:
            pipe = self._limiter._redis().pipeline(transaction=False)
            for counter, n in counts.items():
                pipe.hincrby(self._hash(minute), f"{key}\t{model}\t{counter}", n)
            pipe.expire(self._hash(minute), int(self.spec.usage_retention_s) + 60)
            await pipe.execute()
        except Exception as exc:  # noqa: BLE001 - usage must never fail a request; keep it here instead
            log.warning("usage not written to the store (%s); kept in this replica", type(exc).__name__)
            metric("limit_store_errors").inc(tags={"action": "usage"})
            await self.local.add(key, model, counts)

    async def totals(self, since_s: float, key: str | None = None) -> list[dict]:
        now_minute = int(self._clock() // 60)
        minutes = range(int((self._clock() - since_s) // 60), now_minute + 1)
        pipe = self._limiter._redis().pipeline(transaction=False)
        for minute in minutes:
            pipe.hgetall(self._hash(minute))
        out: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
        for bucket in await pipe.execute():
            for field_, n in bucket.items():
                k, m, counter = (field_.decode() if isinstance(field_, bytes) else field_).split("\t")
                if key is None or k == key:
                    out[(k, m)][counter] += int(n)
        # What a replica kept while the store was down is added to what the store holds.
        for row in await self.local.totals(since_s, key):
            out[(row["key"], row["model"])].update({c: row[c] for c in COUNTERS})
        return rows_of(out)


def make_usage(spec: AuthSpec, limiter):
    if spec.store.kind == "redis":
        return RedisUsage(spec, limiter)
    return LocalUsage(spec.usage_retention_s)


# -- tokens from a response --------------------------------------------------------------------------
def request_stream_usage(body) -> bool:
    """Ask the engine for a stream's usage chunk when the client did not; True when asked (the
    chunk must then be taken out of the stream, :class:`UsageScanner` ``strip``)."""
    if not getattr(body, "stream", False):
        return False
    options = getattr(body, "stream_options", None)
    if options is not None and getattr(options, "include_usage", False):
        return False
    from vllm.entrypoints.generate.base.protocol import StreamOptions  # the engine's own type

    body.stream_options = StreamOptions(include_usage=True,
                                        continuous_usage_stats=getattr(options, "continuous_usage_stats", False))
    return True


class UsageScanner:
    """Reads ``usage`` from a response's body messages; with ``strip``, removes a stream's
    usage-only chunk (the one the gateway asked for) from the bytes passed on."""

    def __init__(self) -> None:
        self.usage: tuple[int, int] | None = None

    def feed(self, body: bytes, strip: bool) -> bytes:
        if b'"usage"' not in body:
            return body
        self.usage = usage_of(body.decode("utf-8", "ignore")) or self.usage
        if not strip:
            return body
        events = body.split(b"\n\n")
        kept = [e for e in events if not (b'"usage"' in e and _USAGE_ONLY.search(e))]
        return b"\n\n".join(kept)


__all__ = ["COUNTERS", "NO_MODEL", "LocalUsage", "RedisUsage", "UsageScanner", "increments", "make_usage", "usage_of",
           "record_metrics", "request_stream_usage"]
