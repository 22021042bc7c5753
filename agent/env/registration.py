"""Gymnasium registration of the maze variants under VisGym's ids.

``gymnasium.make(id)`` returns the bare :class:`~agent.env.maze_2d.MazeEnv` (no checker, order or time
limit wrapper): stock gymnasium's wrappers do not pass on ``get_prompt`` and the other VLM env
API methods that VisGym's and SkyRL's code calls on what ``make`` returns, and VisGym registers
``maze_2d`` without a time limit. ``max_turns`` is the default turn limit the runner and the
training env apply; ``gymnasium.make(id, max_episode_steps=N)`` still adds a ``TimeLimit``.

When VisGym is installed (it takes over the ``gymnasium`` package and registers
``maze_2d/easy`` and ``maze_2d/hard`` itself), the ids it owns are left to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym


@dataclass(frozen=True)
class Variant:
    """One registered maze variant."""

    env_id: str
    size: int
    max_turns: int  # default turn limit of the runner and the training env (not a TimeLimit)

    @property
    def image_px(self) -> int:
        return self.size * 25


VARIANTS: dict[str, Variant] = {
    v.env_id: v
    for v in (
        Variant("maze_2d/simple", 7, 15),
        Variant("maze_2d/easy", 9, 20),
        Variant("maze_2d/hard", 11, 30),
    )
}
DEFAULT_ENV_ID = "maze_2d/simple"
#: The variants' string entry point: gymnasium imports the env only when one is made.
ENV_ENTRY_POINT = "agent.env.maze_2d:MazeEnv"


def get_variant(env_id: str) -> Variant:
    """Look up a variant, with an error naming the known ids."""
    try:
        return VARIANTS[env_id]
    except KeyError:
        raise ValueError(f"unknown env id {env_id!r}; known: {sorted(VARIANTS)}") from None


def register_envs() -> None:
    """Register every free variant id once (idempotent; runs on ``import agent``)."""
    for v in VARIANTS.values():
        if v.env_id not in gym.registry:
            gym.register(
                id=v.env_id,
                entry_point=ENV_ENTRY_POINT,
                kwargs={"maze_width": v.size, "maze_height": v.size},
                reward_threshold=1.0,
                order_enforce=False,
                disable_env_checker=True,
            )
