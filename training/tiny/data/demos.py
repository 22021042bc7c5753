"""Solver demonstrations in the runner's exact message format, for supervised training.

An episode is played the way ``agent.runner`` plays it: turn 1 is the protocol's instructions
with the first frame, every later turn is the env's feedback with the new frame, and the messages
sent each turn are ``HistoryPolicy.select(conversation)``. Each turn yields one sample: the
selected messages (images as ``frame:<id>`` URLs, see :mod:`training.tiny.fastpath`) and the target,
the BFS-optimal action for the current state as the protocol's reply text.

Recovery: in a noisy episode the action *executed* at a turn is, with probability ``noise``, a
random move (wall bumps included) instead of the target, while the target stays the optimal move
from wherever the agent now is. The model thus sees its own earlier mistakes in the history
window and learns to get back on track, instead of looping between two cells.

Mixed demonstrators (``solver_share`` < 1): each turn's target is, independently, the solver's
move or the toward-goal heuristic's. Drawn per turn, the history never tells the model which
demonstrator acts, so where the two disagree it learns both moves with those shares: the greedy
policy follows the likelier one while the other stays in its sampling distribution.

History policy: ``window:2`` (the current turn plus two earlier ones, the instructions always
kept). The last two moves and frames are what a small model needs to see where it came from and
avoid undoing its own move, while prompts stay about 340 tokens (3 images of 49 tokens); the full
history would grow to ~800 tokens by turn 15. Evaluation must use the same policy, so the shipped
model folder records it in ``agent_profile.json``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agent.env import get_variant
from agent.maze import MOVES, Feedback, MazeLayout, generate, shortest_path
from agent.protocol import (
    PROFILE_FILE,
    AgentProfile,
    HistoryPolicy,
    Message,
    assistant_message,
    get_protocol,
    profile_data,
    user_message,
)
from training.tiny.fastpath import FrameCatalog, frame_url

#: The history policy the embedded model is trained and evaluated with.
DEFAULT_HISTORY = "window:2"
DEFAULT_PROTOCOL = "tuple"
LAB_PROFILE = AgentProfile(protocol=DEFAULT_PROTOCOL, history=HistoryPolicy.parse(DEFAULT_HISTORY))


class DemoConfig(BaseModel):
    """How demonstrations are drawn."""

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field("maze_2d/simple", description="maze variant")
    protocol: str = Field(DEFAULT_PROTOCOL, description="prompt protocol")
    history: str = Field(DEFAULT_HISTORY, description="history policy, as the runner's 'full' | 'window:K'")
    max_turns: int = Field(15, ge=1, description="turns per episode (the eval limit)")
    clean_fraction: float = Field(0.5, ge=0, le=1, description="share of episodes without noise")
    noise_min: float = Field(0.1, ge=0, le=1, description="noisy episodes draw their noise in [min, max]")
    noise_max: float = Field(0.4, ge=0, le=1, description="upper bound of the per-episode noise")
    solver_share: float = Field(
        1.0, ge=0, le=1, description="share of turns whose target is the BFS solver's move; the others take the "
        "toward-goal heuristic's (toward_goal_move), drawn per turn: mixed-quality demonstrations")


def toward_goal_move(grid: np.ndarray, agent: tuple[int, int], goal: tuple[int, int]) -> int:
    """The open move that lands closest to the goal (Manhattan), ties in ``MOVES`` order: a plausible
    demonstrator that never bumps a wall but takes dead-end branches and cannot detour (alone it
    solves 26 of the 64 eval seeds and 348 of the 768 tasks within 15 turns)."""
    open_moves = [(abs(agent[0] + dr - goal[0]) + abs(agent[1] + dc - goal[1]), a)
                  for a, (dr, dc) in enumerate(MOVES) if grid[agent[0] + dr, agent[1] + dc] != 1]
    return min(open_moves)[1]


@dataclass(frozen=True)
class Sample:
    """One supervised sample: the messages of a turn and the reply to learn."""

    messages: list[Message]
    target: str


def write_profile(model_dir: str | Path, protocol: str = DEFAULT_PROTOCOL, history: str = DEFAULT_HISTORY) -> None:
    """Record the protocol and history policy the model expects next to its weights."""
    data = {"protocol": protocol, "history": history, "env_id": "maze_2d/simple", "max_turns": 15}
    (Path(model_dir) / PROFILE_FILE).write_text(json.dumps(data, indent=2) + "\n")


def read_profile(model_dir: str | Path) -> dict:
    """A model folder's profile, parsed by :class:`agent.protocol.AgentProfile`, as the rollouts take
    it (protocol and history as strings) with the folder's other keys (``env_id``, ``max_turns``);
    the lab's own default (:data:`DEFAULT_PROTOCOL`, :data:`DEFAULT_HISTORY`) when it has none."""
    data = profile_data(model_dir)
    profile = AgentProfile.from_dict(data) if data is not None else LAB_PROFILE
    return {**(data or {}), **profile.to_dict()}


def demo_episode(layout: MazeLayout, catalog: FrameCatalog, cfg: DemoConfig, noise: float,
                 rng: random.Random) -> Iterator[Sample]:
    """Play one (possibly noisy) solver episode and yield a sample per turn."""
    proto = get_protocol(cfg.protocol)
    history = HistoryPolicy.parse(cfg.history)
    grid, goal = layout.grid, layout.goal
    agent = layout.start
    size = layout.height
    conversation = [user_message(proto.initial_text(size, size), image_url=frame_url(catalog.row(grid, agent, goal)))]
    for _ in range(cfg.max_turns):
        path = shortest_path(grid, agent, goal)
        if not path:
            target = ("stop", "stop")
        elif cfg.solver_share < 1 and rng.random() >= cfg.solver_share:
            target = ("move", toward_goal_move(grid, agent, goal))
        else:
            target = ("move", path[0])
        # select() may return the conversation itself, which grows below: keep a copy
        yield Sample(list(history.select(conversation)), proto.format_action(target))
        action = ("move", rng.randrange(4)) if rng.random() < noise else target
        conversation.append(assistant_message(proto.format_action(action)))
        if action[0] == "stop":
            return
        dr, dc = MOVES[action[1]]
        nxt = (agent[0] + dr, agent[1] + dc)
        if grid[nxt] == 1:
            feedback = Feedback.HIT_WALL
        else:
            agent, feedback = nxt, Feedback.EXECUTED
        conversation.append(user_message(feedback.value, image_url=frame_url(catalog.row(grid, agent, goal))))


def demo_stream(cfg: DemoConfig, catalog: FrameCatalog, seed: int) -> Iterator[list[Sample]]:
    """Endless episodes (each a list of samples) on random mazes, reproducible from ``seed``."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    size = get_variant(cfg.env_id).size
    while True:
        layout = generate(size, size, np_rng)
        noise = 0.0 if rng.random() < cfg.clean_fraction else rng.uniform(cfg.noise_min, cfg.noise_max)
        yield list(demo_episode(layout, catalog, cfg, noise, rng))
