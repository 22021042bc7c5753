"""The adapter path against the base model on the embedded gateway, with the evaluation's own workload.

    .venv/bin/python benchmarks/lora_parity.py [--cpu-kernels grouped|vllm] [--rounds 3] [--out ...]

Starts the embedded stack (free ports, its own ``MAZE_HOME``, 8 adapters per replica, ``lora.cpu_kernels``
from ``--cpu-kernels``), then, with episodes played by the agent runner exactly as ``maze-eval`` plays them
(the base model's agent profile: tuple protocol, ``window:2`` history, so up to three images a request;
greedy, 32 tokens a turn):

1. base vs ``maze-grpo`` at concurrency 1, 8 and 32, interleaved: each round runs both models at each
   concurrency, the model that goes first alternating from round to round, so the machine's drift and
   the other load on it hit both alike; turns/s per block and the adapter/base ratio of the summed turns
   and wall times. The two models play different episodes (the base walks into walls and sees the
   same frame again; the adapter solves mazes and sees a new frame each turn), so this ratio mixes
   the adapter's cost with a different workload;
1b. the same turns for both (``replayed``, benchmarks/support/replay.py): each round the adapter's own
   episodes on fresh seeds, recorded through a copy of it under another name, are replayed request by
   request to the base and to ``maze-grpo``, every reply held to its recorded length: the adapter's
   own cost on the evaluation's workload;
2. 8 different adapters mixed vs one adapter at concurrency 8 (8 copies of ``maze-grpo`` under 8 names:
   8 separate adapters and LoRA slots in vLLM with identical arithmetic, so the episodes are the same
   and only the mixing differs), also interleaved;
3. the wall time of the 64-maze ``maze-eval --adapter maze-grpo`` (``evaluation.evaluate``, default
   concurrency) on the ready stack, and of the base model's for reference.

Writes ``benchmarks/results/lora_parity.json`` (``lora_parity_<kernels>.json`` for ``vllm``) with the
load average before and after each part: the ratios come from interleaved blocks, the absolute turns/s
depend on what else ran on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.runner import EndpointConfig, RunnerConfig, SamplingParams, run_endpoint_async
from benchmarks.support.provenance import engine_settings, provenance
from benchmarks.support.replay import record, replay
from benchmarks.support.stack import dev_assets, stack_config

log = logging.getLogger("lora_parity")
ADAPTER = "maze-grpo"
MAX_TOKENS = 32  # maze-eval's default
# Episodes per block at each concurrency: enough turns for a stable rate, bounded in time.
EPISODES = {1: 6, 8: 16, 32: 32}
MIX = 8
RECORDER = "maze-grpo-recorder"  # the adapter's copy whose episodes are replayed to both sides


def runner_config(concurrency: int) -> RunnerConfig:
    # models/maze-tiny's agent profile, as /v1/models reports it and maze-eval uses it.
    return RunnerConfig(protocol="tuple", history="window:2", concurrency=concurrency,
                        sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))


async def block(url: str, models: list[str], seeds: list[int], concurrency: int) -> dict:
    """Play ``seeds`` at ``concurrency``, episode i on ``models[i % len(models)]``; turns/s."""
    groups = [(m, seeds[i::len(models)]) for i, m in enumerate(models)]
    share = max(1, concurrency // len(models))
    t0 = time.perf_counter()
    results = await asyncio.gather(*(
        run_endpoint_async(EndpointConfig(base_url=url, model=m, timeout_s=600), s, runner_config(share))
        for m, s in groups))
    wall = time.perf_counter() - t0
    recs = [r for rs in results for r in rs]
    turns = sum(r.num_turns for r in recs)
    return {"models": len(models), "concurrency": concurrency, "episodes": len(recs), "turns": turns,
            "wall_s": round(wall, 3), "turns_per_s": round(turns / wall, 2), "solved": sum(r.success for r in recs),
            "errors": sum(r.stop_reason.value == "error" for r in recs),
            "prompt_tokens_per_turn": round(sum(t.prompt_tokens or 0 for r in recs for t in r.turns) / max(turns, 1)),
            # The two models' replies differ in length: a turn's decode cost is per reply token.
            "completion_tokens_per_turn": round(sum(t.completion_tokens or 0 for r in recs for t in r.turns)
                                                / max(turns, 1), 2)}


def summarise(blocks: list[dict]) -> dict:
    turns, wall = sum(b["turns"] for b in blocks), sum(b["wall_s"] for b in blocks)
    return {"turns": turns, "wall_s": round(wall, 2), "turns_per_s": round(turns / wall, 2),
            "per_block": [b["turns_per_s"] for b in blocks], "errors": sum(b["errors"] for b in blocks)}


def interleaved(url: str, sides: dict[str, list[str]], concurrency: int, rounds: int) -> dict:
    """Both sides at ``concurrency`` for ``rounds`` rounds, the first side alternating; per-side totals."""
    names = list(sides)
    seeds = list(range(EPISODES.get(concurrency, concurrency)))
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            b = asyncio.run(block(url, sides[name], seeds, concurrency))
            log.info("round %d c=%d %s: %s", r, concurrency, name, b)
            runs[name].append(b)
    out = {n: summarise(bs) for n, bs in runs.items()}
    out["blocks"] = runs
    return out


def round_ratios(adapter: list[dict], base: list[dict], draws: int = 2000) -> dict:
    """Each round's adapter/base turns a second (the two blocks of a round ran back to back), their
    median and a bootstrap 95% interval of the median over the rounds (seeded)."""
    ratios = [a["turns_per_s"] / b["turns_per_s"] for a, b in zip(adapter, base, strict=True)]
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return {"round_ratios": [round(x, 3) for x in ratios], "round_ratio_median": round(statistics.median(ratios), 3),
            "round_ratio_median_ci95": [round(meds[int(0.025 * draws)], 3), round(meds[int(0.975 * draws) - 1], 3)]}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def eval_wall(url: str, adapter: str | None, db: str) -> dict:
    from evaluation import EvalConfig, evaluate

    t0 = time.perf_counter()
    res = evaluate(EvalConfig(endpoint=url, adapter=adapter, db=db))
    wall = time.perf_counter() - t0
    return {"adapter": adapter, "wall_s": round(wall, 1), "status": res.status, "n": res.summary.n,
            "solved": res.summary.solved}


def push_copies(cfg, folder: Path, names: list[str]) -> None:
    from serving.adapters import AdapterStore, export_s3_env

    export_s3_env(cfg)
    store, spec = AdapterStore(cfg.adapters), cfg.base_models[0]
    for name in names:
        store.push(folder, name, base=spec.id, base_source=spec.source, max_rank=cfg.lora.max_rank)


def replayed(cfg, url: str, folder: Path, concurrency: int, rounds: int) -> dict:
    """Base and adapter on the same turns: each round, the adapter's own episodes on fresh seeds
    (recorded through a copy of it under another name, so neither side's prefix cache holds them)
    replayed to both, every reply held to its recorded length, the side going first alternating."""
    base = cfg.base_models[0].id
    push_copies(cfg, folder, [RECORDER])
    n = EPISODES.get(concurrency, concurrency)
    recorded = [asyncio.run(record(url, f"{base}:{RECORDER}", list(range(1000 + r * n, 1000 + (r + 1) * n)),
                                   runner_config(concurrency))) for r in range(rounds)]
    models = {"base": base, "adapter": f"{base}:{ADAPTER}"}
    runs: dict[str, list[dict]] = {"base": [], "adapter": []}
    for r, episodes in enumerate(recorded):
        for name in (("base", "adapter") if r % 2 == 0 else ("adapter", "base")):
            b = asyncio.run(replay(url, models[name], episodes, concurrency))
            log.info("replayed round %d c=%d %s: %s", r, concurrency, name, b)
            if b["errors"]:  # the two sides would be compared over different turns
                raise RuntimeError(f"replay to {models[name]} refused {b['errors']} episode(s) in round {r}")
            runs[name].append(b)
    out = {name: summarise(bs) for name, bs in runs.items()}
    out["blocks"] = runs
    out["ratio_adapter_to_base"] = round(out["adapter"]["turns_per_s"] / out["base"]["turns_per_s"], 3)
    out.update(round_ratios(runs["adapter"], runs["base"]))
    return out


def mixed_vs_one(cfg, url: str, folder: Path, rounds: int) -> dict:
    """8 adapters (copies of ``folder`` under 8 names) mixed vs the first of them alone, at c=8."""
    base = cfg.base_models[0].id
    names = [f"parity-{i}" for i in range(MIX)]
    push_copies(cfg, folder, names)
    models = [f"{base}:{n}" for n in names]
    asyncio.run(block(url, models, list(range(MIX)), MIX))  # load all eight into their slots
    before = load()
    mix = interleaved(url, {"one": models[:1], "mixed": models}, 8, rounds)
    mix["ratio_mixed_to_one"] = round(mix["mixed"]["turns_per_s"] / mix["one"]["turns_per_s"], 3)
    mix["loadavg_before"], mix["loadavg_after"] = before, load()
    log.info("8 mixed / one %.3f", mix["ratio_mixed_to_one"])
    return mix


def run(args) -> dict:
    from serving.local import embedded

    assets = dev_assets(n_extra=0)
    os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix="lora-parity-")
    cfg = stack_config(assets.base_dir, name="lora-parity", resolve_ttl_s=5.0, adapters_per_replica=MIX)
    lora = {"cpu_kernels": args.cpu_kernels}
    if args.merged_slots is not None:
        lora["cpu_merged_slots"] = args.merged_slots
    cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update=lora)})
    t0 = time.monotonic()
    url = embedded.up(cfg, adapters=assets.shipped)
    out: dict = {"cpu_kernels": args.cpu_kernels, "cpu_merged_slots": cfg.lora.cpu_merged_slots, "time_to_ready_s": round(time.monotonic() - t0, 1),
                 "engine": engine_settings(cfg)}
    base, adapter = cfg.base_models[0].id, f"{cfg.base_models[0].id}:{ADAPTER}"
    try:
        asyncio.run(block(url, [base, adapter], [0, 1], 2))  # warm-up: adapter load, first multimodal requests
        out["base_vs_adapter"] = {}
        for c in args.concurrency:
            before = load()
            r = interleaved(url, {"base": [base], "adapter": [adapter]}, c, args.rounds)
            r["ratio_adapter_to_base"] = round(r["adapter"]["turns_per_s"] / r["base"]["turns_per_s"], 3)
            r.update(round_ratios(r["blocks"]["adapter"], r["blocks"]["base"]))
            r["loadavg_before"], r["loadavg_after"] = before, load()
            out["base_vs_adapter"][f"c{c}"] = r
            log.info("c=%d adapter/base %.3f", c, r["ratio_adapter_to_base"])
        if not args.skip_replay:
            out["replayed"] = {}
            for c in args.concurrency:
                before = load()
                r = replayed(cfg, url, assets.shipped[ADAPTER], c, args.rounds)
                r["loadavg_before"], r["loadavg_after"] = before, load()
                out["replayed"][f"c{c}"] = r
                log.info("replayed c=%d adapter/base %.3f", c, r["round_ratio_median"])
        if not args.skip_mix:
            out["eight_mixed_vs_one_c8"] = mixed_vs_one(cfg, url, assets.shipped[ADAPTER], args.rounds)
        if not args.skip_eval:
            db = str(Path(os.environ["MAZE_HOME"]) / "eval.sqlite")
            out["eval_64"] = {}
            for name, a in (("adapter", ADAPTER), ("base", None)):
                before = load()
                e = eval_wall(url, a, db)
                e["load_before"], e["load_after"] = before, load()
                out["eval_64"][name] = e
                log.info("64-maze eval %s: %s", name, e)
    finally:
        embedded.down()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cpu-kernels", choices=["grouped", "vllm"], default="grouped",
                    help="the stack's lora.cpu_kernels (grouped: the gateway's grouped kernels; vllm: vLLM's stock CPU LoRA ops)")
    ap.add_argument("--merged-slots", type=int, default=None,
                    help="the stack's lora.cpu_merged_slots (default: the embedded config's)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per comparison")
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32])
    ap.add_argument("--skip-mix", action="store_true", help="no 8-adapters-mixed comparison")
    ap.add_argument("--skip-replay", action="store_true", help="no replayed-turns comparison")
    ap.add_argument("--skip-eval", action="store_true", help="no 64-maze evaluations")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "openai", "evaluation"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    t0 = time.monotonic()
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "workload": {"runner": "agent.runner via the OpenAI API", "protocol": "tuple", "history": "window:2",
                           "max_tokens": MAX_TOKENS, "temperature": 0, "episodes_per_block": EPISODES,
                           "rounds": args.rounds},
              **run(args)}
    result["targets"] = {"adapter_to_base_min": 0.85, "mixed_to_one_min": 0.8, "eval_64_adapter_wall_s_max": 90}
    result["bench_wall_s"] = round(time.monotonic() - t0, 1)
    result.update(provenance([__file__, *sys.argv[1:]], result.pop("engine")))
    out = args.out or ROOT / "benchmarks" / "results" / (
        "lora_parity.json" if args.cpu_kernels == "grouped" else f"lora_parity_{args.cpu_kernels}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: v.get("ratio_adapter_to_base") for k, v in result["base_vs_adapter"].items()}
    summary["mixed_to_one"] = result.get("eight_mixed_vs_one_c8", {}).get("ratio_mixed_to_one")
    summary["eval_64"] = {k: v["wall_s"] for k, v in result.get("eval_64", {}).items()}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
