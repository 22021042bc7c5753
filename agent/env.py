"""The VisGym-compatible 2D maze environment (``maze_2d/simple|easy|hard``)."""

from __future__ import annotations

import ast
import enum
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent.mazes import MOVES, MazeLayout, check_size, generate, grid_from_rows, grid_to_rows
from agent.render import CELL_PX, render_frame

#: Bump whenever observations, rewards or feedback change; stored with every result.
ENV_SPEC_VERSION = "1"

ACTION_NAMES = ("move", "stop")


class Feedback(str, enum.Enum):
    """Outcome of one step, in VisGym's validation order. The value is the text the model sees."""

    CANNOT_PARSE = "Cannot parse the action, action invalid."
    BAD_FORMAT = "Action format invalid, it must be a tuple (name, payload)."
    UNKNOWN_ACTION = "Action name not recognised."
    OUT_OF_SPACE = "Action not in the valid action space, nothing executed."
    HIT_WALL = "Cannot move into a wall, the agent did not move."
    EXECUTED = "Action executed successfully."

    @property
    def valid(self) -> bool:
        """True when the action passed validation (a wall bump is a valid action)."""
        return self in (Feedback.HIT_WALL, Feedback.EXECUTED)


def _payload_ok(name: str, payload: Any) -> bool:
    if name == "move":
        # numpy ints and bools count as ints; floats never do.
        if isinstance(payload, (bool, np.bool_)):
            return True
        return isinstance(payload, (int, np.integer)) and 0 <= int(payload) <= 3
    return isinstance(payload, str) and 1 <= len(payload) <= 4 and payload.isascii() and payload.isalnum()


def validate_action(action: Any) -> tuple[Feedback, str | None, Any]:
    """Check an action (text or tuple) the way VisGym does.

    Returns ``(feedback, name, payload)``; ``name`` is None unless validation passed.
    """
    if isinstance(action, (str, bytes)):
        try:
            action = ast.literal_eval(action.decode() if isinstance(action, bytes) else action)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return Feedback.CANNOT_PARSE, None, None
    if not isinstance(action, (tuple, list)) or len(action) != 2:
        return Feedback.BAD_FORMAT, None, None
    name, payload = action
    if not isinstance(name, str) or name not in ACTION_NAMES:
        return Feedback.UNKNOWN_ACTION, None, None
    if not _payload_ok(name, payload):
        return Feedback.OUT_OF_SPACE, None, None
    return Feedback.EXECUTED, name, payload


