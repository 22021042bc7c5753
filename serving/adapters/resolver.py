"""Adapter name -> published version, cached briefly, one S3 read in flight per name.

The gateway forwards ``base:name`` as ``base:name@version``: a replica's adapter cache is then
keyed by content, so a re-pushed adapter is served fresh and a half-uploaded one (no ref yet) is
invisible. Only successes are cached, for ``resolve_ttl_s`` (so a request does not pay an S3
GET); "not found" and S3 errors are never remembered, so an adapter pushed a moment ago, or S3
coming back, takes effect on the next request.

An explicit ``name@version`` (any version ever pushed, current or not) is checked against the
store the same way and cached under that key, so a pinned client (an evaluation that must keep
the version it started with) is served that version whatever the alias points at.
"""

from __future__ import annotations

import asyncio
import time

from serving.adapters.store import AdapterRef, AdapterStore
from serving.errors import AdapterNotFound, AdapterStoreUnavailable
from serving.metrics import metric


class AdapterResolver:
    """Async, cached view of :meth:`AdapterStore.resolve` (boto3 runs in a worker thread)."""

    def __init__(self, store: AdapterStore, ttl_s: float):
        self.store = store
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, AdapterRef]] = {}
        self._inflight: dict[str, asyncio.Task[AdapterRef]] = {}

    async def resolve(self, name: str, version: str | None = None) -> AdapterRef:
        """The current version of ``name``, or its explicit ``version`` when given.

        Raises:
            BadAdapterName (400), AdapterNotFound (404), AdapterStoreUnavailable (503).
        """
        if version is not None:
            name = f"{name}@{version}"
        hit = self._cache.get(name)
        if hit is not None and hit[0] > time.monotonic():
            metric("resolutions").inc(tags={"result": "hit"})
            return hit[1]
        task = self._inflight.get(name)
        if task is None:
            task = asyncio.create_task(self._fetch(name))
            self._inflight[name] = task
            task.add_done_callback(lambda _: self._inflight.pop(name, None))
        # shield: one caller giving up (client disconnect) must not cancel the others' read.
        return await asyncio.shield(task)

    async def _fetch(self, name: str) -> AdapterRef:
        start = time.perf_counter()
        try:
            if "@" in name:
                ref = await asyncio.to_thread(self.store.resolve_version, *name.split("@", 1))
            else:
                ref = await asyncio.to_thread(self.store.resolve, name)
        except AdapterNotFound:
            metric("resolutions").inc(tags={"result": "not_found"})
            raise
        except AdapterStoreUnavailable:
            metric("resolutions").inc(tags={"result": "unavailable"})
            raise
        metric("resolve_latency").observe(time.perf_counter() - start)
        metric("resolutions").inc(tags={"result": "miss"})
        if self.ttl_s > 0:
            self._cache[name] = (time.monotonic() + self.ttl_s, ref)
        return ref

    def forget(self, name: str) -> None:
        """Drop a cached resolution (e.g. after its version failed to load)."""
        self._cache.pop(name, None)
