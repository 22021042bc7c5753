"""The ingress's cached lookup of an adapter's version (serving.adapters.resolver): only successes
are cached, an unreachable store is a 503, never a missing adapter, and while the real local S3
server is stopped a name read before keeps its version for a bounded time, recovering by itself."""

from __future__ import annotations

import asyncio
import time

import pytest

from serving.adapters import AdapterResolver, AdapterStore
from serving.config import ServingConfig
from serving.errors import (
    AdapterNotFound,
    AdapterStoreUnavailable,
)
from tests.support.adapter_store import S3Server, make_adapter


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


@pytest.fixture
def own_s3(monkeypatch):
    """A local S3 server of this test's own (stopped and restarted on its port: its data goes with it)."""
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    server = S3Server()
    server.start()
    yield server
    server.stop()


def _store(url: str) -> AdapterStore:
    spec = ServingConfig.shipped("embedded").adapters.model_copy(
        update={"endpoint_url": url, "prefix": "s3://resolver-outage/a"})
    store = AdapterStore(spec)
    store.ensure_bucket()
    return store


def test_s3_down_names_read_before_stay_on_their_version_then_recover_by_themselves(own_s3, tmp_path):
    store = _store(own_s3.url)
    assert store.spec.stale_if_error_s == 300  # the default: a few minutes of stale answers
    kept = store.push(make_adapter(tmp_path / "kept"), "kept")
    store.push(make_adapter(tmp_path / "unread", seed=1), "unread")
    resolver = AdapterResolver(store, ttl_s=0.2)  # staleness from the spec
    short = AdapterResolver(store, ttl_s=0.2, stale_if_error_s=1.0)

    async def scenario():
        assert (await resolver.resolve("kept")).version == kept.version
        assert (await short.resolve("kept")).version == kept.version
        own_s3.stop()
        await asyncio.sleep(0.3)  # past the TTL: the next resolution must read S3, which is down
        for _ in range(5):
            assert (await resolver.resolve("kept")).version == kept.version  # the last version read, not a 503
        with pytest.raises(AdapterStoreUnavailable) as never_read:
            await resolver.resolve("unread")
        await asyncio.sleep(1.1)  # past `short`'s staleness bound
        with pytest.raises(AdapterStoreUnavailable) as too_old:
            await short.resolve("kept")
        assert (await resolver.resolve("kept")).version == kept.version  # still within the default bound
        return never_read.value, too_old.value

    never_read, too_old = asyncio.run(scenario())
    for err in (never_read, too_old):
        message = str(err)
        assert err.status_code == 503 and "try again" in message
        assert "127.0.0.1" not in message and str(own_s3.port) not in message and "http" not in message
    assert str(never_read).startswith("adapter 'unread' cannot be resolved now: S3 unreachable (")

    # S3 back (empty: moto keeps its data in memory), with another version of `kept`: picked up
    # without a restart within a second of stale reuse.
    own_s3.start()
    store.ensure_bucket()
    newer = store.push(make_adapter(tmp_path / "kept-2", seed=2), "kept")
    assert newer.version != kept.version

    async def recovery() -> float:
        start = time.monotonic()
        while (await resolver.resolve("kept")).version != newer.version:
            assert time.monotonic() - start < 5, "the resolver did not see S3 come back"
            await asyncio.sleep(0.05)
        return time.monotonic() - start

    assert asyncio.run(recovery()) < 2.0
    assert resolver._down == set()


def test_no_stale_answers_when_staleness_is_zero(own_s3, tmp_path):
    store = _store(own_s3.url)
    store.push(make_adapter(tmp_path / "a"), "zero")
    resolver = AdapterResolver(store, ttl_s=0, stale_if_error_s=0)

    async def scenario():
        await resolver.resolve("zero")
        own_s3.stop()
        with pytest.raises(AdapterStoreUnavailable):
            await resolver.resolve("zero")

    asyncio.run(scenario())
