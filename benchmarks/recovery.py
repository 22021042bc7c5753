"""Recovery from the loss of a worker node on the local multi-node cluster, and adapter routing.

Starts ``serving.local.cluster`` (head + 2 workers on 127.0.0.1, the standard layout, 2 LLM replicas,
one per worker) in a private MAZE_HOME, then:

1. routing: per-replica request counts (Serve's own request counter for the chat route, read
   from every node's metrics before and after each burst, once the exported totals include the
   burst) for bursts of base-model and adapter requests at several concurrencies, and which
   replicas end up holding the adapter, under the config's ``routing`` policy (recorded);
2. recovery: with a steady load of adapter requests (``maze-tiny:maze-grpo``) from ``--load``
   client threads, SIGKILL the worker node of the first replica that holds the adapter, start the
   worker again once the head has declared the node dead (what a replacement pod is), and measure
   the time from the kill to the node declared dead, the worker rejoining, the first successful
   adapter request, ``/ready`` showing the loss (polled once the worker is restarted) and full
   capacity (2 replicas running again); failed requests counted. Which failover this measures
   depends on the routing bursts: when they leave the adapter on both replicas (the largest burst
   usually does), the survivor already holds it and serves at once; when they leave it on one,
   the survivor loads it first.

Writes ``benchmarks/results/recovery.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "recovery.json"
LLM = "GatewayLLMServer:maze-tiny"
CHAT = "/v1/chat/completions"  # the route label of chat requests (/ready's health probes carry "/ready")
ADAPTER = "maze-tiny:maze-grpo"


def _messages() -> list[dict]:
    from agent.env import MazeEnv, read_env
    from agent.protocol import get_protocol, user_message

    env = MazeEnv()
    frame, _ = env.reset(seed=0)
    return [user_message(get_protocol("tuple").initial_text(*read_env(env)), frame)]


def _counts(state) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Serve's count of chat requests per LLM replica, and the model ids each replica holds, from every node."""
    from prometheus_client.parser import text_string_to_metric_families

    from serving.local.cluster import metrics_urls

    requests: dict[str, float] = defaultdict(float)
    held: dict[str, list[str]] = defaultdict(list)
    for url in metrics_urls(state):
        try:
            text = httpx.get(url, timeout=10).text
        except httpx.HTTPError:
            continue
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if (s.name == "ray_serve_deployment_request_counter_total" and s.labels.get("deployment") == LLM
                        and s.labels.get("route") == CHAT):
                    requests[s.labels["replica"]] += s.value
                elif s.name == "ray_serve_registered_multiplexed_model_id" and s.value == 1:
                    held[s.labels["replica"]].append(s.labels["model_id"])
    return dict(requests), dict(held)


