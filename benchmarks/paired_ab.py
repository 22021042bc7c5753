"""Gateway vs plain vLLM with both up at once, measured in alternating blocks (a paired A/B).

    PYTHONPATH=. .venv/bin/python benchmarks/paired_ab.py [--blocks 30] [--variants embedded,ray-niceness-0]

Back-to-back runs on this 2-core VM drift by tens of percent from one minute to the next
(docs/benchmarks.md), more than the gap being measured. Here the vLLM api_server and one gateway
variant are up together and the measurement alternates between them in short blocks (a few
seconds each, the side that goes first alternating), so drift hits both sides alike. Two idle
vLLM engines side by side interfere (each engine's busy loop takes a core: the first try, which
alternated single requests with both running, measured p95 ~1 s on both sides), so while one side
is measured every process of the other side is stopped (SIGSTOP, SIGCONT after the block: the
api_server with its engine; the embedded stack's whole ``ray start`` session).

Like for like: the vLLM side is started from the same config as the gateway's side
(``gateway_bench.vllm_launch``): every engine argument the gateway's LLMConfig gives its engine
(the LoRA limits, the image cache, the worker extension with the grouped CPU LoRA kernels, the mp
executor), the engine env (jemalloc preloaded, the worker's core binding), the same core split
(the engine worker alone on its core, every other process of that side on the others) and Ray's
niceness 15. The ratio then measures the gateway itself: Ray Serve, the ingress, auth and the
adapter machinery in front of the same engine.

A variant changes one setting of the shipped embedded config on BOTH sides, so each setting's
effect is shown on each: ``embedded`` (as shipped), ``cpu-affinity-none`` (no core split,
serving/engine/cpu_affinity.py), ``ray-niceness-0`` (engines at nice 0 instead of Ray's 15),
``glibc-mmap-threshold`` (glibc's malloc with the fixed ``MALLOC_MMAP_THRESHOLD_`` that is the
fallback without jemalloc, serving/engine/allocator.py), ``glibc-mmap-default`` (glibc's malloc as
is), ``vllm-lora-kernels`` (vLLM's stock CPU LoRA ops instead of serving/engine/lora_kernels.py's
grouped ones) and ``mm-cache-4gb`` (vLLM's default processed-image cache size instead of the
config's 0.5 GiB). Each variant runs ``--runs`` times, both sides started afresh each run.

Figures per variant:

* ``c1``: per block of ``--per-block`` requests at concurrency 1 (after 2 discarded warm-up
  requests), the p50 of each side; ``p50_added_pct`` from the pooled latencies, the median of the
  per-block-pair ratios (gateway p50 / vLLM p50) with a bootstrap 95% interval, and the same for
  each half of the blocks (is it stable?);
* ``c8``: throughput in alternating blocks of ``--c8-per-block`` requests (after 16 warm-up
  requests) at concurrency 8, the median block ratio with a bootstrap 95% interval, and each side's
  CPU seconds per request by process role;
* ``runs``: per variant, the median over every run's blocks with an interval that resamples runs,
  then blocks within each run (the runs differ more than the blocks of one run do, so an interval
  that resamples blocks alone is too narrow), each run's own interval, and the spread of the per-run
  medians (min, max).

The machine's other load is recorded per block: the CPU of every process that belongs to neither
side nor the benchmark, in cores. The rule for a busy block is fixed before the run (``--busy-cores``,
written into the results file first): a block pair where either block saw more other load is busy.
Every figure is given over all blocks and, beside it, over the quiet pairs only.

The request is the gateway bench's (one-turn chat, one maze image, 8 tokens, ``ignore_eos``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support import cpu_account
from benchmarks.support.gateway_bench import (
    maze_png_url,
    payload,
    run_load,
    session_procs,
    start_gateway,
    start_vllm,
    stop_vllm,
    variant_config,
    vllm_launch,
)
from benchmarks.support.stack import dev_assets
from serving.engine import allocator_env

log = logging.getLogger("paired_ab")


# name -> changes to the shipped embedded config: ``ray_env`` (the environment of ``ray start``),
# ``engine_env`` (the config's engine ``env``; None removes one), ``allocator``, ``lora`` (fields of
# its ``lora`` section), ``base`` (fields of its base model).
VARIANTS: dict[str, dict] = {
    "embedded": {},
    "cpu-affinity-none": {"cpu_affinity": "none"},
    "ray-niceness-0": {"ray_env": {"RAY_worker_niceness": "0"}},
    "glibc-mmap-threshold": {"allocator": "system", "engine_env": {"MALLOC_MMAP_THRESHOLD_": "65536"}},
    "glibc-mmap-default": {"allocator": "system"},
    "vllm-lora-kernels": {"lora": {"cpu_kernels": "vllm"}},
    "mm-cache-4gb": {"base": {"mm_cache_gb": 4.0}},
}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def median_ci95(values: list[float], rounds: int = 2000) -> list[float]:
    """95% interval of the median of ``values``: bootstrap over them (seeded, so reruns agree)."""
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return [round(boot[int(0.025 * rounds)], 3), round(boot[int(0.975 * rounds) - 1], 3)]


def runs_median_ci95(runs: list[list[float]], rounds: int = 2000) -> list[float] | None:
    """95% interval of the median of all runs' blocks, resampling runs and then each drawn run's
    blocks (seeded). With one run it is the blocks' own interval; None when no run has a block."""
    runs = [r for r in runs if r]
    if not runs:
        return None
    rng = random.Random(0)
    boot = sorted(statistics.median([x for run in rng.choices(runs, k=len(runs)) for x in rng.choices(run, k=len(run))])
                  for _ in range(rounds))
    return [round(boot[int(0.025 * rounds)], 3), round(boot[int(0.975 * rounds) - 1], 3)]


