"""A key's limit across two ingress replicas on the local multi-node cluster: the replicas share
their counters through a real Redis server (Debian's redis-server on 127.0.0.1), so the key gets
its limit once, not once per replica; both replicas take part (Serve's own per-replica counters),
and the gateway's usage (read from Redis by either replica) counts every answer.

One cluster for the module (~2-3 min to start on 2 cores).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml

from tests.cluster.conftest import ROOT
from tests.cluster.test_cluster_serving import LLM, per_replica, scrape
from tests.redis_server import RedisServer, available

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="redis-server is not installed")]
KEY, ADMIN = "sk-cluster-shared-0001", "sk-cluster-admin-0001"
LIMIT, WINDOW_S, SENT = 20, 60, 60
KEYS = {"keys": [
    {"name": "shared", "role": "inference", "models": ["maze-tiny"], "secrets": [KEY],
     "limits": {"requests": LIMIT, "window_s": WINDOW_S}},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [ADMIN]},
]}


@pytest.fixture(scope="module")
def limited_cluster(maze_home, tmp_path_factory):
    from benchmarks.stack import cluster_stack_config
    from serving import cluster
    from serving.config import ServingConfig

    if not (ROOT / "models" / "maze-tiny" / "model.safetensors").is_file():
        pytest.fail("models/maze-tiny is missing (it ships in the repo)")
    redis = RedisServer(tmp_path_factory.mktemp("redis")).start()
    # The nodes (and so the ingress replicas) inherit this process's environment.
    os.environ["MAZE_TEST_REDIS_URL"], os.environ["MAZE_TEST_CLUSTER_KEYS"] = redis.url, yaml.safe_dump(KEYS)
    data = cluster_stack_config(ingress_replicas=2).model_dump(mode="json")
    data["auth"] = {"keys_env": "MAZE_TEST_CLUSTER_KEYS",
                    "store": {"kind": "redis", "url_env": "MAZE_TEST_REDIS_URL", "on_error": "closed", "timeout_s": 2.0}}
    cfg = ServingConfig.model_validate(data)
    try:
        state = cluster.up(cfg, workers=2, app=True, progress=lambda msg: print(f"... {msg}", flush=True))
        yield cfg, state
    finally:
        cluster.down()
        redis.stop()
        for name in ("MAZE_TEST_REDIS_URL", "MAZE_TEST_CLUSTER_KEYS"):
            os.environ.pop(name, None)


def ingress_requests(state) -> dict[str, float]:
    """Serve's request counter per replica of the ingress deployment (every deployment but the LLM's)."""
    samples = scrape(state)
    names = {s.labels.get("deployment") for s in samples if s.name == "ray_serve_deployment_request_counter_total"}
    out: dict[str, float] = {}
    for name in names - {LLM, None}:
        out.update(per_replica(samples, "ray_serve_deployment_request_counter_total", deployment=name))
    return out


def settled(state, at_least: float) -> dict[str, float]:
    deadline = time.monotonic() + 90
    while True:
        counts = ingress_requests(state)
        if sum(counts.values()) >= at_least or time.monotonic() > deadline:
            return counts
        time.sleep(3)


def test_one_limit_across_two_ingress_replicas(limited_cluster):
    _, state = limited_cluster
    root = state.base_url.removesuffix("/v1")
    before = settled(state, 0)
    body = {"model": "maze-tiny", "messages": [{"role": "user", "content": "Move?"}], "max_tokens": 1}

    def one(_):
        r = httpx.post(f"{root}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                       timeout=120)
        if r.status_code not in (200, 429):
            return r.status_code, r.text[:300], None
        return r.status_code, r.headers.get("x-ratelimit-remaining-requests"), r.headers.get("retry-after")

    t0 = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(SENT)))
    elapsed = time.monotonic() - t0
    assert elapsed < WINDOW_S / 2, f"the burst took {elapsed:.0f}s: the window must hold all of it"
    ok = [r for r in results if r[0] == 200]
    limited = [r for r in results if r[0] == 429]
    assert len(ok) + len(limited) == SENT, [r for r in results if r[0] not in (200, 429)][:3]
    assert len(ok) == LIMIT, f"{len(ok)} admitted of {SENT} with a limit of {LIMIT} (one store for both replicas)"
    assert sorted(int(r[1]) for r in ok) == list(range(LIMIT))  # one countdown, shared
    assert all(r[2] is not None and 1 <= int(r[2]) <= WINDOW_S for r in limited)
    after = settled(state, sum(before.values()) + SENT)
    per = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    print(f"\n{SENT} requests in {elapsed:.1f}s: {len(ok)} admitted, {len(limited)} 429; per ingress replica {per}")
    assert len(per) == 2 and all(v > 0 for v in per.values()), per  # both replicas answered this key
    usage = httpx.get(f"{root}/v1/usage", params={"since": "10m", "key": "shared"},
                      headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()["data"]
    assert sum(r["requests"] for r in usage) == SENT and sum(r["errors"] for r in usage) == SENT - LIMIT
