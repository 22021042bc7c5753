"""The ingress's cached lookup of an adapter's version (serving.adapters.resolver): only successes
are cached, and an unreachable store is a 503, never a missing adapter."""

from __future__ import annotations

import asyncio

import pytest

from serving.adapters import AdapterResolver, AdapterStore
from serving.config import ServingConfig
from serving.errors import (
    AdapterNotFound,
    AdapterStoreUnavailable,
)
from tests.support.adapter_store import make_adapter


def test_resolver_caches_only_successes(s3_server, tmp_path):
    spec = ServingConfig.shipped("embedded").adapters.model_copy(
        update={"endpoint_url": s3_server.url, "prefix": "s3://resolver-test/a"})
    store = AdapterStore(spec)
    store.ensure_bucket()
    resolver = AdapterResolver(store, ttl_s=60)

    async def scenario():
        with pytest.raises(AdapterNotFound):
            await resolver.resolve("later")
        store.push(make_adapter(tmp_path / "a"), "later")
        first = await resolver.resolve("later")  # the miss was not remembered
        store.push(make_adapter(tmp_path / "b", seed=1), "later", force=True)
        assert await resolver.resolve("later") == first  # cached for ttl_s
        resolver.forget("later")
        assert (await resolver.resolve("later")).version != first.version
        refs = await asyncio.gather(*(resolver.resolve("later") for _ in range(10)))
        assert len({r.version for r in refs}) == 1

    asyncio.run(scenario())


def test_resolver_store_down_is_503_not_missing():
    spec = ServingConfig.shipped("embedded").adapters.model_copy(update={"endpoint_url": "http://127.0.0.1:9"})
    resolver = AdapterResolver(AdapterStore(spec), ttl_s=60)
    with pytest.raises(AdapterStoreUnavailable):
        asyncio.run(resolver.resolve("x"))
    assert resolver._cache == {}