class OtherLoad:
    """CPU cores used during a block by processes of neither side nor this benchmark."""

    def __init__(self, side_pids: list[int]):
        self.pids = [*side_pids, os.getpid()]
        self.t, self.busy, self.own = time.perf_counter(), self._busy(), self._own()

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return sum(getattr(t, k) for k in t._fields if k not in ("idle", "iowait", "guest", "guest_nice"))

    def _own(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                c = psutil.Process(pid).cpu_times()
                total += c.user + c.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return total

    def cores(self) -> float:
        wall = max(time.perf_counter() - self.t, 1e-6)
        return round(max(0.0, (self._busy() - self.busy) - (self._own() - self.own)) / wall, 3)


def busy_pairs(loads: dict[str, list[float]], limit: float) -> list[int]:
    """The block pairs where either side's block saw more than ``limit`` cores of other load."""
    return [i for i, pair in enumerate(zip(*loads.values(), strict=True)) if max(pair) > limit]


def _c1_figures(gw: list[list[float]], vl: list[list[float]]) -> dict:
    """Figures from per-block latency lists of both sides (block i of each side forms pair i)."""
    flat_gw, flat_vl = [x for b in gw for x in b], [x for b in vl for x in b]
    ratios = [statistics.median(g) / statistics.median(v) for g, v in zip(gw, vl, strict=True)]
    return {"blocks": len(gw), "requests_per_side": len(flat_gw),
            "median_block_ratio_ci95": median_ci95(ratios),
            "block_ratios": [round(r, 3) for r in ratios],
            "vllm_p50_s": round(statistics.median(flat_vl), 4), "gateway_p50_s": round(statistics.median(flat_gw), 4),
            "vllm_p95_s": round(_pct(flat_vl, 0.95), 4), "gateway_p95_s": round(_pct(flat_gw, 0.95), 4),
            "p50_added_pct": round(100 * (statistics.median(flat_gw) / statistics.median(flat_vl) - 1), 1),
            "median_block_ratio": round(statistics.median(ratios), 3)}


class Side:
    """One stack under test: its base URL and the processes to stop while the other side runs."""

    def __init__(self, url: str, pids: list[int]):
        self.url, self.pids = url, pids

    def pause(self) -> None:
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.pids:
            os.kill(pid, signal.SIGCONT)


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (the plain vLLM api_server with its engine processes)."""
    proc = psutil.Process(root)
    return [proc.pid] + [c.pid for c in proc.children(recursive=True)]


def session_pids(sid: int) -> list[int]:
    """Every process of session ``sid`` (the embedded stack's ``ray start``: Ray, Serve, the replica
    and its engine), so a paused gateway leaves nothing of itself running, as a paused vLLM does."""
    return [p.pid for p in session_procs([sid])]


async def _timed(client: httpx.AsyncClient, image: str) -> float:
    t = time.perf_counter()
    r = await client.post("/chat/completions", json=payload("maze-tiny", image))
    r.raise_for_status()
    return time.perf_counter() - t


def alternate(sides: dict[str, Side], blocks: int, measure) -> tuple[dict[str, list], dict[str, list[float]]]:
    """``blocks`` x (``measure(side)`` on each side with the other paused), order alternating; the
    measurements and each block's other load (cores)."""
    out: dict[str, list] = {k: [] for k in sides}
    loads: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(blocks):
        for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            others = [s for k, s in sides.items() if k != name]
            for s in others:
                s.pause()
            try:
                other = OtherLoad(sides[name].pids + [p for s in others for p in s.pids])
                out[name].append(measure(sides[name]))
                loads[name].append(other.cores())
            finally:
                for s in others:
                    s.resume()
    return out, loads


def _with_load(out: dict, loads: dict[str, list[float]], limit: float) -> dict:
    busy = busy_pairs(loads, limit)
    quiet = [r for i, r in enumerate(out["block_ratios"]) if i not in busy]
    return {**out, "other_load_cores": loads, "busy_pairs": busy,
            "quiet_median_block_ratio": round(statistics.median(quiet), 3) if quiet else None,
            "quiet_median_block_ratio_ci95": median_ci95(quiet) if quiet else None}


def paired_c1(sides: dict[str, Side], image: str, blocks: int, per_block: int, busy_cores: float) -> dict:
    async def block(side: Side) -> list[float]:
        async with httpx.AsyncClient(base_url=side.url, timeout=300) as client:
            for _ in range(2):  # wake the engine and the connection
                await _timed(client, image)
            return [await _timed(client, image) for _ in range(per_block)]

    lat, loads = alternate(sides, blocks, lambda side: asyncio.run(block(side)))
    half = blocks // 2
    out = _c1_figures(lat["gateway"], lat["vllm"])
    out["halves"] = [_c1_figures(lat["gateway"][:half], lat["vllm"][:half]),
                     _c1_figures(lat["gateway"][half:], lat["vllm"][half:])]
    return _with_load(out, loads, busy_cores)


def paired_c8(sides: dict[str, Side], image: str, blocks: int, per_block: int, busy_cores: float) -> dict:
    cpu: dict[str, dict[str, float]] = {name: {} for name in sides}

    def block(side: Side) -> float:
        asyncio.run(run_load(side.url, ["maze-tiny"], 16, 8, image))  # wake up
        before, t = cpu_account.snapshot(), time.perf_counter()
        rps = asyncio.run(run_load(side.url, ["maze-tiny"], per_block, 8, image))["throughput_rps"]
        used = cpu_account.diff(before, cpu_account.snapshot(), time.perf_counter() - t)["cpu_s_by_role"]
        mine = cpu[next(k for k, s in sides.items() if s is side)]
        # Every role, not only the side's own: Ray's daemons and Serve's controller share the cores too.
        for role, seconds in used.items():
            mine[role] = mine.get(role, 0.0) + seconds
        return rps

    rps, loads = alternate(sides, blocks, block)
    ratios = [g / v for g, v in zip(rps["gateway"], rps["vllm"], strict=True)]
    per_request = {name: {role: round(1000 * s / (per_block * blocks), 1) for role, s in roles.items() if s}
                   for name, roles in cpu.items()}
    out = {"blocks": blocks, "requests_per_block": per_block, "vllm_rps": rps["vllm"], "gateway_rps": rps["gateway"],
           "block_ratios": [round(r, 3) for r in ratios], "cpu_ms_per_request": per_request,
           "median_block_ratio": round(statistics.median(ratios), 3), "median_block_ratio_ci95": median_ci95(ratios)}
    return _with_load(out, loads, busy_cores)


def idle_cpu(seconds: float = 10.0) -> float:
    before, t = cpu_account.snapshot(), time.perf_counter()
    time.sleep(seconds)
    d = cpu_account.diff(before, cpu_account.snapshot(), time.perf_counter() - t)
    return round(d["machine_busy_cpu_s"] / seconds, 3)


def run_variant(variant: str, assets, image: str, args) -> dict:
    """One run of ``variant``: both sides started from the variant's config, measured, stopped."""
    from serving.local import embedded

    spec = VARIANTS[variant]
    changes = {k: spec[k] for k in ("engine_env", "lora", "allocator", "base", "cpu_affinity") if k in spec}
    cfg = variant_config(assets, f"maze-paired-{variant}", **changes)
    proc, vl_url, logf = start_vllm(assets.base_dir, cfg, spec.get("ray_env"))
    vllm = Side(vl_url, tree_pids(proc.pid))
    try:
        vllm_idle = idle_cpu()
        vllm.pause()  # the gateway's start and its idle load are measured without the other engine
        try:
            cfg, gw_url, ready = start_gateway(assets, f"maze-paired-{variant}", env=spec.get("ray_env"), cfg=cfg)
            idle = idle_cpu()
        finally:
            vllm.resume()
        try:
            # Pauses last ~1-2 s, far below Ray's and Serve's health-check timeouts (10 s and more).
            sides = {"vllm": vllm, "gateway": Side(gw_url, session_pids(os.getsid(embedded.read_state().ray_pid)))}
            launch = vllm_launch(cfg, spec.get("ray_env"))
            out = {"layout": cfg.layout, "ingress": cfg.ingress, "ray_env": spec.get("ray_env", {}),
                   "allocator": cfg.allocator, "cpu_affinity": cfg.cpu_affinity,
                   "engine_env": {**cfg.env, **allocator_env(cfg.allocator, cfg.env)},
                   "lora_cpu_kernels": cfg.cpu_lora_kernels, "time_to_ready_s": ready,
                   "vllm_side": {"args": launch["args"], "env": launch["env"], "niceness": launch["niceness"],
                                 "core_split": None if launch["split"] is None else
                                 {"worker": list(launch["split"].worker), "rest": list(launch["split"].rest)}},
                   "idle_cpu_cores_gateway_alone": idle, "idle_cpu_cores_vllm_alone": vllm_idle}
            out["c1"] = paired_c1(sides, image, args.blocks, args.per_block, args.busy_cores)
            log.info("%s c1: %s", variant, json.dumps(out["c1"]))
            out["c8"] = paired_c8(sides, image, args.c8_blocks, args.c8_per_block, args.busy_cores)
            log.info("%s c8: %s", variant, json.dumps(out["c8"]))
        finally:
            embedded.down()
    finally:
        stop_vllm(proc, logf)
    return out


def pooled(runs: list[dict]) -> dict:
    """A variant's figures over all its runs: the median of every block, its interval resampling runs
    then blocks, each run's own median and interval, and the same over the quiet block pairs (busy
    ones, by the rule fixed before the run, left out; None where a run recorded no load)."""
    out: dict = {"runs": len(runs)}
    for c in ("c1", "c8"):
        blocks = [run[c]["block_ratios"] for run in runs]
        per_run = [run[c]["median_block_ratio"] for run in runs]
        out.update({f"{c}_median_block_ratio": round(statistics.median([r for b in blocks for r in b]), 3),
                    f"{c}_median_block_ratio_ci95": runs_median_ci95(blocks),
                    f"{c}_per_run": per_run, f"{c}_per_run_ci95": [run[c]["median_block_ratio_ci95"] for run in runs],
                    f"{c}_spread": [min(per_run), max(per_run)]})
        if all("busy_pairs" in run[c] for run in runs):
            quiet = [[r for i, r in enumerate(run[c]["block_ratios"]) if i not in run[c]["busy_pairs"]] for run in runs]
            flat = [r for q in quiet for r in q]
            out.update({f"{c}_busy_pairs": sum(len(run[c]["busy_pairs"]) for run in runs),
                        f"{c}_quiet_median_block_ratio": round(statistics.median(flat), 3) if flat else None,
                        f"{c}_quiet_median_block_ratio_ci95": runs_median_ci95(quiet)})
        else:
            out.update({f"{c}_busy_pairs": None, f"{c}_quiet_median_block_ratio": None,
                        f"{c}_quiet_median_block_ratio_ci95": None})
    ci = out["c1_median_block_ratio_ci95"]
    out["c1_p50_added_pct"] = round(100 * (out["c1_median_block_ratio"] - 1), 1)
    out["c1_p50_added_pct_ci95"] = [round(100 * (x - 1), 1) for x in ci]
    return out


def git_commit() -> str:
    import subprocess

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summarize(path: Path) -> int:
    """Rewrite ``path``'s pooled figures and summary from its runs (no measurement)."""
    results = json.loads(path.read_text())
    for variant in results["variants"].values():
        variant["pooled"] = pooled(variant["runs"])
    results["summary"] = {v: r["pooled"] for v, r in results["variants"].items()}
    path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paired_ab.json")
    ap.add_argument("--runs", type=int, default=3, help="runs of each variant, both sides started afresh each")
    ap.add_argument("--blocks", type=int, default=20, help="block pairs at concurrency 1")
    ap.add_argument("--per-block", type=int, default=10, help="measured requests per block at concurrency 1")
    ap.add_argument("--c8-blocks", type=int, default=8, help="block pairs at concurrency 8")
    # ~6 s a block: long against the hiccups of a shared 2-core machine (a 64-request block lasts ~1.5 s,
    # and single blocks of either side then ran at half the speed of their neighbours).
    ap.add_argument("--c8-per-block", type=int, default=256, help="measured requests per block at concurrency 8")
    ap.add_argument("--busy-cores", type=float, default=0.25,
                    help="a block pair is busy when either block saw more than this many cores of other load "
                         "(processes of neither side nor the benchmark); fixed before the run, written first")
    ap.add_argument("--summarize", type=Path, default=None,
                    help="recompute the pooled figures of an existing results file from its runs' blocks, and stop")
    ap.add_argument("--variants", default="embedded", help=f"comma-separated, from {list(VARIANTS)}")
    ap.add_argument("--variant-runs", type=int, default=None,
                    help="runs of each variant other than embedded (default: --runs): the shipped settings get "
                         "the runs the headline needs, each changed setting fewer")
    args = ap.parse_args()
    if args.summarize is not None:
        return summarize(args.summarize)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    assets = dev_assets(n_extra=0)
    image = maze_png_url()
    results: dict = {"commit": git_commit(), "command": " ".join(["benchmarks/paired_ab.py", *sys.argv[1:]]),
                     "machine": {"cpus": os.cpu_count()}, "runs": args.runs, "variant_runs": args.variant_runs or args.runs, "blocks": args.blocks,
                     "per_block": args.per_block, "c8_blocks": args.c8_blocks, "c8_per_block": args.c8_per_block,
                     "busy_rule": {"cores": args.busy_cores, "rule": "a block pair is busy when either block saw more "
                                   "than this many cores used by processes of neither side nor the benchmark"},
                     "variants": {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")  # the rule is on record before any block runs
    t0 = time.monotonic()
    for variant in args.variants.split(","):
        runs = results["variants"].setdefault(variant, {"runs": []})["runs"]
        n = args.runs if variant == "embedded" or args.variant_runs is None else args.variant_runs
        for _ in range(n):
            runs.append(run_variant(variant, assets, image, args))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
        results["variants"][variant]["pooled"] = pooled(runs)
    results["summary"] = {v: r["pooled"] for v, r in results["variants"].items()}
    results["bench_wall_s"] = round(time.monotonic() - t0)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    log.info("summary %s", json.dumps(results["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
