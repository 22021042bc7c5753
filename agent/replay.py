"""Replay a recorded episode into frames (for GIFs and reports)."""

from __future__ import annotations

import numpy as np

from agent.env import MazeEnv
from agent.records import EpisodeRecord


def replay_frames(record: EpisodeRecord) -> list[np.ndarray]:
    """Frames of an episode: the initial one, then one per turn (unchanged after a parse failure).

    Raises:
        ValueError: if the replayed positions disagree with the record (a corrupt trajectory).
    """
    env = MazeEnv(size=len(record.maze))
    frame, _ = env.reset(options={"maze": record.maze, "agent": record.start, "goal": record.goal})
    frames = [frame]
    for turn in record.turns:
        if turn.action is not None:
            frame, *_ = env.step(tuple(turn.action))
        if list(env.agent) != turn.agent:
            raise ValueError(f"turn {turn.index}: replay put the agent at {list(env.agent)}, record says {turn.agent}")
        frames.append(frame)
    return frames


def save_gif(record: EpisodeRecord, path: str, *, ms_per_frame: int = 400) -> None:
    """Write an animated GIF of the episode (the last frame held longer)."""
    from PIL import Image

    images = [Image.fromarray(f) for f in replay_frames(record)]
    durations = [ms_per_frame] * (len(images) - 1) + [ms_per_frame * 3]
    images[0].save(path, save_all=True, append_images=images[1:], duration=durations, loop=0)
