"""Replay a recorded episode into frames (for GIFs and reports) or into the conversation the model had."""

from __future__ import annotations

import numpy as np

from agent.env import MazeEnv
from agent.protocol import Message, assistant_message, get_protocol, user_message
from agent.runner import EpisodeRecord


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


def replay_conversation(record: EpisodeRecord) -> list[Message]:
    """The whole conversation of an episode, as the runner built it turn by turn: the turn-1 text
    and frame, then each reply and the env's answer to it (feedback, or the parse-failure text, with
    the frame after the turn), the answer to the last reply included. The model saw each turn's
    messages through the run's history policy; this is everything, for transcripts and logs."""
    proto = get_protocol(record.protocol)
    frames = replay_frames(record)
    height, width = len(record.maze), len(record.maze[0])
    messages = [user_message(proto.initial_text(height, width), frames[0])]
    for turn, frame in zip(record.turns, frames[1:]):
        messages += [assistant_message(turn.reply), user_message(turn.feedback, frame)]
    return messages
