"""GRPO rollout speed: the KV-cached reply sampling against the uncached path it replaced.

Plays the same mazes with the shipped base + adapter both ways, alternating which goes first each
round, and writes ``benchmarks/results/rollout_cache.json``: seconds per round, turns, reply
tokens, and the speed-up (median uncached / median cached). Also checks that both ways played the
same episodes (greedy: identical replies). Runs on CPU here; ``--device cuda`` on the GPU machine.

    python benchmarks/rollout_cache.py --episodes 32 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from agent.maze import generate_from_seed
from training.tiny.diagnostics import FastPolicy

log = logging.getLogger("bench.rollout_cache")
MODELS = Path(__file__).resolve().parents[1] / "models"
OUT = Path(__file__).parent / "results" / "rollout_cache.json"


def main(argv: list[str] | None = None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--episodes", type=int, default=32, help="mazes per round (seeds 0..N-1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    policy = FastPolicy.load(MODELS / "maze-tiny", MODELS / "maze-grpo", args.device)
    device = policy.device
    layouts = [generate_from_seed(7, 7, s) for s in range(args.episodes)]

    def settings(cached: bool):
        return policy.settings(args.temperature, max_new_tokens=12, kv_cache=cached)

    policy.play(layouts[:2], settings(True))  # warm-up: frames, prompts
    seconds: dict[str, list[float]] = {"cached": [], "uncached": []}
    played: dict[str, list] = {}
    for r in range(args.rounds):
        for cached in ((True, False) if r % 2 == 0 else (False, True)):
            name = "cached" if cached else "uncached"
            t0 = time.perf_counter()
            eps = policy.play(layouts, settings(cached), seed=r)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds[name].append(round(time.perf_counter() - t0, 3))
            played[name] = eps
            log.info("round %d %s: %.1fs", r, name, seconds[name][-1])
    eps = played["cached"]
    same = sum(c.conversation == u.conversation for c, u in zip(played["cached"], played["uncached"], strict=True))
    med = {k: statistics.median(v) for k, v in seconds.items()}
    result = {
        "benchmark": "rollout_cache",
        "machine": {"platform": platform.platform(), "device": str(device), "threads": torch.get_num_threads()},
        "episodes": args.episodes, "rounds": args.rounds, "temperature": args.temperature,
        "turns": sum(len(e.turns) for e in eps),
        "reply_tokens": sum(len(t.tokens) for e in eps for t in e.turns),
        "solved": sum(e.success for e in eps),
        "same_episodes": same,
        "seconds": seconds,
        "median_s": med,
        "speedup_uncached_over_cached": round(med["uncached"] / med["cached"], 2),
        # HF transformers in this process: no serving engine.
        **_provenance(argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("speed-up x%.2f (uncached %.1fs, cached %.1fs); %d/%d episodes identical",
             result["speedup_uncached_over_cached"], med["uncached"], med["cached"], same, args.episodes)
    return result


def _provenance(argv: list[str] | None) -> dict:
    sys.path.insert(0, str(MODELS.parent))  # run as a script: benchmarks/ is not an installed package
    from benchmarks.support.provenance import provenance

    return provenance([__file__, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
