"""The production layout on a real multi-node Ray cluster (head + 2 worker nodes, each on its own
loopback address): two LLM replicas, one per worker node; a hot adapter spreads over both while a
lightly used one stays on one; base and adapter requests; a key's limit across the two ingress
replicas; an evaluation that loses a worker node (SIGKILL) mid-run and still
completes; readiness through the loss and return; and all of it with traffic on 127.0.0.0/8 only
(every connection of the cluster's processes sampled throughout).

One cluster for the module (~1-2 min to start on 2 cores), auth on: the tests call with an admin key
(no limits), the limit test with a limited one; two ingress replicas share the key limits through a
real Redis server (Debian's redis-server on 127.0.0.1). The evals run 32 mazes at concurrency 16-32.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import threading
import time
from collections import defaultdict

import httpx
import openai
import pytest
import yaml

from evaluation import EvalConfig, Store, evaluate
from tests.cluster.conftest import ROOT
from tests.support.net_watch import LoopbackWatch
from tests.support.redis_server import RedisServer, available
from tests.support.gateway_stack import image_messages

pytestmark = pytest.mark.slow
LLM = "GatewayLLMServer:maze-tiny"
KEY, ADMIN = "sk-cluster-shared-0001", "sk-cluster-admin-0001"
LIMIT, WINDOW_S, SENT = 20, 60, 60
KEYS = {"keys": [
    {"name": "shared", "role": "inference", "models": ["maze-tiny"], "secrets": [KEY],
     "limits": {"requests": LIMIT, "window_s": WINDOW_S}},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [ADMIN]},
]}


@pytest.fixture(scope="module")
def loopback(maze_home):
    """Samples the connections of this module's cluster (and of this process) from before it starts."""
    from serving.local import cluster

    def roots():
        st = cluster.read_state()
        return [] if st is None else [st.head_pid, st.moto_pid, *(w.pid for w in st.workers)]

    watch = LoopbackWatch(roots).start()
    yield watch
    watch.stop()


@pytest.fixture(scope="module")
def cluster_app(maze_home, loopback, tmp_path_factory):
    """The shipped cluster config with two ingress replicas and KEYS, their limits shared through
    Redis (counted per replica when redis-server is missing: the limit test skips then)."""
    from benchmarks.support.stack import cluster_stack_config
    from serving.config import ServingConfig
    from serving.local import cluster

    if not (ROOT / "models" / "maze-tiny" / "model.safetensors").is_file():
        pytest.fail("models/maze-tiny is missing (it ships in the repo)")
    redis = RedisServer(tmp_path_factory.mktemp("redis")).start() if available() else None
    # The nodes (and so the ingress replicas) inherit this process's environment.
    os.environ["MAZE_TEST_CLUSTER_KEYS"] = yaml.safe_dump(KEYS)
    data = cluster_stack_config(ingress_replicas=2).model_dump(mode="json")
    data["auth"] = {"keys_env": "MAZE_TEST_CLUSTER_KEYS"}
    if redis:
        os.environ["MAZE_TEST_REDIS_URL"] = redis.url
        data["auth"]["store"] = {"kind": "redis", "url_env": "MAZE_TEST_REDIS_URL", "on_error": "closed",
                                 "timeout_s": 10.0}  # a busy CI machine is not an outage
    cfg = ServingConfig.model_validate(data)
    try:
        state = cluster.up(cfg, workers=2, app=True, progress=lambda msg: print(f"... {msg}", flush=True))
        yield cfg, state
    finally:
        cluster.down()
        if redis:
            redis.stop()
        for name in ("MAZE_TEST_REDIS_URL", "MAZE_TEST_CLUSTER_KEYS"):
            os.environ.pop(name, None)


