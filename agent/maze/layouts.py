"""Pure, seeded maze generation and solving, draw-for-draw compatible with VisGym's ``maze_2d``.

The grid is a ``numpy`` int8 array of shape (H, W): 1 is wall, 0 is floor, the border is wall.
Positions are ``(row, col)`` with row 0 at the top.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import numpy as np

#: Moves as (d_row, d_col) indexed by the action's direction: 0 right, 1 up, 2 left, 3 down.
MOVES: tuple[tuple[int, int], ...] = ((0, 1), (-1, 0), (0, -1), (1, 0))
DIRECTION_NAMES: tuple[str, ...] = ("right", "up", "left", "down")

# Wilson's walk picks a direction among these (row, col) steps, in this order.
_WALK_STEPS: tuple[tuple[int, int], ...] = ((0, 1), (1, 0), (0, -1), (-1, 0))

Pos = tuple[int, int]


@dataclass(frozen=True)
class MazeLayout:
    """One maze: the wall grid plus where the agent starts and where the goal is."""

    grid: np.ndarray
    start: Pos
    goal: Pos

    @property
    def height(self) -> int:
        return int(self.grid.shape[0])

    @property
    def width(self) -> int:
        return int(self.grid.shape[1])


def check_size(height: int, width: int) -> None:
    """Raise ``ValueError`` unless both sides are odd and at least 3."""
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, (int, np.integer)) or value < 3 or value % 2 == 0:
            raise ValueError(f"maze {name} must be an odd integer >= 3, got {value!r}")


def carve_wilson(inner_h: int, inner_w: int, rnd: random.Random) -> np.ndarray:
    """Carve a perfect maze on an ``inner_h x inner_w`` grid with Wilson's algorithm.

    Returns an array where 1 marks a carved (floor) cell. The order of ``rnd`` calls is part of
    the compatibility contract: changing it changes every maze.
    """
    carved = np.zeros((inner_h, inner_w), dtype=np.int8)
    unvisited = [(r, c) for r in range(0, inner_h, 2) for c in range(0, inner_w, 2)]
    visited: set[Pos] = set()

    first = unvisited.pop(rnd.randint(0, len(unvisited) - 1))
    visited.add(first)
    carved[first] = 1

    while unvisited:
        start = unvisited[rnd.randint(0, len(unvisited) - 1)]
        path: dict[Pos, tuple[int, int]] = {}
        cell = start
        while cell not in visited:
            while True:
                step = _WALK_STEPS[rnd.randint(0, 3)]
                nxt = (cell[0] + 2 * step[0], cell[1] + 2 * step[1])
                if 0 <= nxt[0] < inner_h and 0 <= nxt[1] < inner_w:
                    break
            path[cell] = step  # a later visit overwrites: this erases loops
            cell = nxt
        cell = start
        while cell not in visited:
            step = path[cell]
            carved[cell] = 1
            carved[cell[0] + step[0], cell[1] + step[1]] = 1
            visited.add(cell)
            unvisited.remove(cell)
            cell = (cell[0] + 2 * step[0], cell[1] + 2 * step[1])
        carved[cell] = 1
    return carved


def corners(height: int, width: int, idx: int) -> tuple[Pos, Pos]:
    """Start and goal for corner choice ``idx`` (0..3)."""
    table = {
        0: ((1, 1), (height - 2, width - 2)),
        1: ((height - 2, width - 2), (1, 1)),
        2: ((height - 2, 1), (1, width - 2)),
        3: ((1, width - 2), (height - 2, 1)),
    }
    return table[idx]


def generate(height: int, width: int, rng: np.random.Generator) -> MazeLayout:
    """Generate a maze from ``rng`` exactly as VisGym does (two draws, then Python's ``random``)."""
    check_size(height, width)
    inner = int(rng.integers(2**32))
    idx = int(rng.integers(0, 4))
    carved = carve_wilson(height - 2, width - 2, random.Random(inner))
    grid = np.ones((height, width), dtype=np.int8)
    grid[1:-1, 1:-1] = 1 - carved
    start, goal = corners(height, width, idx)
    return MazeLayout(grid=grid, start=start, goal=goal)


def generate_from_seed(height: int, width: int, seed: int) -> MazeLayout:
    """Convenience: the maze ``reset(seed=seed)`` produces."""
    return generate(height, width, np.random.default_rng(seed))


def shortest_path(grid: np.ndarray, start: Pos, goal: Pos) -> list[int] | None:
    """BFS over floor cells; returns the directions of one optimal path, or None if unreachable.

    Ties are broken in direction order (right, up, left, down) so results are deterministic.
    """
    start, goal = (int(start[0]), int(start[1])), (int(goal[0]), int(goal[1]))
    prev: dict[Pos, tuple[Pos, int]] = {}
    seen = {start}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves: list[int] = []
            while cell != start:
                cell, d = prev[cell]
                moves.append(d)
            return moves[::-1]
        for d, (dr, dc) in enumerate(MOVES):
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt not in seen and grid[nxt] == 0:
                seen.add(nxt)
                prev[nxt] = (cell, d)
                queue.append(nxt)
    return None


def detour_moves(layout: MazeLayout) -> int:
    """Moves of the optimal path that do not bring the agent closer to the goal (Manhattan distance).

    0 for a "direct" maze, where every optimal move closes in on the goal; a maze that needs a
    detour is the hard case for a policy that reads the image greedily.
    """
    (gr, gc), (r, c) = layout.goal, layout.start
    count = 0
    for d in shortest_path(layout.grid, layout.start, layout.goal):
        nr, nc = r + MOVES[d][0], c + MOVES[d][1]
        count += abs(nr - gr) + abs(nc - gc) >= abs(r - gr) + abs(c - gc)
        r, c = nr, nc
    return count


def grid_from_rows(rows: list[str]) -> np.ndarray:
    """Parse ``'#'``/``'.'`` rows (the test-vector format) into a wall grid."""
    return np.array([[1 if ch == "#" else 0 for ch in row] for row in rows], dtype=np.int8)


def grid_to_rows(grid: np.ndarray) -> list[str]:
    """Inverse of :func:`grid_from_rows`."""
    return ["".join("#" if v else "." for v in row) for row in grid]
