"""Pure helpers behind the VisGym VLM env API of :class:`agent.env.MazeEnv`.

VisGym's runners (its ``Interactor``, SkyRL's ``examples/train/visgym`` wrappers) drive an env
through ``get_prompt()``, ``get_init_state()``, ``reset(init_state=...)``, ``solve()`` and the
info keys ``agent``, ``target``, ``maze_map``, ``distance``, ``env_feedback``. The functions here
compute those answers; :func:`read_env` and :func:`positions` read any env that speaks the API
(this project's or VisGym's own), so the runner and the skyrl-gym env work on both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent.maze import MOVES, MazeLayout, grid_to_rows, shortest_path
from agent.protocol import KEYWORD, TUPLE

Pos = tuple[int, int]

_TEXT_LEGEND = (
    "The maze is drawn as text: '#' is a wall, a space is an open path, 'A' is you and 'T' is the "
    "target."
)


def prompt_text(height: int, width: int, *, relaxed: bool = False, text_mode: bool = False) -> str:
    """The task description ``get_prompt()`` returns: the protocol's turn-1 text.

    ``relaxed`` envs describe the keyword actions (``<action>left</action>``); text-mode envs
    (``render_mode="ansi"``) explain the characters of the text drawing instead of the colours.
    """
    proto = KEYWORD if relaxed else TUPLE
    return proto.initial_text(height, width, legend=_TEXT_LEGEND if text_mode else None)


def ansi_text(grid: np.ndarray, agent: Pos, goal: Pos) -> str:
    """VisGym's text drawing: ``#`` walls, spaces, ``T`` target, ``A`` agent, one extra ``#`` border."""
    chars = np.where(np.asarray(grid) == 1, "#", " ").astype("<U1")
    chars[goal] = "T"
    chars[agent] = "A"
    framed = np.full((chars.shape[0] + 2, chars.shape[1] + 2), "#", dtype="<U1")
    framed[1:-1, 1:-1] = chars
    return "\n".join("".join(row) for row in framed)


def init_state(layout: MazeLayout) -> dict[str, list]:
    """VisGym's ``get_init_state()`` dict: plain lists, JSON-ready."""
    return {
        "maze_map": np.asarray(layout.grid).astype(int).tolist(),
        "agent_location": [int(v) for v in layout.start],
        "target_location": [int(v) for v in layout.goal],
    }


def options_from_init_state(state: dict[str, Any]) -> dict[str, Any]:
    """An ``init_state`` dict as this env's explicit-state ``options`` (checked by the env)."""
    missing = [k for k in ("maze_map", "agent_location", "target_location") if k not in state]
    if missing:
        raise ValueError(f"init_state needs maze_map, agent_location and target_location; missing {missing}")
    return {"maze": np.asarray(state["maze_map"]), "agent": state["agent_location"], "goal": state["target_location"]}


def solve_actions(
    grid: np.ndarray, agent: Pos, goal: Pos, rng: np.random.Generator, num_steps: int | None = None
) -> list[str]:
    """Action strings that solve the maze from ``agent``: a shortest path, then a stop.

    With ``num_steps``, back-and-forth move pairs are inserted at random points of the path (drawn
    from ``rng``) until the trajectory, stop included, has at least ``num_steps`` actions. An
    unreachable goal, or an agent already on it, gives a lone stop.
    """
    stop = repr(("stop", "stop"))
    path = shortest_path(grid, agent, goal)
    if not path:
        return [stop]
    moves = [repr(("move", d)) for d in path]
    if num_steps is not None and len(moves) + 1 < num_steps:
        cells = [tuple(agent)]
        for d in path:
            cells.append((cells[-1][0] + MOVES[d][0], cells[-1][1] + MOVES[d][1]))
        # (where in the move list, which direction) for every open neighbour along the path
        h, w = np.shape(grid)
        spots = [
            (i, d)
            for i, (r, c) in enumerate(cells)
            for d, (dr, dc) in enumerate(MOVES)
            if 0 <= r + dr < h and 0 <= c + dc < w and grid[r + dr, c + dc] == 0
        ]
        pairs = (num_steps - len(moves) - 1 + 1) // 2
        picks = sorted((spots[int(k)] for k in rng.integers(0, len(spots), size=pairs)), reverse=True)
        for i, d in picks:  # from the back, so earlier insertion points stay valid
            moves[i:i] = [repr(("move", d)), repr(("move", (d + 2) % 4))]
    return [*moves, stop]


def read_env(env: Any) -> tuple[int, int]:
    """``(height, width)`` of a maze env, this project's or VisGym's (both carry ``maze_height``/``maze_width``)."""
    return int(env.maze_height), int(env.maze_width)


def positions(info: dict[str, Any]) -> tuple[np.ndarray, Pos, Pos]:
    """``(grid, agent, goal)`` from a reset or step ``info`` of any VisGym-API maze env."""
    grid = np.asarray(info["maze_map"], dtype=np.int8)
    agent = (int(info["agent"][0]), int(info["agent"][1]))
    goal = (int(info["target"][0]), int(info["target"][1]))
    return grid, agent, goal


def maze_rows(info: dict[str, Any]) -> list[str]:
    """The maze of an ``info`` as ``#``/``.`` rows (the records' format)."""
    return grid_to_rows(positions(info)[0])
