"""A move is served at once where the gateway made it: the resolver takes the moved ref
(``AdapterResolver.remember``; a read in flight across the move is neither joined nor cached), a
removal drops the name's explicit versions too, and the management routes of a real gateway app
(``create_app`` + a ``ColocatedGateway`` over a stand-in engine, a real local S3 server) hand every
move to the replica's resolver and pre-load the new version where the name is resident
(``serving.placement.follow``), while a push written to S3 directly waits for the cache's TTL."""

from __future__ import annotations

import asyncio
import threading
import types
import uuid
from collections import OrderedDict

import httpx
import pytest

from serving.adapters import AdapterRef, AdapterResolver, AdapterStore, Canary
from serving.config import ServingConfig
from serving.placement.follow import IDLE_S, successors
from tests.support.adapter_store import make_adapter
from tests.support.app_env import isolate_app

V1, V2, V3 = "111111111111", "222222222222", "333333333333"


def ref(name: str, version: str, canary: str | None = None, base: str | None = "maze-tiny") -> AdapterRef:
    return AdapterRef(name=name, version=version, base=base, rank=8, pushed_at="",
                      canary=Canary(version=canary, weight=10.0) if canary else None)


class SlowStore:
    """A store whose ``resolve`` reads the ref as it is when called, and whose first read then waits
    for ``release`` (a read in flight while a move lands)."""

    def __init__(self, current: AdapterRef):
        self.spec = types.SimpleNamespace(stale_if_error_s=0.0)
        self.current, self.calls = current, 0
        self.release = threading.Event()

    def resolve(self, name: str) -> AdapterRef:
        seen, self.calls = self.current, self.calls + 1
        if self.calls == 1:
            self.release.wait(10)
        return seen

    def resolve_version(self, name: str, version: str) -> AdapterRef:
        return ref(name, version)


@pytest.mark.parametrize("ttl_s", [60.0, 0.0])
def test_a_remembered_move_is_served_and_a_read_from_before_it_is_not_cached(ttl_s):
    store = SlowStore(ref("a", V1))
    resolver = AdapterResolver(store, ttl_s=ttl_s)

    async def scenario():
        before = asyncio.create_task(resolver.resolve("a"))  # reads V1, then waits
        await asyncio.sleep(0.05)
        store.current = ref("a", V2)
        resolver.remember(store.current)
        after = await asyncio.wait_for(resolver.resolve("a"), 5)  # not joined to the read from before
        store.release.set()
        assert (await before).version == V1  # its callers asked before the move
        assert after.version == V2 and (await resolver.resolve("a")).version == V2

    asyncio.run(scenario())


def test_forgetting_a_removed_name_drops_its_explicit_versions(store, tmp_path):
    first = store.push(make_adapter(tmp_path / "a"), "gone")
    store.push(make_adapter(tmp_path / "b", seed=1), "kept")
    resolver = AdapterResolver(store, ttl_s=60)

    async def scenario():
        await resolver.resolve("gone")
        await resolver.resolve("gone", first.version)
        await resolver.resolve("kept")
        resolver.forget("gone")
        assert set(resolver._cache) == {"kept"} and set(resolver._known) == {"kept"}

    asyncio.run(scenario())


# -- successors: what a replica loads ahead for a moved name ----------------------------------------
def ids(*pairs: tuple[str, str]) -> list[str]:
    return [f"maze-tiny:{n}@{v}" for n, v in pairs]


def test_successors_load_a_resident_names_new_versions_into_a_free_slot():
    resident = ids(("a", V1), ("b", V1))
    kw = {"pinned": set(), "slots": 4, "last_used": {}, "now": 1000.0}
    assert successors(ref("a", V2), "maze-tiny", resident, **kw) == ids(("a", V2))
    assert successors(ref("a", V2, canary=V3), "maze-tiny", resident, **kw) == ids(("a", V2), ("a", V3))
    assert successors(ref("a", V1, canary=V3), "maze-tiny", resident, **kw) == ids(("a", V3))  # V1 is in
    assert successors(ref("c", V2), "maze-tiny", resident, **kw) == []  # not in use here: its request loads it
    assert successors(ref("a", V2, base="other"), "maze-tiny", resident, **kw) == []


