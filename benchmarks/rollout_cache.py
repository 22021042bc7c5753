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
import time
from pathlib import Path

import torch

import training  # noqa: F401 - makes torchvision importable on CPU torch
from agent.mazes import generate_from_seed
from training.demos import read_profile
from training.fastpath import FastQwen3VL, FrameBank, FrameCatalog
from training.grpo_local import GRPOConfig, build_policy, load_adapter_weights
from training.rollout import RolloutSettings, play
from training.sft import make_codec

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
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = GRPOConfig(model_path=str(MODELS / "maze-tiny"), ckpt_path="-", export_path="-", device=args.device)
    model, processor = build_policy(cfg, device)
    load_adapter_weights(model, MODELS / "maze-grpo")
    model.eval()
    bank = FrameBank(FrameCatalog(7), processor.image_processor, device,
                     dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    fast, codec, profile = FastQwen3VL(model, bank.grid_thw), make_codec(processor), read_profile(MODELS / "maze-tiny")
    layouts = [generate_from_seed(7, 7, s) for s in range(args.episodes)]

    def settings(cached: bool) -> RolloutSettings:
        return RolloutSettings(max_turns=15, temperature=args.temperature, max_new_tokens=12,
                               history=profile["history"], protocol=profile["protocol"], kv_cache=cached)

    play(fast, bank, codec, bank.catalog, layouts[:2], settings(True), device=device)  # warm-up: frames, prompts
    seconds: dict[str, list[float]] = {"cached": [], "uncached": []}
    played: dict[str, list] = {}
    for r in range(args.rounds):
        for cached in ((True, False) if r % 2 == 0 else (False, True)):
            name = "cached" if cached else "uncached"
            t0 = time.perf_counter()
            eps = play(fast, bank, codec, bank.catalog, layouts, settings(cached),
                       generator=torch.Generator(device=device).manual_seed(r), device=device)
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
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("speed-up x%.2f (uncached %.1fs, cached %.1fs); %d/%d episodes identical",
             result["speedup_uncached_over_cached"], med["uncached"], med["cached"], same, args.episodes)
    return result


if __name__ == "__main__":
    main()
