"""Usage per key and model: requests, errors, prompt and completion tokens.

Recorded by ``serving.auth.middleware`` once a keyed request has ended, three ways:

* Prometheus (``serving.metrics``): ``maze_gateway_key_requests{key, model, status}`` and
  ``maze_gateway_key_tokens{key, model, kind}``, through Ray's metrics agent like the others;
* per-minute counters for ``GET /v1/usage`` (``maze-serve usage``): in this process, or in the
  shared Redis when ``auth.store`` is ``redis`` (every ingress replica adds to the same
  counters), kept ``auth.usage_retention_s``;
* tokens are read from the response's ``usage``: the JSON body, or a stream's final usage chunk.
  Every keyed stream is asked by the gateway for usage in every chunk and at its end
  (:func:`request_stream_usage`), whatever the client asked, and what the client did not ask for is
  taken out again before it reaches it (:class:`UsageScanner`): the client sees what the engine
  would have sent it, and streamed tokens are counted exactly, not estimated. A stream that ends
  early (the client went away) is charged what it had used by its last chunk: its prompt from the
  first chunk on, and its completion tokens so far (one per chunk that carried output where an
  engine sent no chunk usage). A request the client left before its response started (a JSON
  answer, a stream before its first chunk) is charged its prompt, counted by the engine's tokenizer
  (``serving.ingress.prompt_tokens``); the completion tokens an engine made before it stopped are
  not reported by it, so they go uncharged.

With Redis down the counters follow the limiter's back-off (``RedisLimiter.down_for_s``): writes
are kept in this replica without a call to Redis while it is known down, and reads answer 503
``limit_store_unavailable`` (the gate adds ``Retry-After``) rather than a total that misses what
Redis holds.

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
from serving.errors import LimitStoreUnavailable
from serving.metrics import metric

log = logging.getLogger(__name__)

NO_MODEL = "-"
COUNTERS = ("requests", "errors", "prompt_tokens", "completion_tokens")
_USAGE_ONLY = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_PROMPT = re.compile(r'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(r'"completion_tokens"\s*:\s*(\d+)')
# A chunk's usage object (continuous usage stats: one level of nested details at most).
_CHUNK_USAGE = re.compile(rb',"usage":\{(?:[^{}]|\{[^{}]*\})*\}')
_CHOICE_INDEX = re.compile(rb'"index":(\d+)')
# Output a chunk carries: a non-empty text, content, reasoning or tool-call argument string.
_OUTPUT = re.compile(rb'"(?:text|content|reasoning_content|reasoning|arguments)":"(?!")')
USAGE_UNAVAILABLE = "usage is kept in the rate-limit store, which cannot be reached; try again shortly"


def usage_of(text: str) -> tuple[int, int] | None:
    """(prompt, completion) tokens from a response body or stream chunk carrying ``usage``, else None."""
    prompt, completion = _PROMPT.search(text), _COMPLETION.search(text)
    if prompt is None or completion is None:
        return None
    return int(prompt.group(1)), int(completion.group(1))


def record_metrics(key: str, model: str, status: int, usage: tuple[int, int] | None) -> None:
    """The Prometheus side of one request."""
    metric("key_requests").inc(tags={"key": key, "model": model, "status": str(status)})
    for kind, n in zip(("prompt", "completion"), usage or ()):
        if n > 0:  # Ray's counters refuse 0 (a stream cut off early may know no prompt tokens)
            metric("key_tokens").inc(n, tags={"key": key, "model": model, "kind": kind})


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
        if self._limiter.down_for_s() > 0:  # known down: no call per request, kept here meanwhile
            await self.local.add(key, model, counts)
            return
        minute = int(self._clock() // 60)
        try:
            pipe = self._limiter.client().pipeline(transaction=False)
            for counter, n in counts.items():
                pipe.hincrby(self._hash(minute), f"{key}\t{model}\t{counter}", n)
            pipe.expire(self._hash(minute), int(self.spec.usage_retention_s) + 60)
            await pipe.execute()
        except Exception as exc:  # noqa: BLE001 - usage must never fail a request; keep it here instead
            self._limiter.failed("usage", exc)  # logs it; the next writes skip Redis for the back-off
            await self.local.add(key, model, counts)

    async def totals(self, since_s: float, key: str | None = None) -> list[dict]:
        """Every replica's counters from Redis, plus what this one kept while Redis was down.

        Raises:
            LimitStoreUnavailable: Redis is down (known, or this read failed): a total without it
                would be missing what every replica wrote there.
        """
        if self._limiter.down_for_s() > 0:
            raise LimitStoreUnavailable(USAGE_UNAVAILABLE)
        now_minute = int(self._clock() // 60)
        minutes = range(int((self._clock() - since_s) // 60), now_minute + 1)
        try:
            pipe = self._limiter.client().pipeline(transaction=False)
            for minute in minutes:
                pipe.hgetall(self._hash(minute))
            buckets = await pipe.execute()
        except Exception as exc:  # any store failure is an outage to the gateway
            self._limiter.failed("usage_read", exc)
            raise LimitStoreUnavailable(USAGE_UNAVAILABLE) from None
        out: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
        for bucket in buckets:
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
def request_stream_usage(body) -> tuple[bool, bool] | None:
    """Ask the engine for a stream's usage in every chunk (continuous usage stats) and at its end,
    whatever the client asked, so a stream cut off at any point is charged what it used: its prompt
    from the first chunk, its completion tokens as they stream. Returns what the client did not ask
    for and must not see, ``(every chunk's usage, the usage-only last chunk)`` (:class:`UsageScanner`
    ``hide_chunks``, ``hide_final``); None for a request that is no stream (nothing changed)."""
    if not getattr(body, "stream", False):
        return None
    from serving.compat import StreamOptions  # the engine's own type (its module differs by vLLM version)

    asked = getattr(body, "stream_options", None)
    final = bool(getattr(asked, "include_usage", False))
    # The engine sends chunk usage only with both flags (vLLM's should_include_usage): so does the client see it.
    chunks = final and bool(getattr(asked, "continuous_usage_stats", False))
    if not chunks:
        body.stream_options = StreamOptions(include_usage=True, continuous_usage_stats=True)
    return not chunks, not final


class UsageScanner:
    """Reads ``usage`` from a response's body messages as they pass, and what a stream has used so
    far; takes the usage the gateway asked for and the client did not out of the bytes passed on
    (``hide_chunks``: the usage of every chunk but the last; ``hide_final``: the usage-only last chunk)."""

    def __init__(self) -> None:
        self.usage: tuple[int, int] | None = None  # the response's own, complete usage
        self._prompt = 0  # from the chunks' usage (continuous stats)
        self._completion: dict[bytes, int] = {}  # choice index -> its completion tokens so far
        self._output_chunks = 0  # chunk choices that carried output: at least one token each

    def feed(self, body: bytes, hide_chunks: bool = False, hide_final: bool = False) -> bytes:
        if not body.startswith(b"data:"):  # a JSON body: its usage is the answer's
            if b'"usage"' in body:
                self.usage = usage_of(body.decode("utf-8", "ignore")) or self.usage
            return body
        events = body.split(b"\n\n")
        kept = [e for e in (self._event(e, hide_chunks, hide_final) for e in events) if e is not None]
        return body if kept == events else b"\n\n".join(kept)

    def _event(self, event: bytes, hide_chunks: bool, hide_final: bool) -> bytes | None:
        """One server-sent event, as passed on (None: taken out)."""
        if b'"usage"' not in event:
            self._output_chunks += len(_OUTPUT.findall(event))
            return event
        usage = usage_of(event.decode("utf-8", "ignore"))
        if _USAGE_ONLY.search(event):  # the stream's last chunk: its usage is the whole stream's
            self.usage = usage or self.usage
            return None if hide_final else event
        self._output_chunks += len(_OUTPUT.findall(event))
        if usage is not None:
            index = _CHOICE_INDEX.search(event)
            self._prompt = usage[0]
            self._completion[index.group(1) if index else b"0"] = usage[1]
        return _CHUNK_USAGE.sub(b"", event, count=1) if hide_chunks else event

    def used(self, prompt_tokens: int | None = None) -> tuple[int, int] | None:
        """(prompt, completion) tokens the response used: its own usage once it has ended; for a
        stream cut off before that, what its chunks said, else one completion token per chunk that
        carried output; for a request left before any of that, ``prompt_tokens`` (the prompt counted
        by the engine's tokenizer, when known) and no completion; None when nothing was used."""
        if self.usage is not None:
            return self.usage
        if self._completion:
            return self._prompt, sum(self._completion.values())
        if self._output_chunks:
            return prompt_tokens or 0, self._output_chunks
        return (prompt_tokens, 0) if prompt_tokens else None


__all__ = ["COUNTERS", "NO_MODEL", "LocalUsage", "RedisUsage", "UsageScanner", "increments", "make_usage", "usage_of",
           "record_metrics", "request_stream_usage"]
