"""The VisGym-compatible 2D maze environment (``maze_2d/simple|easy|hard``)."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from agent.env.vlm_api import ansi_text, init_state, options_from_init_state, prompt_text, solve_actions
from agent.maze import (
    ACTION_NAMES,
    CELL_PX,
    MOVES,
    Feedback,
    MazeActionSpace,
    MazeLayout,
    check_size,
    generate,
    grid_from_rows,
    grid_to_rows,
    relaxed_action,
    render_frame,
    validate_action,
)

#: Bump whenever observations, rewards or feedback change; stored with every result.
ENV_SPEC_VERSION = "2"

__all__ = ["ACTION_NAMES", "ENV_SPEC_VERSION", "Feedback", "MazeEnv", "validate_action"]


class MazeEnv(gym.Env):
    """2D grid maze seen as an image, solved one move at a time; a drop-in for VisGym's ``maze_2d``.

    ## Description
    A perfect maze (Wilson's algorithm) on an odd ``maze_height x maze_width`` grid with a wall
    border. The agent (blue disc) starts in one corner and must reach the goal (red cell) in the
    opposite corner, then stop. Mazes, pixels, validation and feedback reproduce VisGym's
    ``maze_2d``, and so does its VLM env API (``get_prompt``, ``get_init_state``,
    ``reset(seed, options, init_state)``, ``solve``, ``action_space.get_function_names()``), so
    VisGym's ``Interactor`` and SkyRL's VisGym wrappers run on it unchanged.

    ## Action Space
    :class:`~agent.maze.actions.MazeActionSpace`: text holding a Python 2-tuple, ``('move', d)`` with
    d = 0 right, 1 up, 2 left, 3 down, or ``('stop', 'stop')``. Tuples are accepted too; a list
    is a format error (as in VisGym). Invalid actions are reported, not raised. Where VisGym
    raises (a ``move`` payload beyond int64, e.g. 20 digits), this env reports "not in the valid
    action space" instead.

    ## Observation Space
    The frame: ``uint8`` RGB array of shape ``(maze_height*25, maze_width*25, 3)``. As in VisGym,
    once the agent has stepped off the goal cell a white disc stays in the red square (VisGym
    erases the agent's previous disc in white) until the agent stands on it again.

    ## Starting State
    ``reset(seed=s)`` draws the maze from ``numpy.random.default_rng(s)`` (the constructor's
    ``seed`` seeds the generator for unseeded resets, as VisGym's does). An explicit state is
    ``init_state`` (VisGym's ``get_init_state()`` dict) or ``options={"maze": rows or array,
    "agent": (r, c), "goal": (r, c)}``; both are checked (shape, cells, positions).

    ## Rewards
    Sparse: 1.0 when the agent stops on the goal, else 0.0.

    ## Episode End
    Terminated by any valid stop. Reaching the goal without stopping does not end the episode.
    The env never truncates, as VisGym's does not: the turn limit is the runner's (``max_turns``
    of :class:`~agent.runner.config.RunnerConfig`, the variant's default 15/20/30) or the training
    wrapper's. ``gymnasium.make(env_id, max_episode_steps=N)`` adds gymnasium's ``TimeLimit``
    for callers that want the env itself to truncate.

    ## Information
    VisGym's keys: ``distance`` (L1 to goal, float), ``agent`` and ``target`` (``[row, col]``
    arrays), ``maze_map`` (int array, 1 = wall), ``env_feedback`` (the feedback text; ``""`` after
    reset). Beside them: ``goal`` (tuple), ``maze`` (rows), ``feedback`` (text, None after reset),
    ``feedback_code`` (:class:`Feedback` name), ``valid`` and ``bumped``.

    ## Arguments
    ``size`` (odd, >= 3; a square maze) or VisGym's ``maze_width``/``maze_height``, ``render_mode``
    (``"rgb_array"`` or ``"ansi"``; ``ansi`` draws VisGym's text maze and its prompt explains the
    characters), ``seed`` and ``relaxed``. ``relaxed=True`` (what SkyRL's instruct recipe passes)
    makes the env speak the keyword form: ``get_prompt()`` describes ``<action>left</action>``
    style actions and ``step`` also takes a bare keyword (``left``, ``<action>up</action>``, any
    case) as the matching tuple; tuple actions keep working.

    ## Version History
    * v2 (ENV_SPEC_VERSION "2"): VisGym's VLM env API and info keys; ``relaxed``; no truncation
      inside the env (registered without ``max_episode_steps``); a list action is a format error;
      the white disc VisGym leaves on the goal cell once the agent steps off it; ``distance`` is a
      float and ``agent`` an array (as in VisGym).
    * v1 (ENV_SPEC_VERSION "1"): first release, matching VisGym maze_2d.
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array", "ansi"], "render_fps": 4}

    def __init__(
        self,
        size: int | None = None,
        render_mode: str | None = None,
        *,
        maze_width: int | None = None,
        maze_height: int | None = None,
        seed: int | None = None,
        relaxed: bool = False,
    ):
        height, width = _dims(size, maze_height, maze_width)
        check_size(height, width)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.maze_height, self.maze_width = height, width
        self.size = height if height == width else None  # the side of a square maze
        self.render_mode = render_mode
        self.relaxed = bool(relaxed)
        self.observation_space = spaces.Box(0, 255, shape=(height * CELL_PX, width * CELL_PX, 3), dtype=np.uint8)
        self.action_space = MazeActionSpace()
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
        self.grid = np.ones((height, width), dtype=np.int8)
        self.agent: tuple[int, int] = (1, 1)
        self.goal: tuple[int, int] = (1, 1)
        self.env_feedback = ""
        self._goal_left = False
        self._rows = grid_to_rows(self.grid)

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None, init_state: dict | None = None):
        super().reset(seed=seed)
        if init_state is not None:
            layout = self._layout_from_options(options_from_init_state(init_state))
        elif options and any(k in options for k in ("maze", "agent", "goal")):
            layout = self._layout_from_options(options)
        else:
            layout = generate(self.maze_height, self.maze_width, self.np_random)
        self.grid, self.agent, self.goal = layout.grid, layout.start, layout.goal
        self._rows = grid_to_rows(self.grid)  # the maze never changes within an episode
        self._goal_left = False
        self.env_feedback = ""
        return self._frame(), self._info(None)

    def step(self, action: Any):
        feedback, name, payload = validate_action(relaxed_action(action) if self.relaxed else action)
        terminated, reward, bumped = False, 0.0, False
        if name == "move":
            dr, dc = MOVES[int(payload)]
            nxt = (self.agent[0] + dr, self.agent[1] + dc)
            if self.grid[nxt] == 1:
                feedback, bumped = Feedback.HIT_WALL, True
            else:
                self._goal_left = self._goal_left or self.agent == self.goal
                self.agent = nxt
        elif name == "stop":
            terminated = True
            reward = 1.0 if self.agent == self.goal else 0.0
        self.env_feedback = feedback.value
        return self._frame(), reward, terminated, False, self._info(feedback, bumped=bumped)

    def render(self, mode: str | None = None):
        """The frame, or VisGym's text maze for ``mode`` (or ``render_mode``) ``"ansi"``."""
        mode = mode or self.render_mode or "rgb_array"
        if mode == "ansi":
            return ansi_text(self.grid, self.agent, self.goal)
        if mode != "rgb_array":
            raise ValueError(f"render mode must be one of {self.metadata['render_modes']}, got {mode!r}")
        return self._frame()

    # -- VisGym's VLM env API --------------------------------------------------------------
    def get_prompt(self, **kwargs: Any) -> str:
        """The task description for a VLM (turn-1 text of the tuple or, when relaxed, keyword protocol)."""
        return prompt_text(self.maze_height, self.maze_width, relaxed=self.relaxed, text_mode=self.render_mode == "ansi")

    def get_init_state(self) -> dict[str, list]:
        """The current state as VisGym's dict, for ``reset(init_state=...)``."""
        return init_state(self.layout)

    def solve(self, strategy: str | None = None, num_steps: int | None = None) -> list[str]:
        """Action strings that solve the maze from here (``strategy`` is accepted and ignored, as
        in VisGym); ``num_steps`` pads with back-and-forth moves drawn from the env's generator."""
        return solve_actions(self.grid, self.agent, self.goal, self.np_random, num_steps)

    @property
    def maze_map(self) -> np.ndarray:
        return self.grid

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
        return render_frame(self.grid, self.agent, self.goal, goal_left=self._goal_left)

    def _info(self, feedback: Feedback | None, *, bumped: bool = False) -> dict[str, Any]:
        return {
            "distance": float(abs(self.agent[0] - self.goal[0]) + abs(self.agent[1] - self.goal[1])),
            "agent": np.array(self.agent),
            "target": np.array(self.goal),
            "maze_map": self.grid.astype(int),
            "env_feedback": self.env_feedback,
            "goal": self.goal,
            "maze": list(self._rows),
            "feedback": None if feedback is None else feedback.value,
            "feedback_code": None if feedback is None else feedback.name,
            "valid": None if feedback is None else feedback.valid,
            "bumped": bumped,
        }

    def _layout_from_options(self, options: dict[str, Any]) -> MazeLayout:
        missing = [k for k in ("maze", "agent", "goal") if k not in options]
        if missing:
            raise ValueError(f"an explicit initial state needs maze, agent and goal; missing {missing}")
        maze = options["maze"]
        grid = grid_from_rows(list(maze)) if isinstance(maze[0], str) else np.asarray(maze, dtype=np.int8)
        shape = (self.maze_height, self.maze_width)
        if grid.shape != shape:
            raise ValueError(f"maze shape {grid.shape} does not match env size {shape[0]}x{shape[1]}")
        if not np.isin(grid, (0, 1)).all():
            raise ValueError("maze cells must be 0 (floor) or 1 (wall)")
        # Moves are checked against walls only: an open border cell would let the agent leave the grid.
        if not (grid[0].all() and grid[-1].all() and grid[:, 0].all() and grid[:, -1].all()):
            raise ValueError("the maze's outer border must be all walls (1), as every generated maze is")
        agent, goal = tuple(int(v) for v in options["agent"]), tuple(int(v) for v in options["goal"])
        for label, pos in (("agent", agent), ("goal", goal)):
            if len(pos) != 2 or not (0 <= pos[0] < shape[0] and 0 <= pos[1] < shape[1]):
                raise ValueError(f"{label} position {pos} is outside the {shape[0]}x{shape[1]} maze")
            if grid[pos] == 1:
                raise ValueError(f"{label} position {pos} is on a wall")
        return MazeLayout(grid=grid, start=agent, goal=goal)  # type: ignore[arg-type]


def _dims(size: int | None, height: int | None, width: int | None) -> tuple[int, int]:
    """``(height, width)`` from ``size`` and/or VisGym's ``maze_height``/``maze_width`` (default 7)."""
    for name, value in (("maze_height", height), ("maze_width", width)):
        if size is not None and value is not None and value != size:
            raise ValueError(f"size={size!r} and {name}={value!r} disagree; give one of them")
    default = 7 if size is None else size
    return (default if height is None else height), (default if width is None else width)
