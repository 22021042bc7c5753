"""A small stand-in for VisGym's own ``Maze2DEnv``, for tests of coexistence with VisGym.

When VisGym is installed as ``gymnasium`` it registers ``maze_2d/easy`` and ``maze_2d/hard``
itself. Its env has only the VLM env API: text actions (a tuple object cannot be parsed), the
info keys ``agent``/``target``/``maze_map``/``distance``/``env_feedback`` with VisGym's
sentences, ``maze_width``/``maze_height``, and none of this project's attributes (``size``,
``grid``, ``feedback_code``). The mazes come from :mod:`agent.maze.layouts`, which draws them as VisGym
does; everything the runner or the skyrl-gym env may read is limited to what VisGym offers.
"""

from __future__ import annotations

import ast
from typing import ClassVar

import gymnasium as gym
import numpy as np

from agent.maze import MOVES, generate, render_frame


class VisGymStandIn(gym.Env):
    metadata: ClassVar[dict] = {"render_modes": ["rgb_array", "ansi"]}

    def __init__(self, maze_width: int = 11, maze_height: int = 11, seed: int | None = None):
        self.maze_width, self.maze_height = maze_width, maze_height
        self.env_feedback = ""
        self.action_space = gym.spaces.Discrete(2)  # VisGym's is function-conditional; unused here

    def get_prompt(self, **kwargs) -> str:
        return f"You are navigating a {self.maze_height}x{self.maze_width} maze. Reply ('move', d) or ('stop', 'stop')."

    def reset(self, seed=None, options=None, init_state=None):
        super().reset(seed=seed)
        if init_state is not None:
            self.maze_map = np.array(init_state["maze_map"])
            self._agent, self._target = np.array(init_state["agent_location"]), np.array(init_state["target_location"])
        else:
            layout = generate(self.maze_height, self.maze_width, self.np_random)
            self.maze_map = layout.grid.astype(int)
            self._agent, self._target = np.array(layout.start), np.array(layout.goal)
        return self.render(), self._info()

    def step(self, action: str):
        terminated, reward, self.env_feedback = False, 0.0, None
        try:
            name, payload = ast.literal_eval(action)
        except Exception:  # noqa: BLE001 - VisGym treats every unparsable action this way
            self.env_feedback = f"Cannot parse action string {action!r} so the action is invalid."
            return self.render(), 0.0, False, False, self._info()
        if name == "move" and payload in (0, 1, 2, 3):
            nxt = self._agent + np.array(MOVES[payload])
            if self.maze_map[tuple(nxt)] == 1:
                self.env_feedback = "Cannot move into a wall."
            else:
                self._agent = nxt
        elif name == "stop":
            terminated, reward = True, float(np.array_equal(self._agent, self._target))
        else:
            self.env_feedback = f"The action name '{name}' is not recognized in the available action space."
        self.env_feedback = self.env_feedback or "Action executed successfully."
        return self.render(), reward, terminated, False, self._info()

    def render(self, mode: str = "rgb_array"):
        return render_frame(self.maze_map, tuple(self._agent), tuple(self._target))

    def _info(self) -> dict:
        return {
            "distance": float(np.abs(self._agent - self._target).sum()),
            "agent": self._agent,
            "target": self._target,
            "maze_map": self.maze_map,
            "env_feedback": self.env_feedback,
        }
