"""Greedy solve rate on every task of ``maze_2d/simple``, not just the 64 eval seeds.

A 7x7 ``maze_2d/simple`` maze is one of 192 perfect mazes on a 3x3 room grid, with start and goal
in opposite corners (4 choices): 768 tasks in all, and seeds 0..63 are 64 draws from them (with
repeats). Playing all 768 greedily tells how far the eval figure generalises (an adapter picked
on the eval seeds reads optimistic there) and splits the misses into mazes whose optimal path
only closes in on the goal ("direct") and those that need a detour.

Usage::

    python -m training.tiny.diagnostics.task_sweep --json models/curves/task_sweep.json   # both models, + task_sweep.png
    python -m training.tiny.diagnostics.task_sweep --only maze-grpo --limit 32            # a quick look
    python -m training.tiny.diagnostics.task_sweep --only maze-grpo --json models/curves/task_sweep.json  # replace one row
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from agent.maze import MazeLayout, detour_moves, generate_from_seed, shortest_path
from training.tiny.diagnostics.fast_policy import FastPolicy
from training.tiny.diagnostics.plots import plot_sweep

log = logging.getLogger("training.tiny.diagnostics.task_sweep")
MODELS_DIR = Path(__file__).resolve().parents[3] / "models"


def task_key(layout: MazeLayout) -> tuple:
    return layout.grid.tobytes(), tuple(layout.start), tuple(layout.goal)


def summarize(rows: list[dict]) -> dict:
    solved = sum(r["solved"] for r in rows)
    return {"tasks": len(rows), "solved": solved, "rate": round(solved / len(rows), 4) if rows else None}


def sweep(policy: FastPolicy, tasks: list[MazeLayout], eval_seeds: int = 64) -> dict:
    """Play every task greedily once; overall, direct/detour and eval-seed summaries."""
    t0 = time.perf_counter()
    episodes = policy.play(tasks, policy.settings(0.0, max_new_tokens=12), max_batch=256)
    rows = [{"task": i, "path_len": len(shortest_path(t.grid, t.start, t.goal)), "detour_moves": detour_moves(t),
             "solved": bool(e.success), "turns": len(e.turns)} for i, (t, e) in enumerate(zip(tasks, episodes, strict=True))]
    index = {task_key(t): i for i, t in enumerate(tasks)}
    seed_tasks = [index.get(task_key(generate_from_seed(7, 7, s))) for s in range(eval_seeds)]
    on_seeds = [rows[i] for i in seed_tasks if i is not None]  # repeats count as often as the seeds draw them
    return {
        "seconds": round(time.perf_counter() - t0, 1),
        "all": summarize(rows),
        "direct": summarize([r for r in rows if r["detour_moves"] == 0]),
        "detour": summarize([r for r in rows if r["detour_moves"] > 0]),
        "eval_seeds": {**summarize(on_seeds), "seeds": eval_seeds, "distinct_tasks": len(set(seed_tasks) - {None})},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    p.add_argument("--only", choices=["maze-tiny", "maze-grpo"], help="sweep one model")
    p.add_argument("--adapter", type=Path, help="sweep this adapter folder instead of the shipped maze-grpo")
    p.add_argument("--limit", type=int, help="the first N tasks only (a quick look)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, help="write the results here")
    a = p.parse_args(argv)
    base = a.models_dir / "maze-tiny"
    todo = [("maze-tiny", None), ("maze-grpo", a.adapter or a.models_dir / "maze-grpo")]
    results = []
    for name, adapter in todo:
        if a.only not in (None, name):
            continue
        policy = FastPolicy.load(base, adapter, a.device)
        tasks = policy.bank.catalog.tasks()[: a.limit]
        out = {"model": name, "adapter": str(adapter) if adapter else None, **sweep(policy, tasks)}
        results.append(out)
        log.info("%s: all %s | direct %s | detour %s | eval seeds %s (%.0fs)", name, out["all"], out["direct"],
                 out["detour"], out["eval_seeds"], out["seconds"])
    if a.json:
        results = merge_results(a.json, results)
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(results, indent=1) + "\n")
        plot_sweep(results, a.json.with_suffix(".png"))
    return results


def merge_results(path: Path, new: list[dict]) -> list[dict]:
    """``new`` replaces the rows of the same models in an existing results file; the others stay
    (``--only maze-grpo`` after a new adapter keeps the base's sweep), in the file's order."""
    old = json.loads(path.read_text()) if path.exists() else []
    fresh = {r["model"]: r for r in new}
    kept = [fresh.pop(r["model"], r) for r in old]
    return kept + list(fresh.values())


if __name__ == "__main__":
    main()
