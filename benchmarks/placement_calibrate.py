"""Engine costs for the placement simulation, measured on the embedded gateway stack.

    flock /tmp/maze-heavy.lock timeout 900 python benchmarks/placement_calibrate.py [--rounds 4]

Starts the embedded stack (free ports, its own ``MAZE_HOME``, 8 adapters per replica) and measures,
with real maze prompts (the agent's tuple protocol and ``window:2`` history, captured from episodes
the BFS policy plays, so up to three 224x224 frames a request):

1. workload sizes: prompt and completion tokens of those turns as ``maze-grpo`` answers them
   (greedy, 32 tokens at most, as ``maze-eval`` asks);
2. decode cost: latency of requests generating exactly 2 and 34 tokens (``ignore_eos``) at 1 and 8
   concurrent, base model and ``maze-grpo``: the difference over 32 tokens is the step time at that
   batch size, fitted as ``step_s + batch x row cost`` (base rows: ``decode_s``; adapter rows:
   ``decode_s x lora_factor``; the adapter's fixed part above the base's: its ``adapter_step_s``);
3. prefill cost: 1-token requests at 1 and 8 concurrent: the extra latency per concurrent request,
   less one decode row, per prompt token (``prefill_token_s``; vision encoding and request handling
   included, as they share the engine's CPU here);
4. mixing: 8 concurrent requests over 4 adapters (copies of ``maze-grpo``) against 8 on one:
   the step time per extra adapter in a batch (``adapter_step_s``);
5. cold load: fresh random rank-64 adapters (``build_random_lora``) pushed one by one; each one's
   first request against its second (``cold_load_s``), while a base-model stream runs: that
   stream's extra latency during the first request, less that during the second, is the engine's
   pause (``load_stall_s``; on this CPU stack the load's download and unpacking share the cores).

Writes ``benchmarks/results/placement_calibration.json``, which ``placement_sim.py`` reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.provenance import engine_settings, provenance  # noqa: E402
from benchmarks.support.stack import dev_assets, stack_config  # noqa: E402

log = logging.getLogger("placement_calibrate")
OUT = ROOT / "benchmarks" / "results" / "placement_calibration.json"
ADAPTER = "maze-grpo"
SHORT, LONG = 2, 34  # completion tokens of the two decode probes
MIX = 4  # adapters in the mixed batch


async def maze_turns(seeds: range) -> list[list[dict]]:
    """The messages of every turn of BFS-played episodes, exactly as the runner sends them."""
    from agent.runner import CallablePolicy, RunnerConfig, run_episodes_async, solver_reply

    turns: list[list[dict]] = []

    def capture(messages: list[dict]) -> str:
        turns.append(list(messages))
        return solver_reply(messages, "tuple")

    await run_episodes_async(CallablePolicy(capture, label="capture"), list(seeds),
                             RunnerConfig(protocol="tuple", history="window:2", concurrency=1))
    return turns


class Client:
    """Chat completions on the stack, timed."""

    def __init__(self, base_url: str):
        self.http = httpx.AsyncClient(base_url=base_url, timeout=300)

    async def one(self, model: str, messages: list[dict], max_tokens: int, exact: bool = True) -> tuple[float, dict]:
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
        if exact:
            body["ignore_eos"] = True  # vLLM's extension: exactly max_tokens tokens
        t0 = time.perf_counter()
        resp = await self.http.post("/chat/completions", json=body)
        wall = time.perf_counter() - t0
        if resp.status_code != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status_code}: {resp.text[:300]}")
        return wall, resp.json()["usage"]

    async def burst(self, models: list[str], messages: list[dict], max_tokens: int) -> float:
        """Mean latency of ``len(models)`` requests sent at once, request i on ``models[i]``."""
        outs = await asyncio.gather(*(self.one(m, messages, max_tokens) for m in models))
        for _, usage in outs:
            if usage["completion_tokens"] != max_tokens:
                raise RuntimeError(f"asked for {max_tokens} tokens, got {usage['completion_tokens']}")
        return statistics.fmean(w for w, _ in outs)


async def workload_sizes(client: Client, model: str, turns: list[list[dict]]) -> list[list[int]]:
    sizes = []
    for i in range(0, len(turns), 8):
        outs = await asyncio.gather(*(client.one(model, t, 32, exact=False) for t in turns[i:i + 8]))
        sizes += [[u["prompt_tokens"], u["completion_tokens"]] for _, u in outs]
    return sizes


async def step_times(client: Client, sides: dict[str, list[str]], messages: list[dict], rounds: int) -> dict:
    """Per side: burst latency at SHORT and LONG tokens and the step time, each the median over
    ``rounds`` interleaved rounds (the side that goes first alternating; one step estimate per round)."""
    lat: dict[str, dict[str, list[float]]] = {s: {"short": [], "long": [], "step": []} for s in sides}
    for r in range(rounds):
        for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            short = await client.burst(sides[side], messages, SHORT)
            long = await client.burst(sides[side], messages, LONG)
            lat[side]["short"].append(short)
            lat[side]["long"].append(long)
            lat[side]["step"].append((long - short) / (LONG - SHORT))
    return {side: {"latency_short_s": round(statistics.median(v["short"]), 4),
                   "latency_long_s": round(statistics.median(v["long"]), 4),
                   "step_s": round(statistics.median(v["step"]), 5),
                   "step_s_per_round": [round(x, 5) for x in v["step"]]} for side, v in lat.items()}


async def cold_loads(client: Client, cfg, base_dir: Path, work: Path, messages: list[dict], n: int) -> dict:
    """First vs second request of ``n`` fresh adapters, a base-model stream running alongside."""
    from training.tiny.model import build_random_lora

    base, store_push = cfg.base_models[0].id, _pusher(cfg)
    stream: list[tuple[float, float]] = []  # (start, end) of each base request
    stop = asyncio.Event()

    async def base_stream() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await client.one(base, messages, SHORT)
            stream.append((t0, time.perf_counter()))

    task = asyncio.create_task(base_stream())
    rows = []
    try:
        await asyncio.sleep(3.0)  # the stream's baseline
        for k in range(n):
            folder = await asyncio.to_thread(build_random_lora, base_dir, work / f"cold-{k}", 64, 1000 + k)
            name = f"placement-cold-{k}"
            await asyncio.to_thread(store_push, folder, name)
            await asyncio.sleep(2.0)
            t0 = time.perf_counter()
            first, _ = await client.one(f"{base}:{name}", messages, SHORT)
            t1 = time.perf_counter()
            second, _ = await client.one(f"{base}:{name}", messages, SHORT)
            rows.append({"first_s": round(first, 4), "second_s": round(second, 4),
                         "windows": ((t0, t1), (t1, time.perf_counter()))})
            await asyncio.sleep(2.0)
    finally:
        stop.set()
        await task
    return _cold_summary(rows, stream)


def _cold_summary(rows: list[dict], stream: list[tuple[float, float]]) -> dict:
    """The load's extra latency (first request less second) and the engine's pause: the base stream's
    extra latency while the first request ran, less its extra latency while the second one ran (the
    same batch sharing, no load)."""
    windows = [w for r in rows for w in r.pop("windows")]
    quiet = [e - s for s, e in stream if not any(s < w1 and e > w0 for w0, w1 in windows)]
    baseline = statistics.median(quiet)

    def excess(w0: float, w1: float) -> float:
        return sum(max(0.0, (e - s) - baseline) for s, e in stream if s < w1 and e > w0)

    for row, cold_w, warm_w in zip(rows, windows[::2], windows[1::2]):
        row["base_excess_cold_s"] = round(excess(*cold_w), 4)
        row["base_excess_warm_s"] = round(excess(*warm_w), 4)
    return {"adapters": rows, "base_stream_median_s": round(baseline, 4),
            "cold_load_s": round(statistics.median(r["first_s"] - r["second_s"] for r in rows), 4),
            "load_stall_s": round(statistics.median(r["base_excess_cold_s"] - r["base_excess_warm_s"]
                                                    for r in rows), 4)}


def _pusher(cfg):
    from serving.adapters import AdapterStore, export_s3_env

    export_s3_env(cfg)
    store, spec = AdapterStore(cfg.adapters), cfg.base_models[0]
    return lambda folder, name: store.push(folder, name, base=spec.id, base_source=spec.source,
                                           max_rank=cfg.lora.max_rank)


def fit(decode: dict, mixed: dict, prefill_probe_tokens: int, cold: dict) -> dict:
    """The simulation's engine constants from the measured step times (negatives from noise clipped)."""
    sb1, sb8 = decode["base_c1"]["step_s"], decode["base_c8"]["step_s"]
    sa1, sa8 = decode["adapter_c1"]["step_s"], decode["adapter_c8"]["step_s"]
    decode_s = max((sb8 - sb1) / 7, 1e-5)
    row_a = max((sa8 - sa1) / 7, decode_s)
    per_request = (decode["adapter_c8"]["latency_short_s"] - decode["adapter_c1"]["latency_short_s"]) / 7
    prefill = max(per_request - SHORT * row_a, 0.0) / prefill_probe_tokens
    mix = max((mixed["mixed"]["step_s"] - mixed["one"]["step_s"]) / (MIX - 1), 0.0)
    return {"step_s": round(max(sb1 - decode_s, 0.0), 6), "decode_s": round(decode_s, 6),
            "prefill_token_s": round(prefill, 8), "lora_factor": round(row_a / decode_s, 4),
            "adapter_step_s": round(mix, 6), "cold_load_s": round(max(cold["cold_load_s"], 1e-3), 4),
            "load_stall_s": round(max(cold["load_stall_s"], 0.0), 4)}


