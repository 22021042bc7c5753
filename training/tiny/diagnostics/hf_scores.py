"""Reproduce the scores table of the shipped models with HF transformers on CPU.

Plays maze_2d/simple seeds 0..63 greedily (max 15 turns) through the real runner
(``agent.runner``) with an HF policy (:mod:`training.tiny.policies.hf`), under the protocol and history
policy the model folder records in ``agent_profile.json``. ``maze-grpo`` is loaded as a peft
LoRA adapter on ``maze-tiny`` (not merged).

Usage::

    python -m training.tiny.diagnostics.hf_scores                       # both models, prints the table
    python -m training.tiny.diagnostics.hf_scores --json models/scores_hf.json --seeds 64
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import torch

from agent.runner import EpisodeRecord, StopReason
from training.tiny.data import read_profile
from training.tiny.policies import evaluate_hf, load_model

log = logging.getLogger("training.tiny.diagnostics.hf_scores")

MODELS_DIR = Path(__file__).resolve().parents[3] / "models"


def failure_modes(records: list[EpisodeRecord], tail: int = 5) -> dict:
    """How the episodes went wrong: failures that end stuck (the last ``tail`` turns all bumped
    into a wall: greedy decoding at an unchanged state repeats itself) and the share of wall bumps."""
    failed = [r for r in records if not r.success]
    stuck = [r for r in failed if len(r.turns) >= tail and all(t.feedback_code == "HIT_WALL" for t in r.turns[-tail:])]
    turns = sum(len(r.turns) for r in records)
    return {
        "failed": len(failed),
        "failed_stuck_at_wall": len(stuck),
        "failed_turn_limit": sum(r.stop_reason == StopReason.TURN_LIMIT for r in failed),
        "wall_bump_share": round(sum(r.wall_bumps for r in records) / max(1, turns), 3),
    }


def score(name: str, base: Path, adapter: Path | None, seeds: int, max_turns: int = 15) -> dict:
    """Greedy solve rate and per-seed outcomes of one model."""
    torch.manual_seed(0)
    profile = read_profile(base)
    model, processor = load_model(base, adapter)
    t0 = time.perf_counter()
    rate, records = evaluate_hf(model, processor, range(seeds), profile["history"], max_turns,
                                env_id=profile.get("env_id", "maze_2d/simple"), protocol=profile["protocol"], label=name)
    return {
        "model": name,
        "solve_rate": rate,
        "solved": sum(r.success for r in records),
        "episodes": len(records),
        "history": profile["history"],
        "protocol": profile["protocol"],
        "backend": "hf-transformers-cpu",
        "seconds": round(time.perf_counter() - t0, 1),
        "failure_modes": failure_modes(records),
        "outcomes": {str(r.seed): bool(r.success) for r in records},
    }


def main(argv: list[str] | None = None) -> list[dict]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    parser.add_argument("--seeds", type=int, default=64, help="seeds 0..N-1")
    parser.add_argument("--only", choices=["maze-tiny", "maze-grpo"], help="score one model")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    base = args.models_dir / "maze-tiny"
    todo = [("maze-tiny", None), ("maze-grpo", args.models_dir / "maze-grpo")]
    results = [score(n, base, a, args.seeds) for n, a in todo if args.only in (None, n)]
    print(f"{'model':<10} {'solved':>7} {'rate':>7}  (maze_2d/simple seeds 0..{args.seeds - 1}, greedy, 15 turns, HF CPU)")
    for r in results:
        f = r["failure_modes"]
        print(f"{r['model']:<10} {r['solved']:>4}/{r['episodes']:<2} {r['solve_rate']:>7.2%}  failed {f['failed']}: "
              f"{f['failed_stuck_at_wall']} stuck at a wall; wall bumps {f['wall_bump_share']:.0%} of turns")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
