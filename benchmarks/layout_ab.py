"""Plain vLLM vs the gateway's layouts (standard, colocated, colocated + direct ingress), in alternating order.

    PYTHONPATH=. .venv/bin/python benchmarks/layout_ab.py [--rounds 2] [--out benchmarks/results/layout_ab.json]

Each round starts one stack at a time (2-core machine), in the order vllm, standard, colocated,
direct (reversed on odd rounds so no target always runs first), and measures the gateway bench's
request (one-turn chat, one image, 8 tokens, ``ignore_eos``): p50/p95 at concurrency 1, throughput
at concurrency 8, CPU seconds per request by process role at c=1; for the gateway layouts also c=1
on the shipped adapter (the LoRA path). The summary holds the median of each figure over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support import cpu_account
from benchmarks.support.gateway_bench import maze_png_url, run_load, start_gateway, start_vllm, stop_vllm
from benchmarks.support.provenance import engine_settings, provenance
from benchmarks.support.stack import dev_assets

log = logging.getLogger("layout_ab")
# Gateway targets: (layout, ingress) of the serving config, and extra environment for the Ray
# processes (tried settings that are not config fields).
GATEWAYS = {"standard": ("standard", "proxy", {}), "colocated": ("colocated", "proxy", {}),
            "direct": ("colocated", "direct", {}),
            # Ray Serve's own throughput preset (buffered access logs, no stderr logs, gRPC handles).
            "direct-tput": ("colocated", "direct", {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"})}
TARGETS = ("vllm", *GATEWAYS)


def measure(base_url: str, model: str, image: str, n1: int, n8: int, lora: str | None) -> dict:
    asyncio.run(run_load(base_url, [model], 8, 4, image))  # warm-up
    before, t = cpu_account.snapshot(), time.perf_counter()
    c1 = asyncio.run(run_load(base_url, [model], n1, 1, image))
    cpu = cpu_account.diff(before, cpu_account.snapshot(), time.perf_counter() - t)
    c1["cpu_ms_per_request"] = {k: round(1000 * v / n1, 1) for k, v in cpu["cpu_s_by_role"].items()}
    c1["machine_cpu_ms_per_request"] = round(1000 * cpu["machine_busy_cpu_s"] / n1, 1)
    out = {"c1": c1, "c8": asyncio.run(run_load(base_url, [model], n8, 8, image))}
    if lora:
        asyncio.run(run_load(base_url, [lora], 4, 1, image))  # load the adapter
        out["c1_lora"] = asyncio.run(run_load(base_url, [lora], n1 // 2, 1, image))
    return out


def run_gateway(target: str, assets, image: str, n1: int, n8: int) -> dict:
    from serving.local import embedded

    layout, ingress, env = GATEWAYS[target]
    cfg, base_url, ready = start_gateway(assets, f"maze-ab-{target}", layout, ingress, env)
    base = cfg.base_models[0].id
    try:
        out = measure(base_url, base, image, n1, n8, f"{base}:{next(iter(assets.shipped))}")
    finally:
        embedded.down()
    return {"time_to_ready_s": ready, **out}


def run_vllm(assets, image: str, n1: int, n8: int) -> dict:
    t0 = time.monotonic()
    proc, base_url, logf = start_vllm(assets.base_dir)
    ready = round(time.monotonic() - t0, 1)
    try:
        out = measure(base_url, "maze-tiny", image, n1, n8, None)
    finally:
        stop_vllm(proc, logf)
    return {"time_to_ready_s": ready, **out}


def summary(runs: list[dict]) -> dict:
    out: dict = {}
    for target in TARGETS:
        rs = [r[target] for r in runs if target in r]
        if not rs:
            continue
        def med(key: str, field: str, rs: list[dict] = rs) -> float:
            return round(statistics.median(r[key][field] for r in rs), 4)

        out[target] = {"c1_p50_s": med("c1", "p50_s"), "c1_p95_s": med("c1", "p95_s"),
                       "c8_throughput_rps": med("c8", "throughput_rps"), "c8_p50_s": med("c8", "p50_s"),
                       "c1_machine_cpu_ms_per_request": med("c1", "machine_cpu_ms_per_request")}
        if all("c1_lora" in r for r in rs):
            out[target]["c1_lora_p50_s"] = med("c1_lora", "p50_s")
    if "vllm" in out:
        v = out["vllm"]
        for target in GATEWAYS:
            if target in out:
                g = out[target]
                g["c1_p50_added_pct"] = round(100 * (g["c1_p50_s"] / v["c1_p50_s"] - 1), 1)
                g["c1_p95_added_pct"] = round(100 * (g["c1_p95_s"] / v["c1_p95_s"] - 1), 1)
                g["c8_throughput_ratio"] = round(g["c8_throughput_rps"] / v["c8_throughput_rps"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "layout_ab.json")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n1", type=int, default=60, help="requests at concurrency 1")
    ap.add_argument("--n8", type=int, default=64, help="requests at concurrency 8")
    ap.add_argument("--targets", default=",".join(TARGETS))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    assets = dev_assets(n_extra=0)
    image = maze_png_url()
    targets = args.targets.split(",")
    runs = []
    for i in range(args.rounds):
        order = targets if i % 2 == 0 else targets[::-1]
        runs.append({"order": order})
        for target in order:
            log.info("round %d: %s", i, target)
            if target == "vllm":
                runs[-1][target] = run_vllm(assets, image, args.n1, args.n8)
            else:
                runs[-1][target] = run_gateway(target, assets, image, args.n1, args.n8)
            log.info("round %d %s: %s", i, target, json.dumps(runs[-1][target]))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"runs": runs, "summary": summary(runs)}, indent=2) + "\n")
    result = {"machine": {"cpus": os.cpu_count()}, "model": str(assets.base_dir),
              "request": "chat, one 175x175 PNG, 8 tokens, ignore_eos", "runs": runs, "summary": summary(runs)}
    from serving.config import ServingConfig

    # Every target runs the shipped engine settings; its layout and ingress are the target's own (runs).
    shipped = engine_settings(ServingConfig.shipped("embedded"))
    result.update(provenance([__file__, *sys.argv[1:]],
                             {k: v for k, v in shipped.items() if k not in ("layout", "ingress")}))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