async def measure(cfg, url: str, assets, work: Path, rounds: int, cold_n: int) -> dict:
    base = cfg.base_models[0].id
    adapter = f"{base}:{ADAPTER}"
    client = Client(url)
    turns = await maze_turns(range(4))
    sizes = await workload_sizes(client, adapter, turns)  # also loads maze-grpo
    order = sorted(range(len(sizes)), key=lambda i: sizes[i][0])
    probe = turns[order[len(order) // 2]]  # the median-sized maze prompt
    probe_tokens = sizes[order[len(order) // 2]][0]
    log.info("%d maze turns, probe prompt %d tokens", len(sizes), probe_tokens)
    push = _pusher(cfg)
    mix = [adapter] + [f"{base}:placement-mix-{k}" for k in range(1, MIX)]
    for name in mix[1:]:
        push(assets.shipped[ADAPTER], name.split(":", 1)[1])
    for m in [base] + mix:
        await client.one(m, probe, SHORT)  # load and warm every model used below
    decode = await step_times(client, {"base_c1": [base], "adapter_c1": [adapter], "base_c8": [base] * 8,
                                       "adapter_c8": [adapter] * 8}, probe, rounds)
    log.info("decode: %s", decode)
    mixed = await step_times(client, {"one": [adapter] * 8, "mixed": mix * (8 // MIX)}, probe, rounds)
    log.info("mixed: %s", mixed)
    cold = await cold_loads(client, cfg, assets.base_dir, work, probe, cold_n)
    log.info("cold: %s", cold)
    await client.http.aclose()
    return {"workload_sizes": sizes, "probe_prompt_tokens": probe_tokens, "decode": decode,
            "mixed_adapters_c8": mixed, "cold": cold, "fit": fit(decode, mixed, probe_tokens, cold)}


def run(args) -> dict:
    from serving.local import embedded

    assets = dev_assets(n_extra=0)
    work = Path(tempfile.mkdtemp(prefix="placement-calibrate-"))
    os.environ["MAZE_HOME"] = str(work / "home")
    cfg = stack_config(assets.base_dir, name="placement-calibrate", resolve_ttl_s=30.0, adapters_per_replica=8)
    t0 = time.monotonic()
    url = embedded.up(cfg, adapters=assets.shipped)
    ready = round(time.monotonic() - t0, 1)
    try:
        out = asyncio.run(measure(cfg, url, assets, work, args.rounds, args.cold_adapters))
    finally:
        embedded.down()
    return {"time_to_ready_s": ready, "stack": {"layout": cfg.layout, "ingress": cfg.ingress,
                                                "adapters_per_replica": cfg.lora.adapters_per_replica,
                                                "cpu_kernels": cfg.cpu_lora_kernels},
            **provenance([__file__, *sys.argv[1:]], engine_settings(cfg)), **out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds per step-time comparison")
    ap.add_argument("--cold-adapters", type=int, default=4, help="fresh adapters whose cold load is timed")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.rounds < 1 or args.cold_adapters < 1:
        ap.error("--rounds and --cold-adapters must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "evaluation", "agent"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    t0 = time.monotonic()
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "loadavg_before": [round(x, 2) for x in os.getloadavg()]}, **run(args)}
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["bench_wall_s"] = round(time.monotonic() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["fit"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