def _settled_counts(state, expected: float, before: dict[str, float], timeout: float = 60) -> tuple[dict, dict]:
    """Counts once the exported totals include ``expected`` more requests (Ray exports every few seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        requests, held = _counts(state)
        if sum(requests.values()) - sum(before.values()) >= expected or time.monotonic() > deadline:
            return requests, held
        time.sleep(2)


def routing(state, client: openai.OpenAI, messages: list[dict]) -> list[dict]:
    def ask(model: str) -> float:
        t0 = time.monotonic()
        client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0)
        return time.monotonic() - t0

    rows = []
    before, _ = _settled_counts(state, 1, {})  # the warm-up request, exported before the first burst
    for model, concurrency in ((ADAPTER, 8), (ADAPTER, 64), ("maze-tiny", 64), (ADAPTER, 160)):
        n = 2 * concurrency
        t0 = time.monotonic()
        with cf.ThreadPoolExecutor(concurrency) as pool:
            latencies = sorted(pool.map(ask, [model] * n))
        wall = time.monotonic() - t0
        after, held = _settled_counts(state, n, before)
        delta = {r: int(after.get(r, 0) - before.get(r, 0)) for r in sorted(after)}
        rows.append({"model": model, "concurrency": concurrency, "requests": n, "wall_s": round(wall, 2),
                     "p50_s": round(latencies[n // 2], 3), "p95_s": round(latencies[int(n * 0.95)], 3),
                     "requests_per_replica": delta,
                     "replicas_holding_adapter": sorted(r for r, ids in held.items()
                                                        if any(i.startswith(ADAPTER + "@") for i in ids))})
        print(rows[-1], flush=True)
        before = after
    return rows


def _ready(state) -> dict:
    try:
        return httpx.get(state.base_url.removesuffix("/v1") + "/ready", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return {}


def recovery(state, client: openai.OpenAI, messages: list[dict], load: int) -> dict:
    from serving.local import cluster
    from serving.local.processes import wait_for

    _, held = _counts(state)
    placement = _ready(state)["replicas"][LLM]["placement"]
    holder = next(r for r, ids in held.items() if any(i.startswith(ADAPTER + "@") for i in ids) and r in placement)
    worker = cluster.worker_of(state.dashboard_url, placement[holder])
    log: list[tuple[float, float, bool]] = []  # (start, end, ok)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                client.chat.completions.create(model=ADAPTER, messages=messages, max_tokens=16, temperature=0)
                ok = True
            except openai.OpenAIError:
                ok = False
            log.append((t0, time.monotonic(), ok))
            if not ok:
                time.sleep(0.1)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(load)]
    for t in threads:
        t.start()
    try:
        time.sleep(10)  # steady state first
        killed = time.monotonic()
        cluster.kill_worker(worker)
        # The replacement machine starts once the head has declared the old node dead (a raylet
        # started before that fails to register on this machine; a new pod likewise follows the
        # old one's deletion).
        wait_for(lambda: len(cluster.nodes(state.dashboard_url)) <= 2, 120, interval=0.5)
        node_dead_s = time.monotonic() - killed
        cluster.restart_worker(worker)
        rejoined_s = time.monotonic() - killed
        degraded_s = full_s = None
        while time.monotonic() < killed + 600 and full_s is None:
            body = _ready(state)
            replicas = body.get("replicas", {}).get(LLM, {})
            if degraded_s is None and body.get("status") == "degraded":
                degraded_s = time.monotonic() - killed
            if degraded_s is not None and body.get("status") == "ready" and replicas.get("running") == 2:
                full_s = time.monotonic() - killed
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(150)
    first_ok = min((end for start, end, ok in log if ok and start > killed), default=None)
    failed = [(s, e) for s, e, ok in log if not ok]
    return {"killed_worker": worker, "killed_replica": holder, "load_threads": load,
            "node_declared_dead_s": round(node_dead_s, 2), "worker_rejoined_s": round(rejoined_s, 2),
            "first_adapter_success_s": round(first_ok - killed, 2) if first_ok else None,
            "readiness_degraded_s": round(degraded_s, 2) if degraded_s else None,
            "full_capacity_s": round(full_s, 2) if full_s else None,
            "requests_ok": sum(ok for _, _, ok in log), "requests_failed": len(failed),
            "last_failure_s": round(max(e for _, e in failed) - killed, 2) if failed else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--load", type=int, default=4, help="client threads sending adapter requests in a loop")
    args = parser.parse_args()
    os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix="maze-recovery-")
    sys.path.insert(0, str(ROOT))  # run as a script: the repo's packages first
    from benchmarks.support.provenance import engine_settings, provenance
    from benchmarks.support.stack import cluster_stack_config
    from serving.local import cluster
    from serving.local.embedded import RAY_ENV

    os.environ.update(RAY_ENV)
    t0 = time.monotonic()
    cfg = cluster_stack_config()
    state = cluster.up(cfg, workers=2, progress=print)
    up_s = time.monotonic() - t0
    try:
        client = openai.OpenAI(base_url=state.base_url, api_key="EMPTY", max_retries=0, timeout=120)
        messages = _messages()
        client.chat.completions.create(model=ADAPTER, messages=messages, max_tokens=4, temperature=0)  # warm
        result = {"cluster": {"workers": 2, "up_s": round(up_s, 1), "layout": cfg.layout, "replicas": "1..2",
                              "routing": cfg.routing.model_dump(mode="json"), "machine_cpus": os.cpu_count()},
                  "routing": routing(state, client, messages),
                  **provenance([__file__, *sys.argv[1:]], engine_settings(cfg))}
        OUT.write_text(json.dumps(result, indent=2) + "\n")  # kept if the recovery part fails
        result["recovery"] = recovery(state, client, messages, args.load)
    finally:
        cluster.down()
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["recovery"], indent=2))


if __name__ == "__main__":
    main()
