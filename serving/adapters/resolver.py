"""Adapter name -> published version, cached briefly, one S3 read in flight per name.

The gateway forwards ``base:name`` as ``base:name@version``: a replica's adapter cache is then
keyed by content, so a re-pushed adapter is served fresh and a half-uploaded one (no ref yet) is
invisible. Successes are cached for ``resolve_ttl_s`` (so a request does not pay an S3 GET);
"not found" is never remembered, so an adapter pushed a moment ago takes effect on the next request.

A move of a name already cached (a push over it, a promote, a rollback, a canary) is seen when its
entry expires, up to ``resolve_ttl_s`` later, unless the move went through this gateway: its
management routes hand the moved ref to :meth:`AdapterResolver.remember` (and a removal to
:meth:`~AdapterResolver.forget`), and the next request is served by the new version. A read of the
name that was in flight when such a move landed (it may have read the ref before the move) answers
its own callers and is not cached.

While S3 cannot be reached, a name read successfully within ``stale_if_error_s`` keeps resolving to
the version last read (a stale answer), so the adapters a replica already holds keep serving through
a short outage; the store is asked again at most once a second per name, and the first successful
read ends the outage. A name never read, or read longer ago than that, answers 503
(:class:`~serving.errors.AdapterStoreUnavailable`) with a message that names no endpoint.

An explicit ``name@version`` (any version ever pushed, current or not) is checked against the
store the same way and cached under that key, so a pinned client (an evaluation that must keep
the version it started with) is served that version whatever the alias points at.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from serving.adapters.model_id import ModelId
from serving.adapters.store import AdapterRef, AdapterStore
from serving.errors import AdapterNotFound, AdapterStoreUnavailable
from serving.metrics import metric

log = logging.getLogger(__name__)

#: While S3 is down, a stale answer is reused this long before the store is asked again: requests do
#: not each wait for a read that fails, and recovery is still seen within a second.
STALE_RETRY_S = 1.0


@dataclass(frozen=True)
class _Cached:
    until: float  # monotonic time the answer may be reused until
    ref: AdapterRef
    stale: bool = False  # reused because S3 could not be read


class AdapterResolver:
    """Async, cached view of :meth:`AdapterStore.resolve` (boto3 runs in a worker thread)."""

    def __init__(self, store: AdapterStore, ttl_s: float, stale_if_error_s: float | None = None):
        self.store = store
        self.ttl_s = ttl_s
        self.stale_s = store.spec.stale_if_error_s if stale_if_error_s is None else stale_if_error_s
        self._cache: dict[str, _Cached] = {}
        self._known: dict[str, tuple[float, AdapterRef]] = {}  # last successful read: (monotonic time, ref)
        self._down: set[str] = set()  # names answered stale since S3 failed (logged once per outage)
        self._store_down = False  # the last read failed (the outage is logged once, with its cause)
        self._inflight: dict[str, asyncio.Task[AdapterRef]] = {}
        # plain name -> moves remembered or forgotten: a read begun before the latest is not cached
        self._moves: dict[str, int] = {}

    async def resolve(self, name: str, version: str | None = None) -> AdapterRef:
        """The current version of ``name``, or its explicit ``version`` when given.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503: S3 unreachable
            and no version read within ``stale_if_error_s``).
        """
        name = ModelId(None, name, version).adapter_part
        hit = self._cache.get(name)
        if hit is not None and hit.until > time.monotonic():
            metric("resolutions").inc(tags={"result": "stale" if hit.stale else "hit"})
            return hit.ref
        task = self._inflight.get(name)
        if task is None:
            task = asyncio.create_task(self._fetch(name))
            self._inflight[name] = task
            # Only its own entry: a move may have replaced it with a read started after the move.
            task.add_done_callback(lambda done: self._inflight.pop(name, None) if self._inflight.get(name) is done
                                   else None)
        # shield: one caller giving up (client disconnect) must not cancel the others' read.
        return await asyncio.shield(task)

    async def _fetch(self, name: str) -> AdapterRef:
        start = time.perf_counter()
        moves = self._moves.get(_plain(name), 0)
        try:
            key = ModelId.adapter(name, check=False)
            if key.version is not None:
                ref = await asyncio.to_thread(self.store.resolve_version, key.name, key.version)
            else:
                ref = await asyncio.to_thread(self.store.resolve, name)
        except AdapterNotFound:
            metric("resolutions").inc(tags={"result": "not_found"})
            raise
        except AdapterStoreUnavailable as exc:
            if not self._store_down:
                self._store_down = True  # the cause names the endpoint: the log may, the answer may not
                log.warning("adapter store unreachable: %s (%s)", exc, exc.__cause__ or "no detail")
            return self._stale_or_raise(name, exc)
        metric("resolve_latency").observe(time.perf_counter() - start)
        metric("resolutions").inc(tags={"result": "miss"})
        if self._store_down:
            self._store_down = False
            log.warning("adapter store readable again")
        if self._moves.get(_plain(name), 0) == moves:
            self._keep(name, ref)
        return ref

    def _keep(self, name: str, ref: AdapterRef) -> None:
        now = time.monotonic()
        self._down.discard(name)
        if self.stale_s > 0:
            self._known[name] = (now, ref)
        if self.ttl_s > 0:
            self._cache[name] = _Cached(now + self.ttl_s, ref)

    def _stale_or_raise(self, name: str, exc: AdapterStoreUnavailable) -> AdapterRef:
        """The version last read for ``name`` while it is younger than ``stale_if_error_s``; else a 503."""
        now = time.monotonic()
        known = self._known.get(name)
        if known is None or now - known[0] > self.stale_s:
            metric("resolutions").inc(tags={"result": "unavailable"})
            self._down.discard(name)
            raise AdapterStoreUnavailable(f"adapter {name!r} cannot be resolved now: {exc}") from None
        read_at, ref = known
        metric("resolutions").inc(tags={"result": "stale"})
        if name not in self._down:
            self._down.add(name)
            log.warning("%s keeps resolving to %s while the adapter store is unreachable (read %.0fs ago; up to %.0fs)",
                        name, ref.version, now - read_at, self.stale_s)
        self._cache[name] = _Cached(min(now + STALE_RETRY_S, read_at + self.stale_s), ref, stale=True)
        return ref

    def remember(self, ref: AdapterRef) -> None:
        """Resolve ``ref.name`` to ``ref`` from now on, as if just read: the ref a move made through this
        gateway left (push, promote, rollback, canary, abort), so the move is served from the next
        request instead of when the cached entry expires."""
        self._moved(ref.name)
        self._keep(ref.name, ref)

    def forget(self, name: str) -> None:
        """Drop a cached resolution, stale ones included (e.g. after its version failed to load); for a
        plain name (its removal), its explicit ``name@version`` entries too."""
        self._moved(_plain(name))
        keys = [name] if ModelId.adapter(name, check=False).version is not None else [
            k for k in {*self._cache, *self._known} if _plain(k) == name]
        for key in keys:
            self._cache.pop(key, None)
            self._known.pop(key, None)

    def _moved(self, name: str) -> None:
        """A move of ``name`` landed: reads in flight may predate it, so they are neither joined nor cached."""
        self._moves[name] = self._moves.get(name, 0) + 1
        for key in [k for k in self._inflight if _plain(k) == name]:
            del self._inflight[key]


def _plain(key: str) -> str:
    """The adapter name of a cache key (``name`` or ``name@version``)."""
    return ModelId.adapter(key, check=False).name
