"""Gymnasium registration of the maze variants under VisGym's ids."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym


@dataclass(frozen=True)
class Variant:
    """One registered maze variant."""

    env_id: str
    size: int
    max_turns: int

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


def get_variant(env_id: str) -> Variant:
    """Look up a variant, with an error naming the known ids."""
    try:
        return VARIANTS[env_id]
    except KeyError:
        raise ValueError(f"unknown env id {env_id!r}; known: {sorted(VARIANTS)}") from None


def register_envs() -> None:
    """Register every variant once (idempotent; runs on ``import agent``)."""
    for v in VARIANTS.values():
        if v.env_id not in gym.registry:
            gym.register(
                id=v.env_id,
                entry_point="agent.env:MazeEnv",
                kwargs={"size": v.size},
                max_episode_steps=v.max_turns,
                reward_threshold=1.0,
            )