def test_successors_push_out_no_other_name_in_use():
    now = 1000.0
    full = ids(("b", V1), ("a", V1), ("c", V1))  # least recently used first
    kw = {"slots": 3, "now": now}
    hot = {m: now - 1 for m in full}
    assert successors(ref("a", V2), "maze-tiny", full, pinned=set(), last_used=hot, **kw) == []
    idle_b = {**hot, full[0]: now - IDLE_S}
    assert successors(ref("a", V2), "maze-tiny", full, pinned=set(), last_used=idle_b, **kw) == ids(("a", V2))
    # The one that would go is the name's own previous version: it makes room for its successor.
    own_first = ids(("a", V1), ("b", V1), ("c", V1))
    assert successors(ref("a", V2), "maze-tiny", own_first, pinned=set(), last_used=hot, **kw) == ids(("a", V2))
    # A pinned adapter never goes; the next in line is judged instead.
    assert successors(ref("a", V2), "maze-tiny", full, pinned={full[0]}, last_used=hot, **kw) == ids(("a", V2))


# -- the management routes of a real app ------------------------------------------------------------
@pytest.fixture
def gateway_cfg(s3_server, monkeypatch):
    isolate_app(monkeypatch)
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://moves-{uuid.uuid4().hex[:8]}/lora", "endpoint_url": s3_server.url,
                        "resolve_ttl_s": 60.0}
    data["extensions"] = []
    cfg = ServingConfig.model_validate(data)
    AdapterStore(cfg.adapters).ensure_bucket()
    return cfg


class Engine:
    """What the pre-load reads of the colocated replica's server: its LRU, pins and loader."""

    def __init__(self):
        self.resident = types.SimpleNamespace(models=OrderedDict(), max_num_models_per_replica=8, last_used={})
        self.pinned_ids: set[str] = set()
        self.base_model_id = "maze-tiny"
        self.loaded: list[str] = []

    async def ensure_resident(self, model_id: str) -> None:
        self.loaded.append(model_id)
        self.resident.models[model_id] = object()


def test_moves_through_the_gateway_are_served_at_once_and_direct_pushes_after_the_ttl(gateway_cfg, tmp_path,
                                                                                       monkeypatch):
    from ray import serve

    from tests.serving.ingress.test_no_oracle import adapter_tar
    from tests.serving.ingress.test_no_oracle import serve as serve_app

    cfg, store = gateway_cfg, AdapterStore(gateway_cfg.adapters)
    folders = [make_adapter(tmp_path / f"v{i}", seed=i) for i in range(3)]
    v0 = store.push(folders[0], "moved", base="maze-tiny").version

    async def scenario():
        app, gw = await serve_app(cfg)
        engine = Engine()
        for attr in ("resident", "pinned_ids", "base_model_id", "ensure_resident"):
            setattr(gw.server, attr, getattr(engine, attr))
        # The routes find the replica's ingress as Ray's bound routes do.
        monkeypatch.setattr(serve, "get_replica_context", lambda: types.SimpleNamespace(servable_object=gw))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
            async def served() -> str:
                resp = await client.post("/v1/chat/completions", json={
                    "model": "maze-tiny:moved", "messages": [{"role": "user", "content": "hi"}]})
                assert resp.status_code == 200, resp.text
                return resp.json()["model"].rpartition("@")[2]

            assert await served() == v0
            engine.resident.models[f"maze-tiny:moved@{v0}"] = object()  # the name is in use here
            direct = store.push(folders[1], "moved", base="maze-tiny", force=True).version
            assert await served() == v0  # written to S3 directly: the cached entry holds until its TTL
            pushed = await client.post("/v1/adapters/moved/versions", params={"force": "true"},
                                       content=adapter_tar(folders[2]))
            assert pushed.status_code == 200, pushed.text
            v2 = pushed.json()["version"]
            assert await served() == v2
            await asyncio.sleep(0)  # the pre-load runs beside the request
            assert engine.loaded == [f"maze-tiny:moved@{v2}"]
            for body, expected in (({"version": v0}, v0), ({"version": direct}, direct)):
                resp = await client.post("/v1/adapters/moved/promote", json=body)
                assert resp.status_code == 200, resp.text
                assert await served() == expected
            assert (await client.post("/v1/adapters/moved/rollback")).status_code == 200
            assert await served() == v0
            assert (await client.delete("/v1/adapters/moved")).status_code == 200
            gone = await client.post("/v1/chat/completions", json={
                "model": "maze-tiny:moved", "messages": [{"role": "user", "content": "hi"}]})
            assert gone.status_code == 404

    asyncio.run(scenario())