def scrape(state) -> list:
    """Every sample of every node's metrics endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    from serving.local.cluster import metrics_urls

    samples = []
    for url in metrics_urls(state):
        try:
            text = httpx.get(url, timeout=10).text
        except httpx.HTTPError:
            continue  # a node that is down exports nothing
        samples += [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    return samples


def per_replica(samples, name: str, **labels) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for s in samples:
        if s.name == name and s.labels.get("replica") and all(s.labels.get(k) == v for k, v in labels.items()):
            out[s.labels["replica"]] += s.value
    return dict(out)


def ready(state) -> tuple[int, dict]:
    try:
        # /ready shows replicas and nodes to an admin key only (a probe without one sees ready/not_ready).
        r = httpx.get(state.base_url.removesuffix("/v1") + "/ready", timeout=30,
                      headers={"Authorization": f"Bearer {ADMIN}"})
        return r.status_code, r.json()
    except (httpx.HTTPError, ValueError) as exc:
        return 0, {"error": str(exc)}


def test_two_replicas_one_per_worker_node(cluster_app):
    _, state = cluster_app
    code, body = ready(state)
    assert code == 200 and body["status"] == "ready", body
    replicas = body["replicas"][LLM]
    assert replicas["running"] == replicas["target"] == 2
    assert len(replicas["nodes"]) == 2  # the custom resource placed one replica on each worker node


def adapter_loads(samples) -> dict[str, float]:
    """Successful loads of maze-grpo per replica process (the gateway's counter, by WorkerId)."""
    out: dict[str, float] = defaultdict(float)
    for s in samples:
        if (s.name == "ray_maze_gateway_adapter_loads_total" and s.labels.get("adapter") == "maze-grpo"
                and s.labels.get("result") == "ok"):
            out[s.labels["WorkerId"]] += s.value
    return dict(out)


CHAT = "/v1/chat/completions"  # the route label of chat requests (/ready's health probes carry "/ready")


def settled_requests(state, expected_total: float) -> dict[str, float]:
    """Serve's per-replica request counters of the LLM deployment for chat requests, once they add up
    to ``expected_total`` (each node's metrics agent exports on its own schedule)."""
    deadline = time.monotonic() + 90
    while True:
        counts = per_replica(scrape(state), "ray_serve_deployment_request_counter_total", deployment=LLM, route=CHAT)
        if sum(counts.values()) >= expected_total or time.monotonic() > deadline:
            return counts
        time.sleep(3)


# All at once: more in flight than the routing policy's spread threshold keeps on one replica.
SPREAD_SEEDS = 32


def test_hot_adapter_spreads_over_replicas_a_cold_one_stays(cluster_app, tmp_path):
    """After a quick look at concurrency 1 (the adapter loaded once, on one replica), a run of 32
    mazes at once spreads the adapter's requests over both replicas (Serve's own per-replica
    counters), with the single-node score per seed."""
    _, state = cluster_app
    db = str(tmp_path / "eval.sqlite")
    quick = evaluate(EvalConfig(endpoint=state.base_url, api_key=ADMIN, adapter="maze-grpo", seeds=[0, 1],
                                 concurrency=1, db=db))
    assert quick.status == "complete"
    quick_requests = sum(r["turns"] for r in Store(db).episode_rows(quick.run_id))
    before = settled_requests(state, quick_requests)
    loads = adapter_loads(scrape(state))
    routes = {(s.labels.get("replica"), s.labels.get("route")): s.value for s in scrape(state)
              if s.name == "ray_serve_deployment_request_counter_total" and s.labels.get("deployment") == LLM}
    print(f"\nquick look: {quick_requests} requests {before}, loads {loads}; by replica and route {routes}")
    assert sum(loads.values()) == 1 and sum(1 for v in before.values() if v > 0) == 1, (loads, before)  # one load

    full = evaluate(EvalConfig(endpoint=state.base_url, api_key=ADMIN, adapter="maze-grpo", seeds=f"0-{SPREAD_SEEDS - 1}",
                               concurrency=SPREAD_SEEDS, db=db))
    assert full.status == "complete" and full.summary.n == SPREAD_SEEDS and full.summary.errors == 0
    sent = sum(r["turns"] for r in Store(db).episode_rows(full.run_id))
    after = settled_requests(state, quick_requests + sent)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    share = max(delta.values()) / sum(delta.values())
    loads = adapter_loads(scrape(state))
    print(f"full run: {sent} adapter requests, per replica {delta} (largest share {share:.0%}), "
          f"loads {loads}, solved {full.summary.solved}/{SPREAD_SEEDS}")
    # Spread: the adapter loaded once on each replica, and the second one carries a real part of the
    # run. Ray's own router keeps all 32 episodes on the first holder (a share of 1.0); with the
    # spread each replica takes requests as fast as it serves them, and two engines sharing two
    # cores with other work can run at 2:1 (a share of 0.67 seen), so the bound is 0.8.
    assert sorted(loads.values()) == [1.0, 1.0]
    assert len(delta) == 2 and share <= 0.8, delta
    outcomes = {r["seed"]: bool(r["success"]) for r in Store(db).episode_rows(full.run_id)}
    reference = gateway_outcomes("maze-grpo")
    assert sorted(outcomes) == list(range(SPREAD_SEEDS))
    assert [s for s in outcomes if outcomes[s] != reference[s]] == []


def test_base_and_adapter_requests_use_both_replicas(cluster_app):
    _, state = cluster_app
    client = openai.OpenAI(base_url=state.base_url, api_key=ADMIN, max_retries=0, timeout=300)
    models = ["maze-tiny", "maze-tiny:maze-grpo"] * 12

    def ask(model: str) -> str:
        resp = client.chat.completions.create(model=model, messages=image_messages(), max_tokens=4, temperature=0)
        return resp.model

    with cf.ThreadPoolExecutor(24) as pool:
        served = list(pool.map(ask, models))
    assert served.count("maze-tiny") == 12
    assert sum(m.startswith("maze-tiny:maze-grpo@") for m in served) == 12

    # Ray's metrics agents export every few seconds: wait until the counts of both replicas show.
    deadline = time.monotonic() + 90
    while True:
        samples = scrape(state)
        requests = per_replica(samples, "ray_serve_deployment_request_counter_total", deployment=LLM)
        # Serve's gauge names the replica holding the adapter; the gateway's load counter (recorded in
        # the replica's process) carries that process's WorkerId: the two must be the same processes.
        held = {s.labels["WorkerId"]: s.labels["replica"] for s in samples
                if s.name == "ray_serve_registered_multiplexed_model_id" and s.value == 1
                and s.labels.get("model_id", "").startswith("maze-tiny:maze-grpo@")}
        loaded = {s.labels["WorkerId"] for s in samples if s.name == "ray_maze_gateway_adapter_loads_total"
                  and s.labels.get("adapter") == "maze-grpo" and s.labels.get("result") == "ok" and s.value >= 1}
        # Every request must be counted too: the two replicas' agents export at different moments.
        if (len(requests) == 2 and all(v > 0 for v in requests.values()) and sum(requests.values()) >= 24
                and held and loaded >= set(held)) or time.monotonic() > deadline:
            break
        time.sleep(3)
    print(f"\nrequests per replica {requests}; adapter held by {sorted(held.values())}")
    assert len(requests) == 2 and all(v > 0 for v in requests.values()), requests
    assert sum(requests.values()) >= 24
    # The adapter was loaded (downloaded and registered) exactly where requests for it were routed.
    assert held and set(held.values()) <= set(requests) and loaded == set(held), (held, loaded, requests)


def key_requests(state, key: str, at_least: float) -> dict[str, float]:
    """The gateway's request counter of ``key`` (every answer, 429s included) per ingress process
    (Ray's WorkerId label), once it adds up to ``at_least`` (each node exports every few seconds)."""
    deadline = time.monotonic() + 90
    while True:
        counts: dict[str, float] = defaultdict(float)
        for s in scrape(state):
            if s.name == "ray_maze_gateway_key_requests_total" and s.labels.get("key") == key:
                counts[s.labels["WorkerId"]] += s.value
        if sum(counts.values()) >= at_least or time.monotonic() > deadline:
            return dict(counts)
        time.sleep(3)


@pytest.mark.skipif(not available(), reason="redis-server is not installed")
def test_one_limit_across_two_ingress_replicas(cluster_app):
    """The two ingress replicas share their counters through Redis, so a key gets its limit once, not
    once per replica; both replicas take part (the gateway's per-key counter in each ingress process),
    and the gateway's usage (read from Redis by either replica) counts every answer."""
    _, state = cluster_app
    root = state.base_url.removesuffix("/v1")
    body = {"model": "maze-tiny", "messages": [{"role": "user", "content": "Move?"}], "max_tokens": 1}

    def one(_):
        r = httpx.post(f"{root}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                       timeout=120)
        if r.status_code not in (200, 429):
            return r.status_code, r.text[:300], None
        return r.status_code, r.headers.get("x-ratelimit-remaining-requests"), r.headers.get("retry-after")

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(SENT)))
    elapsed = time.monotonic() - t0
    assert elapsed < WINDOW_S / 2, f"the burst took {elapsed:.0f}s: the window must hold all of it"
    ok = [r for r in results if r[0] == 200]
    limited = [r for r in results if r[0] == 429]
    assert len(ok) + len(limited) == SENT, [r for r in results if r[0] not in (200, 429)][:3]
    assert len(ok) == LIMIT, f"{len(ok)} admitted of {SENT} with a limit of {LIMIT} (one store for both replicas)"
    assert sorted(int(r[1]) for r in ok) == list(range(LIMIT))  # one countdown, shared
    assert all(r[2] is not None and 1 <= int(r[2]) <= WINDOW_S for r in limited)
    per = key_requests(state, "shared", SENT)
    # Serve's proxies may hand a whole burst to one ingress replica. Then the other must refuse the key
    # too while the window lasts: it admitted nothing, and the limit the first one used up is shared.
    sent, extra = SENT, []
    while len(per) < 2 and time.monotonic() - t0 < WINDOW_S - 15:
        extra += [one(i) for i in range(10)]
        sent += 10
        per = key_requests(state, "shared", sent)
    print(f"\n{SENT} requests in {elapsed:.1f}s: {len(ok)} admitted, {len(limited)} 429; then {len(extra)} more, "
          f"all 429: {all(r[0] == 429 for r in extra)}; per ingress replica {per}")
    assert all(r[0] == 429 for r in extra), extra[:3]
    assert len(per) == 2 and all(v > 0 for v in per.values()) and sum(per.values()) == sent, per  # both answered
    usage = httpx.get(f"{root}/v1/usage", params={"since": "10m", "key": "shared"},
                      headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()["data"]
    assert sum(r["requests"] for r in usage) == sent and sum(r["errors"] for r in usage) == sent - LIMIT


def gateway_outcomes(model: str) -> dict[int, bool]:
    """The single-node gateway's greedy outcomes per seed (models/scores_gateway.json)."""
    (row,) = [r for r in json.loads((ROOT / "models" / "scores_gateway.json").read_text()) if r["model"] == model]
    return {int(k): bool(v) for k, v in row["outcomes"].items()}


# The node is killed after 8 episodes, with 16 in flight and 8 not started yet.
NODE_LOSS_SEEDS = 32
LONG_NAME = "maze-grpo-long"  # maze-grpo's weights under a name of its own: one replica holds it


def _long_stream(state, out: dict, started: threading.Event) -> None:
    """A stream of thousands of tokens for LONG_NAME: ``out`` says whether it ended as a stream
    should ([DONE], no error event) or broke."""
    body = {"model": f"maze-tiny:{LONG_NAME}", "messages": image_messages(), "max_tokens": 3000,
            "ignore_eos": True, "stream": True, "temperature": 0}
    out.update(chunks=0, done=False, error=None)
    try:
        with httpx.stream("POST", f"{state.base_url}/chat/completions", json=body, timeout=300,
                          headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: "):
                    out["chunks"] += 1
                    started.set()
                    out["done"] = out["done"] or line == "data: [DONE]"
                    if '"error"' in line:
                        out["error"] = line[:300]
    except httpx.HTTPError as exc:
        out["error"] = repr(exc)
    finally:
        started.set()


def holder_worker(state, name: str) -> int:
    """The worker node whose LLM replica holds adapter ``name`` (Serve's multiplexed-model gauge)."""
    from serving.local.cluster import worker_of

    placement = ready(state)[1]["replicas"][LLM]["placement"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        holders = {s.labels["replica"] for s in scrape(state) if s.name == "ray_serve_registered_multiplexed_model_id"
                   and s.value == 1 and s.labels.get("model_id", "").startswith(f"maze-tiny:{name}@")}
        if len(holders) > 1:
            raise AssertionError(f"{name} is held by {sorted(holders)}: its one stream loaded it twice")
        for replica in sorted(holders & set(placement)):
            worker = worker_of(state.dashboard_url, placement[replica])
            if worker is not None:
                return worker
        time.sleep(2)
    raise AssertionError(f"no replica reports holding {name}; placement {placement}")


def test_eval_survives_losing_a_worker_node(cluster_app, tmp_path):
    from serving.adapters import AdapterStore, export_s3_env
    from serving.local import cluster

    cfg, state = cluster_app
    export_s3_env(cfg)
    spec = cfg.base_models[0]
    AdapterStore(cfg.adapters).push(ROOT / "models" / "maze-grpo", LONG_NAME, base=spec.id, base_source=spec.source,
                                    max_rank=cfg.lora.max_rank, vision_tower=cfg.lora.vision_tower)
    db = str(tmp_path / "eval.sqlite")
    done = threading.Event()
    finished = []

    def on_episode(rec, n, total):
        finished.append(rec.seed)
        if n >= 8:
            done.set()

    pool = cf.ThreadPoolExecutor(2)
    future = pool.submit(evaluate, EvalConfig(endpoint=state.base_url, api_key=ADMIN, adapter="maze-grpo",
                                              seeds=f"0-{NODE_LOSS_SEEDS - 1}", concurrency=16, db=db),
                         on_episode=on_episode)
    future.add_done_callback(lambda _: done.set())
    assert done.wait(600)
    assert not future.done(), future.result()  # still running when the node goes
    # Kill the node where a request is in flight for sure: the long stream's, on the one replica
    # holding its adapter (the run's own requests come and go between turns, and its adapter is on
    # both replicas, so a node picked for it may hold none of them at that instant).
    stream, streaming = {}, threading.Event()
    stream_done = pool.submit(_long_stream, state, stream, streaming)
    assert streaming.wait(120) and stream["chunks"] > 0, stream
    worker = holder_worker(state, LONG_NAME)
    assert not stream_done.done(), stream  # still streaming when its node goes
    killed_at, episodes_before = time.monotonic(), len(finished)
    assert cluster.kill_worker(worker)
    stream_done.result(timeout=300)
    # The stream in flight there broke: it did not end as a finished stream would.
    assert not stream["done"] or stream["error"], stream
    # Readiness shows the loss (still 200: the other replica serves) ...
    lost_s = None
    while time.monotonic() < killed_at + 120:
        code, body = ready(state)
        if code == 200 and body["status"] == "degraded" and body["replicas"][LLM]["running"] == 1:
            lost_s = time.monotonic() - killed_at
            break
        time.sleep(1)
    assert lost_s is not None, body
    # ... and the return of the node and its replica.
    cluster.restart_worker(worker)
    back_s = None
    while time.monotonic() < killed_at + 420:
        code, body = ready(state)
        if code == 200 and body["status"] == "ready" and body["replicas"][LLM]["running"] == 2:
            back_s = time.monotonic() - killed_at
            break
        time.sleep(2)
    result = future.result(timeout=900)
    pool.shutdown()
    rr = result.retries
    print(f"\nkilled worker {worker} (its replica running the long stream: {stream}) after {episodes_before} "
          f"episodes; readiness degraded after {lost_s:.1f}s, back to 2 replicas after "
          f"{back_s}s; retries {rr.model_dump()}; solved {result.summary.solved}/{NODE_LOSS_SEEDS}")
    assert back_s is not None, body
    assert result.status == "complete" and result.summary.n == NODE_LOSS_SEEDS and result.summary.errors == 0
    rows = Store(db).episode_rows(result.run_id)
    assert sorted(r["seed"] for r in rows) == list(range(NODE_LOSS_SEEDS))  # exactly these, none duplicated
    # What the product guarantees is the run above: complete, every seed once, none errored. Whether
    # the runner had to retry depends on the moment of the kill: its adapter is spread over both
    # replicas, the killed one may hold none of its requests then, or Serve may re-route one before it starts.
    assert rr.errored == 0
    assert rr.retried_requests == 0 or rr.recovery_s is not None, rr  # a retry that got through says when
    outcomes = {r["seed"]: bool(r["success"]) for r in rows}
    reference = gateway_outcomes("maze-grpo")
    differ = sorted(s for s in outcomes if outcomes[s] != reference[s])
    assert not differ, f"seeds whose outcome differs from the single-node run: {differ}"


def test_traffic_stayed_on_loopback(cluster_app, loopback):
    """Every connection of the cluster's processes, sampled through this module's tests (cluster start,
    requests, a node lost and back), had both ends on 127.0.0.0/8; no node registered elsewhere."""
    loopback.sample()
    print(f"\n{loopback.samples} samples, {loopback.seen} connections looked at; wildcard listeners "
          f"(Ray's gRPC servers): {len(loopback.wildcard_listeners)}")
    assert loopback.samples > 100 and loopback.seen > 1000
    assert loopback.violations == []
