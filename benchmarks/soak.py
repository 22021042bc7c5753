"""Soak: many concurrent episodes through the gateway for a fixed time; errors and replica memory.

    .venv/bin/python benchmarks/soak.py [--concurrency 256] [--duration-s 180] [--warmup-s S]
                                        [--endpoint URL] [--out benchmarks/results/soak.json]
                                        [--mm-cache-gb GB] [--engine-kwargs JSON] [--env KEY=VALUE]
                                        [--allocator system|jemalloc]

Starts the embedded stack (unless ``--endpoint`` names a running gateway), then keeps
``--concurrency`` episodes in flight (each worker plays one seed after another, the runner's real
multi-turn loop with images) for ``--duration-s``; the episodes still in flight then are cut.
Retries are off, so every failed request shows as an errored episode and a non-200 status: the
target is 0 errors, every response a 200, and the serving replica's resident memory flat once warm.
Memory is sampled every 2 s per process (the Serve replica, vLLM's engine core, its worker) and
reported as start, after warm-up, peak and end, with the growth over the last half of the run per
minute and per 1000 responses (:func:`memory_report`). ``--mm-cache-gb``, ``--engine-kwargs``,
``--env`` and ``--allocator`` change the stack's engine settings, to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.runner import (
    EndpointConfig,
    EpisodeSpec,
    OpenAIPolicy,
    RetryPolicy,
    RunnerConfig,
    SamplingParams,
    run_episodes_async,
)


def replica_usage(ray_sid: int) -> dict[str, float]:
    """Resident memory in MB of the serving replica (``replica``: HTTP, gateway and vLLM's front end),
    the vLLM engine core it started (``engine_core``: scheduler, multimodal input cache) and the engine's
    worker (``worker``: model, KV cache), their sum (``total``), and the CPU seconds all three have used
    (``cpu_s``: the serving cost of the work, which the machine's other load does not inflate)."""
    import psutil

    parts = {"replica": 0, "engine_core": 0, "worker": 0}
    cpu = 0.0
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if os.getsid(proc.pid) != ray_sid:
                continue
            text = " ".join(proc.info["cmdline"] or []) + (proc.info["name"] or "")
            role = ("replica" if "ServeReplica" in text else "engine_core" if "EngineCore" in text
                    else "worker" if "VLLM" in text else None)
            if role:
                parts[role] += proc.memory_info().rss
                times = proc.cpu_times()
                cpu += times.user + times.system
        except (psutil.Error, OSError):
            continue
    mb = {k: round(v / 2**20, 1) for k, v in parts.items()}
    return {"total": round(sum(parts.values()) / 2**20, 1), **mb, "cpu_s": round(cpu, 2)}


async def soak(base_url: str, model: str, concurrency: int, duration_s: float, sample, max_turns: int | None,
               warmup_s: float, history: str) -> dict:
    import httpx
    from openai import AsyncOpenAI

    statuses: dict[str, int] = {}

    async def count(response: httpx.Response) -> None:
        statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    cfg = RunnerConfig(retry=RetryPolicy(max_attempts=1), concurrency=1, sampling=SamplingParams(max_tokens=16),
                       max_turns=max_turns, history=history)
    endpoint = EndpointConfig(base_url=base_url, model=model, timeout_s=duration_s + 600)
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency)
    http = httpx.AsyncClient(timeout=endpoint.timeout_s, event_hooks={"response": [count]}, limits=limits)
    policy = OpenAIPolicy(endpoint, client=AsyncOpenAI(base_url=base_url, api_key="EMPTY", http_client=http,
                                                        max_retries=0))
    stats = {"episodes_completed": 0, "episodes_errored": 0, "turns_completed": 0, "solved": 0, "errors": {}}
    next_seed = iter(range(10**9))
    rss: list[tuple[float, int, dict[str, float]]] = []
    t0 = time.monotonic()

    async def worker() -> None:
        while True:
            (rec,) = await run_episodes_async(policy, [EpisodeSpec(seed=next(next_seed))], cfg)
            stats["episodes_completed"] += 1
            stats["turns_completed"] += len(rec.turns)
            stats["solved"] += rec.success
            if rec.stop_reason.value == "error":
                stats["episodes_errored"] += 1
                key = (rec.error or "?")[:120]
                stats["errors"][key] = stats["errors"].get(key, 0) + 1

    async def sampler() -> None:
        while True:
            mem = await asyncio.to_thread(sample)
            rss.append((round(time.monotonic() - t0, 1), sum(statuses.values()), mem))
            await asyncio.sleep(2)

    watch = asyncio.create_task(sampler())
    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    # Bounded: at the deadline the episodes in flight are cut (counted, not scored as errors).
    await asyncio.wait(workers, timeout=duration_s)
    for task in (*workers, watch):
        task.cancel()
    await asyncio.gather(*workers, watch, return_exceptions=True)
    failed = [t.exception() for t in workers if not t.cancelled() and t.exception() is not None]
    await policy.aclose()
    rss.append((round(time.monotonic() - t0, 1), sum(statuses.values()), sample()))
    elapsed = time.monotonic() - t0
    answered = sum(statuses.values())
    return {**stats, "worker_crashes": [repr(e)[:200] for e in failed], "elapsed_s": round(elapsed, 1),
            "responses_by_status": statuses, "responses": answered,
            "responses_per_s": round(answered / elapsed, 2),
            "replica": memory_report(rss, warmup_s)}


def _slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB a minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return round(60 * sum((t - mt) * (v - mv) for t, v in points) / var, 1) if var else 0.0


def memory_report(samples: list[tuple[float, int, dict[str, float]]], warmup_s: float) -> dict:
    """Start, peak and end of the replica's memory, and whether it is flat once warm.

    Flat means: after ``warmup_s`` (caches and allocator pools filling) the memory no longer follows
    the work done. ``after_warmup`` is the first sample at or past ``warmup_s``; ``growth_mb_per_min``
    is the least-squares slope over the last half of the run (the part of it after warm-up), per part,
    so a slow leak shows even when the end happens to sit below the peak; the same slope against the
    responses answered (per 1000) does not depend on how fast the machine served them.
    """
    if not samples or not samples[0][2]:
        return {}
    parts = [p for p in samples[0][2] if p != "cpu_s"]
    end_t = samples[-1][0]
    warm = next((s for s in samples if s[0] >= warmup_s), samples[-1])
    half = [s for s in samples if s[0] >= max(warmup_s, end_t / 2)]
    out: dict = {"warmup_s": warmup_s}
    for part in parts:
        values = [s[2][part] for s in samples]
        out[part] = {"start": values[0], "after_warmup": warm[2][part], "peak": max(values), "end": values[-1],
                     "end_minus_after_warmup": round(values[-1] - warm[2][part], 1),
                     "growth_mb_per_min_last_half": _slope_per_min([(s[0], s[2][part]) for s in half]),
                     "growth_mb_per_1000_responses_last_half": round(
                         _slope_per_min([(s[1], s[2][part]) for s in half]) * 1000 / 60, 1)}
    done = samples[-1][1] - warm[1]
    if done > 0:
        out["cpu_s_per_response_after_warmup"] = round((samples[-1][2]["cpu_s"] - warm[2]["cpu_s"]) / done, 4)
    out["samples"] = [[t, n, mem] for t, n, mem in samples[:: max(1, len(samples) // 120)]]
    return out


def with_overrides(cfg, engine_kwargs: dict, env: dict[str, str], mm_cache_gb: float | None):
    """``cfg`` with extra engine arguments (and another ``mm_cache_gb``) for its base model, and its engine
    environment changed by ``env`` (an empty value removes the variable)."""
    data = cfg.model_dump()
    base = data["base_models"][0]
    base["engine_kwargs"] = {**base["engine_kwargs"], **engine_kwargs}
    if mm_cache_gb is not None:
        base["mm_cache_gb"] = mm_cache_gb
    data["env"] = {k: v for k, v in {**cfg.env, **env}.items() if v}
    return type(cfg).model_validate(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--duration-s", type=float, default=180.0)
    ap.add_argument("--endpoint", help="a running gateway's base URL (default: start the embedded stack)")
    ap.add_argument("--model", help="model to play (default: the stack's base with its shipped adapter)")
    ap.add_argument("--max-turns", type=int, help="turn limit per episode (default: the variant's)")
    ap.add_argument("--history", default="full",
                    help="earlier turns sent each turn: full (default; every earlier frame again, the heaviest "
                         "image load) or window:K (maze-tiny's agent profile is window:2)")
    ap.add_argument("--warmup-s", type=float,
                    help="seconds after which the replica's memory should stop growing (default: half the run)")
    ap.add_argument("--engine-kwargs", type=json.loads, default={},
                    help="JSON object merged into the base model's engine_kwargs (to compare engine settings)")
    ap.add_argument("--mm-cache-gb", type=float, help="the base model's mm_cache_gb (default: the config's)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="engine process environment variable over the config's; KEY= removes it (repeatable)")
    ap.add_argument("--allocator", choices=["system", "jemalloc"], help="the engines' allocator (default: the config's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "soak.json"))
    args = ap.parse_args()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    from benchmarks.support.provenance import engine_settings, provenance
    from serving.engine import allocator_env
    from serving.local import embedded

    started = args.endpoint is None
    if started:
        from benchmarks.support.stack import dev_assets, stack_config

        os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix="maze-soak-")
        assets = dev_assets(n_extra=0)
        from serving.config import ServingConfig

        # The shipped limits (the test config's are small: 4 images, while an episode sends one a turn).
        cfg = stack_config(assets.base_dir, name="maze-gateway-soak").model_copy(
            update={"limits": ServingConfig.shipped("embedded").limits})
        cfg = with_overrides(cfg, args.engine_kwargs, dict(kv.split("=", 1) for kv in args.env), args.mm_cache_gb)
        if args.allocator:
            cfg = cfg.model_copy(update={"allocator": args.allocator})
        t0 = time.monotonic()
        base_url = embedded.up(cfg, adapters=assets.shipped)
        print(f"stack ready in {time.monotonic() - t0:.0f}s at {base_url}", file=sys.stderr)
        model = args.model or f"{cfg.base_models[0].id}:{next(iter(assets.shipped))}"
        engine_kwargs, mm_cache_gb = cfg.base_models[0].engine_kwargs, cfg.base_models[0].mm_cache_gb
    else:
        base_url, model = args.endpoint, args.model or "maze-tiny:maze-grpo"
        engine_kwargs, mm_cache_gb = None, None
    # Memory is sampled only on the stack this script started; an --endpoint's host is not this machine's to read.
    state = embedded.read_state() if started else None
    # What `up` started the engines with (cpu_affinity adds the worker's binding to the config's env).
    engine_env = {**state.config["env"], **allocator_env(cfg.allocator, state.config["env"])} if state else None
    sample = (lambda: replica_usage(state.ray_pid)) if state else dict
    try:
        result = asyncio.run(soak(base_url, model, args.concurrency, args.duration_s, sample, args.max_turns,
                                  args.duration_s / 2 if args.warmup_s is None else args.warmup_s, args.history))
    finally:
        if started:
            embedded.down()
    out = {"benchmark": "soak", "model": model, "concurrency": args.concurrency, "duration_s": args.duration_s,
           "max_turns": args.max_turns, "history": args.history, "mm_cache_gb": mm_cache_gb, "engine_kwargs": engine_kwargs, "env": engine_env,
           "cpu_affinity": state.config["cpu_affinity"] if state else None, "loadavg_1m_end": round(os.getloadavg()[0], 2),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, **result,
           **provenance([__file__, *sys.argv[1:]], engine_settings(cfg, engine_env) if started else None)}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "replica"} | {
        "replica": {k: v for k, v in result["replica"].items() if k != "samples"}}, indent=2))
    ok = (result["episodes_errored"] == 0 and not result["worker_crashes"]
          and set(result["responses_by_status"]) <= {"200"})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
