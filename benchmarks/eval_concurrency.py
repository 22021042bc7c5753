"""Wall time of the 64-maze evaluation at concurrency 1, 8 and 64, side by side in one run.

Writes ``benchmarks/results/eval_concurrency.json``. Against the embedded gateway by default
(started if needed); ``--endpoint`` points it elsewhere (e.g. the scripted server). The runner's
share is this process's CPU time over the wall time (the runner, client and store all live here;
the engine does not). Each run also records where the machine's CPU went (:mod:`cpu_account`):
per process role, per turn, and the machine's utilisation, which is what limits the speed-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from pathlib import Path

import cpu_account

from agent.config import EndpointConfig, RunnerConfig, SamplingParams
from agent.profiles import AgentProfile
from agent.runner import run_endpoint_async
from evaluation.evaluate import _profile_of, list_models

log = logging.getLogger("bench.eval")
OUT = Path(__file__).parent / "results" / "eval_concurrency.json"


async def one(endpoint: EndpointConfig, profile: AgentProfile, seeds: list[int], concurrency: int) -> dict:
    cfg = RunnerConfig(protocol=profile.protocol, history=profile.history, concurrency=concurrency,
                       sampling=SamplingParams(temperature=0.0, max_tokens=16))
    snap0 = cpu_account.snapshot()
    cpu0, t0 = time.process_time(), time.perf_counter()
    recs = await run_endpoint_async(endpoint, seeds, cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    account = cpu_account.diff(snap0, cpu_account.snapshot(), wall)
    turns = sum(r.num_turns for r in recs)
    account["cpu_ms_per_turn_by_role"] = {k: round(1000 * v / max(turns, 1), 1) for k, v in account["cpu_s_by_role"].items()}
    account["machine_cpu_ms_per_turn"] = round(1000 * account["machine_busy_cpu_s"] / max(turns, 1), 1)
    return {
        "concurrency": concurrency,
        "wall_s": round(wall, 3),
        "episodes": len(recs),
        "turns": turns,
        "solved": sum(r.success for r in recs),
        "errors": sum(r.stop_reason.value == "error" for r in recs),
        "turns_per_s": round(turns / wall, 2),
        "runner_cpu_s": round(cpu, 3),
        "runner_share_of_wall": round(cpu / wall, 4),
        "cpu": account,
    }


async def main_async(args) -> dict:
    if args.endpoint:
        url = args.endpoint
    else:
        from serving.embedded import ensure_embedded_gateway

        url = await asyncio.to_thread(ensure_embedded_gateway)
    models = await list_models(url, "EMPTY")
    base = args.model.split(":")[0] if args.model else next(m["id"] for m in models if ":" not in m["id"])
    model = args.model or base
    profile = _profile_of(models, base)
    endpoint = EndpointConfig(base_url=url, model=model, timeout_s=600)
    seeds = list(range(args.seeds))
    await one(endpoint, profile, seeds[:2], 2)  # warm-up: adapter load, caches
    runs = [await one(endpoint, profile, seeds, c) for c in args.concurrency]
    base_wall = runs[0]["wall_s"]
    for r in runs:
        r["speedup_vs_c1"] = round(base_wall / r["wall_s"], 2)
    return {"endpoint": url, "model": model, "cpu_count": os.cpu_count(), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="OpenAI-compatible base URL (default: the embedded gateway)")
    parser.add_argument("--model", help="model id (default: the endpoint's first base model)")
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("httpx", "httpx2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    log.info(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