class MazeEnv(gym.Env):
    """2D grid maze seen as an image, solved one move at a time.

    ## Description
    A perfect maze (Wilson's algorithm) on an odd ``size x size`` grid with a wall border. The
    agent (blue disc) starts in one corner and must reach the goal (red cell) in the opposite
    corner, then stop. Mazes, pixels and feedback reproduce VisGym's ``maze_2d``.

    ## Action Space
    Text holding a Python 2-tuple: ``('move', d)`` with d = 0 right, 1 up, 2 left, 3 down, or
    ``('stop', 'stop')``. Tuples are accepted too. Invalid actions are reported, not raised.

    ## Observation Space
    The frame: ``uint8`` RGB array of shape ``(size*25, size*25, 3)``.

    ## Starting State
    ``reset(seed=s)`` draws the maze from ``numpy.random.default_rng(s)``; ``options`` may give an
    explicit state instead: ``{"maze": rows or array, "agent": (r, c), "goal": (r, c)}``.

    ## Rewards
    Sparse: 1.0 when the agent stops on the goal, else 0.0.

    ## Episode End
    Terminated by any valid stop. Truncated by the turn limit (``max_episode_steps`` at
    registration: 15, 20, 30 for simple, easy, hard). Reaching the goal without stopping does
    not end the episode.

    ## Information
    ``distance`` (L1 to goal), ``agent``, ``goal``, ``maze`` (rows), ``feedback`` (text),
    ``feedback_code`` (:class:`Feedback` name), ``valid`` and ``bumped``.

    ## Arguments
    ``size`` (odd, >= 3) and ``render_mode`` (``"rgb_array"`` or ``"ansi"``).

    ## Version History
    * v1 (ENV_SPEC_VERSION "1"): first release, matching VisGym maze_2d.
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array", "ansi"], "render_fps": 4}

    def __init__(self, size: int = 7, render_mode: str | None = None):
        check_size(size, size)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.size = size
        self.render_mode = render_mode
        side = size * CELL_PX
        self.observation_space = spaces.Box(0, 255, shape=(side, side, 3), dtype=np.uint8)
        self.action_space = spaces.Text(max_length=32)
        self.grid = np.ones((size, size), dtype=np.int8)
        self.agent: tuple[int, int] = (1, 1)
        self.goal: tuple[int, int] = (1, 1)
        self._rows = grid_to_rows(self.grid)

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options and any(k in options for k in ("maze", "agent", "goal")):
            layout = self._layout_from_options(options)
        else:
            layout = generate(self.size, self.size, self.np_random)
        self.grid, self.agent, self.goal = layout.grid, layout.start, layout.goal
        self._rows = grid_to_rows(self.grid)  # the maze never changes within an episode
        return self._frame(), self._info(Feedback.EXECUTED, reset=True)

    def step(self, action: Any):
        feedback, name, payload = validate_action(action)
        terminated, reward, bumped = False, 0.0, False
        if name == "move":
            dr, dc = MOVES[int(payload)]
            nxt = (self.agent[0] + dr, self.agent[1] + dc)
            if self.grid[nxt] == 1:
                feedback, bumped = Feedback.HIT_WALL, True
            else:
                self.agent = nxt
        elif name == "stop":
            terminated = True
            reward = 1.0 if self.agent == self.goal else 0.0
        # Truncation comes from the TimeLimit wrapper (max_episode_steps at registration).
        return self._frame(), reward, terminated, False, self._info(feedback, bumped=bumped)

    def render(self):
        if self.render_mode == "ansi":
            return self.render_text()
        return self._frame()

    # -- helpers -------------------------------------------------------------------------
    @property
    def layout(self) -> MazeLayout:
        return MazeLayout(grid=self.grid, start=self.agent, goal=self.goal)

    def render_text(self) -> str:
        """Rows of ``#`` wall, ``.`` floor, ``A`` agent, ``G`` goal, ``*`` agent on goal."""
        rows = [list(r) for r in grid_to_rows(self.grid)]
        rows[self.goal[0]][self.goal[1]] = "G"
        rows[self.agent[0]][self.agent[1]] = "*" if self.agent == self.goal else "A"
        return "\n".join("".join(r) for r in rows)

    def _frame(self) -> np.ndarray:
        return render_frame(self.grid, self.agent, self.goal)

    def _info(self, feedback: Feedback, *, reset: bool = False, bumped: bool = False) -> dict[str, Any]:
        return {
            "distance": abs(self.agent[0] - self.goal[0]) + abs(self.agent[1] - self.goal[1]),
            "agent": self.agent,
            "goal": self.goal,
            "maze": list(self._rows),
            "feedback": None if reset else feedback.value,
            "feedback_code": None if reset else feedback.name,
            "valid": None if reset else feedback.valid,
            "bumped": bumped,
        }

    def _layout_from_options(self, options: dict[str, Any]) -> MazeLayout:
        missing = [k for k in ("maze", "agent", "goal") if k not in options]
        if missing:
            raise ValueError(f"an explicit initial state needs maze, agent and goal; missing {missing}")
        maze = options["maze"]
        grid = grid_from_rows(list(maze)) if isinstance(maze[0], str) else np.asarray(maze, dtype=np.int8)
        if grid.shape != (self.size, self.size):
            raise ValueError(f"maze shape {grid.shape} does not match env size {self.size}x{self.size}")
        if not np.isin(grid, (0, 1)).all():
            raise ValueError("maze cells must be 0 (floor) or 1 (wall)")
        agent, goal = tuple(int(v) for v in options["agent"]), tuple(int(v) for v in options["goal"])
        for label, pos in (("agent", agent), ("goal", goal)):
            if len(pos) != 2 or not (0 <= pos[0] < self.size and 0 <= pos[1] < self.size):
                raise ValueError(f"{label} position {pos} is outside the {self.size}x{self.size} maze")
            if grid[pos] == 1:
                raise ValueError(f"{label} position {pos} is on a wall")
        return MazeLayout(grid=grid, start=agent, goal=goal)  # type: ignore[arg-type]
