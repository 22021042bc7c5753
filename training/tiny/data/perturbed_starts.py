"""GRPO groups that begin a few random moves into the maze (the GRPO trainer's ``perturbed_starts``).

Greedy evaluation mostly fails after one wrong turn: the policy walks into a dead end, then
bumps or steps back and forth there until the turn limit (``python -m training.tiny.diagnostics.hf_scores``
reports these failure modes). Episodes that start at the maze's start seldom reach such states under
the policy's own sampling, so they say little about getting out of them. Here a share of each
step's groups starts after 1..k forced random moves (one prefix per group, so its members
differ only by what the policy does next). The forced replies enter the conversation as if
the model had sent them, so the history window shows them; they count against the same turn
limit, and only the policy's own turns are trained. The reward is the environment's 1/0: this
is a reset distribution (exploring starts), not reward shaping, and it uses no solver.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agent.maze import MOVES, MazeLayout
from training.tiny.fastpath import Episode, FrameCatalog, force_reply, new_episode


def random_walk(layout: MazeLayout, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` moves from the start, each to a random open neighbour (stepping back allowed)."""
    at, moves = tuple(layout.start), []
    for _ in range(k):
        open_dirs = [d for d, (dr, dc) in enumerate(MOVES) if layout.grid[at[0] + dr, at[1] + dc] == 0]
        d = int(rng.choice(open_dirs))
        moves.append(d)
        at = (at[0] + MOVES[d][0], at[1] + MOVES[d][1])
    return moves


def perturbed_episode(layout: MazeLayout, moves: list[int], catalog: FrameCatalog, protocol: str = "tuple") -> Episode:
    """An episode that stands where ``moves`` led, with those replies in its conversation."""
    e = new_episode(layout, catalog, protocol)
    for d in moves:
        force_reply(e, f"('move', {d})", catalog, protocol)
    return e


def perturbed_group(layout: MazeLayout, n: int, max_moves: int, rng: np.random.Generator, catalog: FrameCatalog,
                    protocol: str = "tuple", greedy: int = 0) -> list[Episode]:
    """``n`` members at one random state 1..``max_moves`` moves from the start (the first ``greedy`` decode greedily)."""
    root = perturbed_episode(layout, random_walk(layout, int(rng.integers(1, max_moves + 1)), rng), catalog, protocol)
    return [replace(root, conversation=list(root.conversation), turns=[], greedy=i < greedy) for i in range(n)]
