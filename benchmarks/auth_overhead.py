"""What API keys and per-key limits add to each request the gateway answers: paired, interleaved.

    PYTHONPATH=. .venv/bin/python benchmarks/auth_overhead.py [--pairs 1500] [--rounds 3]

Two Ray Serve applications run side by side on one local Ray (127.0.0.1): both are the gateway's
real FastAPI app (``serving.ingress.create_app``: its middleware, error handler, management and
usage routes), one with auth off (the embedded default), one with scoped keys whose key has every
limit set (requests, tokens, concurrency: all checked, never reached) and usage recorded (in-process
counters and the Prometheus counters through Ray's metrics, as in a replica). The engine routes
are a fixed stand-in answer with a ``usage`` block, the same in both: the engine's own time is the
same with or without keys and would only add its noise to the difference measured here.

Each pair sends one request to each side (the side that goes first alternates), over keep-alive
connections through Serve's proxy, so drift hits both alike. Reported per round and pooled: p50 of
each side, the p50 of the paired differences (keys - open) and its bootstrap 95% interval, and the
same for p95. Written to ``benchmarks/results/auth_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import sys
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "benchmarks" / "results" / "auth_overhead.json"
KEY = "sk-bench-overhead-0001"
KEYS = {"keys": [{"name": "bench", "role": "inference", "models": ["maze-tiny", "maze-tiny:*"], "secrets": [KEY],
                  "limits": {"requests": 10_000_000, "tokens": 10_000_000_000, "concurrent": 10_000}}]}
USAGE = {"prompt_tokens": 412, "completion_tokens": 8, "total_tokens": 420}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_app(auth: dict):
    """The gateway's app for a config with ``auth``, with the stand-in engine route."""
    from starlette.responses import JSONResponse

    from serving.config import ServingConfig
    from serving.ingress import create_app

    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["auth"], data["extensions"] = auth, []
    app = create_app(ServingConfig.model_validate(data))

    @app.post("/v1/chat/completions")
    async def chat():
        from serving.auth import authorize_model, note_model

        authorize_model("maze-tiny")  # the ingress's scope check and usage label, as for a real request
        note_model("maze-tiny")
        return JSONResponse({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "maze-tiny",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "(1, 0)"},
                                          "finish_reason": "stop"}], "usage": USAGE})

    return app


def deploy(port: int) -> None:
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"BENCH_KEYS": yaml.safe_dump(KEYS)}})
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for name, auth in (("open", {}), ("keys", {"keys_env": "BENCH_KEYS"})):
        app = gateway_app(auth)

        @serve.deployment(name=f"gateway-{name}", ray_actor_options={"num_cpus": 0})
        @serve.ingress(app)
        class Gateway:
            pass

        serve.run(Gateway.bind(), name=name, route_prefix=f"/{name}", logging_config={"enable_access_log": False})


def send(client: httpx.Client, side: str) -> float:
    body = {"model": "maze-tiny", "messages": [{"role": "user", "content": "Move?"}], "max_tokens": 8}
    t0 = time.perf_counter()
    r = client.post(f"/{side}/v1/chat/completions", json=body)
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"{side}: {r.status_code} {r.text[:300]}")
    if side == "keys" and "x-ratelimit-remaining-requests" not in r.headers:
        raise RuntimeError("the keyed side answered without rate-limit headers: its limits are not applied")
    return dt


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def bootstrap(diffs: list[float], q: float, n: int = 1000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    stats = sorted(pct([rng.choice(diffs) for _ in diffs], q) for _ in range(n))
    return stats[int(0.025 * n)], stats[int(0.975 * n)]


def measure(port: int, pairs: int) -> dict:
    clients = {side: httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                  headers={"Authorization": f"Bearer {KEY}"}) for side in ("open", "keys")}
    for side, c in clients.items():  # warm-up: connections, first-request paths, key load
        for _ in range(50):
            send(c, side)
    open_, keys, diffs = [], [], []
    for i in range(pairs):
        order = ("open", "keys") if i % 2 == 0 else ("keys", "open")
        t = {side: send(clients[side], side) for side in order}
        open_.append(t["open"])
        keys.append(t["keys"])
        diffs.append(t["keys"] - t["open"])
    for c in clients.values():
        c.close()
    return {"open": open_, "keys": keys, "diffs": diffs}


def summary(open_: list[float], keys: list[float], diffs: list[float]) -> dict:
    ms = 1000
    return {"pairs": len(diffs), "open_p50_ms": round(pct(open_, 0.5) * ms, 3), "keys_p50_ms": round(pct(keys, 0.5) * ms, 3),
            "open_p95_ms": round(pct(open_, 0.95) * ms, 3), "keys_p95_ms": round(pct(keys, 0.95) * ms, 3),
            "p50_delta_ms": round((pct(keys, 0.5) - pct(open_, 0.5)) * ms, 3),
            "paired_diff_p50_ms": round(pct(diffs, 0.5) * ms, 3),
            "paired_diff_p50_ci95_ms": [round(v * ms, 3) for v in bootstrap(diffs, 0.5)],
            "paired_diff_mean_ms": round(statistics.fmean(diffs) * ms, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1500, help="request pairs per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
    port = _free_port()
    deploy(port)
    rounds, pooled = [], {"open": [], "keys": [], "diffs": []}
    for r in range(args.rounds):
        data = measure(port, args.pairs)
        for k in pooled:
            pooled[k] += data[k]
        rounds.append(summary(data["open"], data["keys"], data["diffs"]))
        print(f"round {r + 1}: {json.dumps(rounds[-1])}", flush=True)
    result = {"what": "gateway overhead of scoped keys + every per-key limit + usage vs auth off; paired, interleaved, "
                      "through Serve's proxy to the gateway's real app with a stand-in engine route",
              "cpus": os.cpu_count(), "rounds": rounds, "pooled": summary(pooled["open"], pooled["keys"], pooled["diffs"])}
    from benchmarks.support.provenance import provenance

    result.update(provenance([__file__, *sys.argv[1:]]))  # a stand-in engine: no engine settings
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["pooled"], indent=2))
    import ray

    ray.shutdown()


if __name__ == "__main__":
    main()
