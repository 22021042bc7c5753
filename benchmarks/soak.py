"""Soak: many concurrent episodes through the gateway for a fixed time; errors and replica memory.

    .venv/bin/python benchmarks/soak.py [--concurrency 256] [--duration-s 180] [--endpoint URL]
                                        [--out benchmarks/results/soak.json]

Starts the embedded stack (unless ``--endpoint`` names a running gateway), then keeps
``--concurrency`` episodes in flight (each worker plays one seed after another, the runner's real
multi-turn loop with images) for ``--duration-s``; the episodes still in flight then are cut.
Retries are off, so every failed request shows as an errored episode and a non-200 status: the
target is 0 errors, every response a 200, and the serving replica's resident memory (the Serve
replica and its vLLM engine processes) flat: start, peak and end, sampled every 2 s.
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

from agent.config import EndpointConfig, RetryPolicy, RunnerConfig, SamplingParams
from agent.policies import OpenAIPolicy
from agent.runner import EpisodeSpec, run_episodes_async


def replica_rss_mb(ray_sid: int) -> float:
    """Resident memory of the serving replica and the processes it started (vLLM's engine), in MB."""
    import psutil

    total = 0
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if os.getsid(proc.pid) != ray_sid:
                continue
            text = " ".join(proc.info["cmdline"] or []) + (proc.info["name"] or "")
            if "ServeReplica" in text or "VLLM" in text or "EngineCore" in text:
                total += proc.memory_info().rss
        except (psutil.Error, OSError):
            continue
    return round(total / 2**20, 1)


async def soak(base_url: str, model: str, concurrency: int, duration_s: float, sample, max_turns: int | None) -> dict:
    import httpx
    from openai import AsyncOpenAI

    statuses: dict[str, int] = {}

    async def count(response: httpx.Response) -> None:
        statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    cfg = RunnerConfig(retry=RetryPolicy(max_attempts=1), concurrency=1, sampling=SamplingParams(max_tokens=16),
                       max_turns=max_turns)
    endpoint = EndpointConfig(base_url=base_url, model=model, timeout_s=duration_s + 600)
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency)
    http = httpx.AsyncClient(timeout=endpoint.timeout_s, event_hooks={"response": [count]}, limits=limits)
    policy = OpenAIPolicy(endpoint, client=AsyncOpenAI(base_url=base_url, api_key="EMPTY", http_client=http,
                                                        max_retries=0))
    stats = {"episodes_completed": 0, "episodes_errored": 0, "turns_completed": 0, "solved": 0, "errors": {}}
    next_seed = iter(range(10**9))
    rss: list[tuple[float, float]] = []
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
            rss.append((round(time.monotonic() - t0, 1), await asyncio.to_thread(sample)))
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
    rss.append((round(time.monotonic() - t0, 1), sample()))
    elapsed = time.monotonic() - t0
    values = [v for _, v in rss]
    answered = sum(statuses.values())
    return {**stats, "worker_crashes": [repr(e)[:200] for e in failed], "elapsed_s": round(elapsed, 1),
            "responses_by_status": statuses, "responses": answered,
            "responses_per_s": round(answered / elapsed, 2),
            "replica_rss_mb": {"start": values[0], "peak": max(values), "end": values[-1],
                               "samples": rss[:: max(1, len(rss) // 60)]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--duration-s", type=float, default=180.0)
    ap.add_argument("--endpoint", help="a running gateway's base URL (default: start the embedded stack)")
    ap.add_argument("--model", help="model to play (default: the stack's base with its shipped adapter)")
    ap.add_argument("--max-turns", type=int, help="turn limit per episode (default: the variant's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "soak.json"))
    args = ap.parse_args()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    from serving import embedded

    started = args.endpoint is None
    if started:
        from benchmarks.stack import dev_assets, stack_config

        os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix="maze-soak-")
        assets = dev_assets(n_extra=0)
        from serving.config import ServingConfig

        # The shipped limits (the test config's are small: 4 images, while an episode sends one a turn).
        cfg = stack_config(assets.base_dir, name="maze-gateway-soak").model_copy(
            update={"limits": ServingConfig.shipped("embedded").limits})
        t0 = time.monotonic()
        base_url = embedded.up(cfg, adapters=assets.shipped)
        print(f"stack ready in {time.monotonic() - t0:.0f}s at {base_url}", file=sys.stderr)
        model = args.model or f"{cfg.base_models[0].id}:{next(iter(assets.shipped))}"
    else:
        base_url, model = args.endpoint, args.model or "maze-tiny:maze-grpo"
    # Memory is sampled only on the stack this script started; an --endpoint's host is not this machine's to read.
    state = embedded.read_state() if started else None
    sample = (lambda: replica_rss_mb(state.ray_pid)) if state else (lambda: 0.0)
    try:
        result = asyncio.run(soak(base_url, model, args.concurrency, args.duration_s, sample, args.max_turns))
    finally:
        if started:
            embedded.down()
    out = {"benchmark": "soak", "model": model, "concurrency": args.concurrency, "duration_s": args.duration_s,
           "max_turns": args.max_turns, "loadavg_1m_end": round(os.getloadavg()[0], 2),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, **result}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "replica_rss_mb"} | {
        "replica_rss_mb": {k: v for k, v in result["replica_rss_mb"].items() if k != "samples"}}, indent=2))
    ok = (result["episodes_errored"] == 0 and not result["worker_crashes"]
          and set(result["responses_by_status"]) <= {"200"})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
