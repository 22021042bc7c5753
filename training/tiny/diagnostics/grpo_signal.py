"""How much GRPO signal each eval maze gives a policy: the diagnosis behind the GRPO plateau.

For seeds 0..N-1 of ``maze_2d/simple`` it records the optimal path length, whether the optimal
path needs a *detour* (a move that does not bring the agent closer to the goal in Manhattan
distance), the greedy outcome, and how many of ``n`` sampled episodes at ``temperature`` solve it.
A maze whose samples all fail (or all succeed) forms a GRPO group with zero advantage: it teaches
nothing. Runs on the fast batched rollout (:mod:`training.tiny.fastpath.rollout`), CPU or GPU.

Usage::

    python -m training.tiny.diagnostics.grpo_signal --adapter models/maze-grpo --n 8 --temperature 0.7 \
        --sample-failed-only --json grpo_signal.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from agent.maze import MazeLayout, detour_moves, generate_from_seed, shortest_path
from training.tiny.diagnostics.fast_policy import FastPolicy

log = logging.getLogger("training.tiny.diagnostics.grpo_signal")


def measure(model_path: str, adapter: str | None, seeds: int, n: int, temperature: float, device: str,
            sample_failed_only: bool = False) -> dict:
    """The per-maze table and its summaries; ``sample_failed_only`` samples only the mazes greedy
    fails (a shorter run: the mazes greedy solves are left out)."""
    policy = FastPolicy.load(model_path, adapter, device)
    layouts = [generate_from_seed(7, 7, s) for s in range(seeds)]

    def run(t: float, chosen: list[MazeLayout], copies: int, seed: int | None) -> list[bool]:
        eps = policy.play([lay for lay in chosen for _ in range(copies)], policy.settings(t, max_new_tokens=8), seed)
        return [e.success for e in eps]

    t0 = time.perf_counter()
    greedy = run(0.0, layouts, 1, None)
    picked = [s for s in range(seeds) if not (sample_failed_only and greedy[s])]
    wins = np.array(run(temperature, [layouts[s] for s in picked], n, 0))
    sampled = dict(zip(picked, wins.reshape(len(picked), n).sum(1).tolist()))
    rows = [{"seed": s, "path_len": len(shortest_path(lay.grid, lay.start, lay.goal)), "detour_moves": detour_moves(lay),
             "greedy_solved": bool(greedy[s]), "sampled_solved": sampled.get(s)}
            for s, lay in enumerate(layouts)]

    def summary(sel: list[dict]) -> dict:
        got = [r["sampled_solved"] for r in sel if r["sampled_solved"] is not None]
        return {"mazes": len(sel), "greedy_solved": sum(r["greedy_solved"] for r in sel), "sampled_mazes": len(got),
                "sampled_rate": round(float(np.mean(got)) / n, 4) if got else None,
                "groups_all_fail": sum(k == 0 for k in got), "groups_all_solve": sum(k == n for k in got)}

    return {"model": model_path, "adapter": adapter, "n_samples_per_prompt": n, "temperature": temperature,
            "seconds": round(time.perf_counter() - t0, 1),
            "direct": summary([r for r in rows if r["detour_moves"] == 0]),
            "detour": summary([r for r in rows if r["detour_moves"] > 0]),
            "greedy_failed": summary([r for r in rows if not r["greedy_solved"]]),
            "mazes": rows}


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--model-path", default="models/maze-tiny")
    p.add_argument("--adapter", default="models/maze-grpo", help="'' for the base alone")
    p.add_argument("--seeds", type=int, default=64)
    p.add_argument("--n", type=int, default=8, help="samples per maze (the GRPO group size)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--device", default="cpu")
    p.add_argument("--sample-failed-only", action="store_true", help="sample only the mazes greedy fails")
    p.add_argument("--json", help="write the result here")
    a = p.parse_args(argv)
    out = measure(a.model_path, a.adapter or None, a.seeds, a.n, a.temperature, a.device, a.sample_failed_only)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    log.info("%s", json.dumps({k: v for k, v in out.items() if k != "mazes"}, indent=1))


if __name__ == "__main__":
    main()
