"""The maze as a skyrl-gym text environment, for SkyRL's multi-turn VLM generator.

:class:`MazeTextEnv` is a thin adapter: the maze, its pixels and its feedback come from
:class:`agent.env.MazeEnv`; the prompt texts, image parts and reply parsing come from
:mod:`agent.protocol`. Nothing is re-implemented here, so an episode played by SkyRL during
training is the episode :mod:`agent.runner` plays during evaluation (``tests/training`` checks it
turn by turn).

Registered with skyrl-gym under :data:`ENV_CLASS` (``maze_visgym``) and, so that the reference
datasets (``env_class: visgym``) work unchanged, under :data:`VISGYM_ENV_CLASS` (``visgym``).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from skyrl_gym.envs import deregister, register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_gym.envs.registration import registry

from agent.env import MazeEnv
from agent.protocol import get_protocol, user_message
from agent.registration import DEFAULT_ENV_ID, get_variant, register_envs
from training.skyrl.names import ENTRY_POINT, ENV_CLASS, REWARD_MODES, VISGYM_ENV_CLASS, RewardMode

log = logging.getLogger(__name__)

# Weights of SkyRL's VisGym "sft" env variant (examples/train/visgym/env_sft.py).
TASK_REWARD_COEFF = 0.8
FORMAT_REWARD_COEFF = 0.2


def _extra_seed(value: Any) -> int | None:
    """A row's ``seed`` column as an int; None when absent (parquet may hold NaN or None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


class MazeTextEnv(BaseTextEnv):
    """One maze episode as a skyrl-gym ``BaseTextEnv``.

    ## Observations
    OpenAI chat messages, built by :func:`agent.protocol.user_message` exactly as the runner
    builds them: ``init`` returns the turn-1 user message (protocol instructions, then the frame
    as an ``image_url`` part with a ``data:image/png;base64`` URL); each ``step`` that does not end
    the episode returns one user message with the feedback text (or the protocol's parse-failure
    text) and the current frame. A step that ends the episode returns no observation.

    ## Actions
    The model's raw reply text, parsed with the protocol (``tuple`` by default). A reply that does
    not parse does not step the maze, but the turn counts, as in the runner.

    ## Rewards
    Given on the final step only (earlier steps return 0.0), by ``reward``:

    * ``"task"``: 1.0 when the agent stops on the goal, else 0.0 (the true solve signal).
    * ``"task+format"``: the reference SFT-variant reward of SkyRL's VisGym example,
      ``0.8 * task + 0.2 * format_rate``, where ``format_rate`` is the fraction of turns whose
      reply the protocol parsed. The 0.2 format bonus makes a well-formatted failure score > 0,
      so SkyRL's logged ``eval/all/pass_at_1`` (reward > 0) overstates the solve rate.

    ## Episode End
    ``done`` on a valid stop (terminated) or when ``max_turns`` turns were played.

    ## Arguments
    ``extras`` (a dataset row's non-prompt columns, plus SkyRL's ``max_turns``):
    ``visgym_env_id`` (maze variant id, default ``maze_2d/simple``), ``seed`` (optional; a fresh
    random seed otherwise, reported in metadata so the maze can be replayed) and ``max_turns``
    (default: the variant's). ``reward`` and ``protocol`` come from the constructor (registration
    kwargs) or ``env_config``.
    """

    def __init__(
        self,
        env_config: Mapping[str, Any] | None = None,
        extras: Mapping[str, Any] | None = None,
        *,
        reward: RewardMode = "task",
        protocol: str = "tuple",
    ):
        super().__init__()
        extras = dict(extras or {})
        env_config = dict(env_config or {})
        self.reward_mode = env_config.get("reward", reward)
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {self.reward_mode!r}")
        self.protocol = get_protocol(env_config.get("protocol", protocol))
        self.env_id = str(extras.get("visgym_env_id") or DEFAULT_ENV_ID)
        variant = get_variant(self.env_id)
        self.max_turns = int(extras.get("max_turns") or variant.max_turns)
        seed = _extra_seed(extras.get("seed"))
        # Unseeded rows get a drawn seed (same maze distribution as OS entropy) so that every
        # training episode can be replayed from its metadata.
        self.seed = seed if seed is not None else secrets.randbits(31)
        register_envs()
        # The turn limit is ours (parse failures count as turns), so take the unwrapped env.
        self.env: MazeEnv = gym.make(self.env_id, disable_env_checker=True).unwrapped  # type: ignore[assignment]
        self._frame = None
        self.parsed_turns = 0
        self.parse_failures = 0
        self.wall_bumps = 0
        self.success = False

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Reset the maze; the dataset's placeholder prompt is replaced by the turn-1 message."""
        self._frame, _ = self.env.reset(seed=self.seed)
        first = user_message(self.protocol.initial_text(self.env.size, self.env.size), self._frame)
        return [first], {"seed": self.seed, "env_id": self.env_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Parse one reply, step the maze when it parsed, and return the next observation."""
        self.turns += 1
        parsed = self.protocol.parse(action)
        task_reward, terminated, metadata = 0.0, False, {"seed": self.seed, "turn": self.turns}
        if parsed is None:
            self.parse_failures += 1
            text = self.protocol.parse_failure_text()
            metadata["feedback_code"] = "PARSE_FAILURE"
        else:
            self.parsed_turns += 1
            self._frame, task_reward, terminated, _, info = self.env.step(parsed)
            text = info["feedback"]
            self.wall_bumps += int(info["bumped"])
            metadata.update(feedback_code=info["feedback_code"], action=list(parsed))
        done = terminated or self.turns >= self.max_turns
        if terminated:
            self.success = task_reward >= 1.0
        metadata.update(terminated=terminated, truncated=done and not terminated)
        observations = [] if done else [user_message(text, self._frame)]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=self._final_reward(float(task_reward)) if done else 0.0,
            done=done,
            metadata=metadata,
        )

    def _final_reward(self, task_reward: float) -> float:
        if self.reward_mode == "task":
            return task_reward
        format_rate = self.parsed_turns / self.turns if self.turns else 0.0
        return TASK_REWARD_COEFF * task_reward + FORMAT_REWARD_COEFF * format_rate

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers SkyRL averages across episodes (non-numerics are dropped)."""
        return {
            "turns": self.turns,
            "success": float(self.success),
            "parse_failures": self.parse_failures,
            "wall_bumps": self.wall_bumps,
            "format_rate": self.parsed_turns / self.turns if self.turns else 0.0,
        }

    def close(self) -> None:
        self.env.close()


def register_skyrl_envs(*, reward: RewardMode = "task", protocol: str = "tuple") -> None:
    """Register :class:`MazeTextEnv` with skyrl-gym as ``maze_visgym`` and ``visgym``.

    Idempotent when called again with the same options; re-registers (logging it) when the
    options differ, so one process can switch reward modes.

    Args:
        reward: ``"task"`` or ``"task+format"`` (see :class:`MazeTextEnv`).
        protocol: prompt protocol name (``tuple`` or ``keyword``).
    """
    if reward not in REWARD_MODES:
        raise ValueError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
    get_protocol(protocol)
    kwargs = {"reward": reward, "protocol": protocol}
    for env_class in (ENV_CLASS, VISGYM_ENV_CLASS):
        existing = registry.get(env_class)
        if existing is not None:
            if existing.entry_point == ENTRY_POINT and existing.kwargs == kwargs:
                continue
            log.info("re-registering skyrl-gym env %r with %s", env_class, kwargs)
            deregister(env_class)
        register(id=env_class, entry_point=ENTRY_POINT, kwargs=kwargs)
