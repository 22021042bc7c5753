"""The maze as a skyrl-gym text environment, for SkyRL's multi-turn VLM generator.

:class:`MazeTextEnv` is a thin adapter over any env with VisGym's VLM env API: the project's
:class:`agent.env.MazeEnv`, or VisGym's own ``maze_2d`` when VisGym is installed as
``gymnasium`` and owns the id. It plays one of four reward modes:

* ``sft`` and ``instruct``: SkyRL's two VisGym recipes (``examples/train/visgym``), with their
  semantics: the prompt is the env's ``get_prompt()`` plus the recipe's format instruction, replies
  are read by :mod:`training.skyrl.recipes`, the env is stepped with the action text, and the
  final reward, done flags and feedback are the recipe's. ``instruct`` builds the env with
  ``relaxed=True`` (keyword prompt) when the env is this project's.
* ``task`` and ``task+parsed``: the project's prompt protocol (:mod:`agent.protocol`) turn by turn
  as :mod:`agent.runner` plays it, so an episode played by SkyRL during training is the episode
  the runner plays during evaluation (``tests/training`` checks it turn by turn).

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

from agent.env import DEFAULT_ENV_ID, ENV_ENTRY_POINT, MazeEnv, get_variant, read_env, register_envs
from agent.maze import feedback_code
from agent.protocol import get_protocol, user_message
from training.skyrl import recipes
from training.skyrl.names import ENTRY_POINT, ENV_CLASS, RECIPE_PROTOCOLS, REWARD_MODES, VISGYM_ENV_CLASS, RewardMode

log = logging.getLogger(__name__)

TASK_REWARD_COEFF = recipes.TASK_REWARD_COEFF
FORMAT_REWARD_COEFF = recipes.FORMAT_REWARD_COEFF


def _extra_seed(value: Any) -> int | None:
    """A row's ``seed`` column as an int; None when absent (parquet may hold NaN or None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def resolve_options(reward: str, protocol: str | None) -> str:
    """Check a reward mode and protocol; returns the protocol name in force.

    The SkyRL recipes fix the protocol (``sft``: tuple, ``instruct``: keyword); naming another
    one is an error. The project's modes default to the tuple protocol.
    """
    if reward not in REWARD_MODES:
        raise ValueError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
    fixed = RECIPE_PROTOCOLS.get(reward)
    if fixed is not None and protocol not in (None, fixed):
        raise ValueError(f"reward {reward!r} is SkyRL's recipe with the {fixed} protocol, not {protocol!r}")
    return get_protocol(protocol or fixed or "tuple").name


def _make_env(env_id: str, relaxed: bool) -> gym.Env:
    register_envs()
    kwargs = {"relaxed": True} if relaxed and gym.spec(env_id).entry_point == ENV_ENTRY_POINT else {}
    # The turn limit is this wrapper's (parse failures count as turns), so take the bare env.
    return gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped


class MazeTextEnv(BaseTextEnv):
    """One maze episode as a skyrl-gym ``BaseTextEnv``.

    ## Observations
    OpenAI chat messages with the text first and the frame as an ``image_url`` part
    (``data:image/png;base64``). ``init`` returns the turn-1 user message; each ``step`` that does
    not end the episode returns one user message with the feedback text and the current frame. A
    step that ends the episode returns no observation.

    ## Actions
    The model's raw reply text. A reply with no action does not step the maze, but the turn
    counts. ``sft``/``instruct`` read replies as SkyRL's recipes do and send the recipe's
    parse-failure text; ``task``/``task+parsed`` use the protocol's parser and texts.

    ## Rewards
    Given on the final step only (earlier steps return 0.0), by ``reward``:

    * ``"sft"``: ``0.8 * task + 0.2 * format_rate``, ``format_rate`` = the fraction of turns whose
      reply has non-empty ``<observation>``, ``<justification>`` and ``<action>`` tags. Bare tuple
      replies score 0.8 for a solve and 0.0 otherwise; tagged failures score up to 0.2.
    * ``"instruct"``: the task reward, 1.0 or 0.0.
    * ``"task"``: the task reward, 1.0 or 0.0 (the project's protocol).
    * ``"task+parsed"``: ``0.8 * task + 0.2 * parsed_rate``, the fraction of turns whose reply the
      protocol parsed (a well-formed failure scores 0.2).

    ## Episode End
    ``done`` on a valid stop (terminated), when the env truncates (neither maze env does by
    itself), or when ``max_turns`` turns were played.

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
        protocol: str | None = None,
    ):
        super().__init__()
        extras = dict(extras or {})
        env_config = dict(env_config or {})
        self.reward_mode = env_config.get("reward", reward)
        self.protocol = get_protocol(resolve_options(self.reward_mode, env_config.get("protocol", protocol)))
        self.recipe = self.reward_mode if self.reward_mode in RECIPE_PROTOCOLS else None
        self.env_id = str(extras.get("visgym_env_id") or DEFAULT_ENV_ID)
        variant = get_variant(self.env_id)
        self.max_turns = int(extras.get("max_turns") or variant.max_turns)
        seed = _extra_seed(extras.get("seed"))
        # Unseeded rows get a drawn seed (same maze distribution as OS entropy) so that every
        # training episode can be replayed from its metadata.
        self.seed = seed if seed is not None else secrets.randbits(31)
        self.env = _make_env(self.env_id, relaxed=self.recipe == "instruct")
        self._frame = None
        self.parsed_turns = 0
        self.parse_failures = 0
        self.format_successes = 0
        self.wall_bumps = 0
        self.success = False

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Reset the maze; the dataset's placeholder prompt is replaced by the turn-1 message."""
        self._frame, _ = self.env.reset(seed=self.seed)
        if self.recipe == "sft":
            text = self.env.get_prompt() + recipes.SFT_FORMAT_INSTRUCTION
        elif self.recipe == "instruct":
            text = self.env.get_prompt() + recipes.INSTRUCT_FORMAT_INSTRUCTION
        else:
            text = self.protocol.initial_text(*read_env(self.env))
        return [user_message(text, self.env.render())], {"seed": self.seed, "env_id": self.env_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Read one reply, step the maze when it holds an action, and return the next observation."""
        self.turns += 1
        if self.recipe is not None:
            return self._recipe_step(action)
        parsed = self.protocol.parse(action)
        task_reward, terminated, metadata = 0.0, False, {"seed": self.seed, "turn": self.turns}
        if parsed is None:
            self.parse_failures += 1
            text = self.protocol.parse_failure_text()
            metadata["feedback_code"] = "PARSE_FAILURE"
        else:
            self.parsed_turns += 1
            step_action = parsed if isinstance(self.env, MazeEnv) else repr(tuple(parsed))
            self._frame, task_reward, terminated, _, info = self.env.step(step_action)
            text = str(info.get("feedback") or info.get("env_feedback") or "")
            code = feedback_code(info)
            self.wall_bumps += int(code == "HIT_WALL")
            metadata.update(feedback_code=code, action=list(parsed))
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

    def _recipe_step(self, reply: str) -> BaseTextEnvStepOutput:
        """One turn of SkyRL's sft or instruct recipe."""
        sft = self.recipe == "sft"
        if sft and recipes.has_tag_format(reply):
            self.format_successes += 1
        extracted = recipes.extract_tuple_action(reply) if sft else recipes.extract_keyword_action(reply)
        metadata: dict[str, Any] = {"seed": self.seed, "step_count": self.turns}
        if extracted is None:
            self.parse_failures += 1
            done = self.turns >= self.max_turns
            if sft:
                text = recipes.sft_parse_failure_text(list(self.env.action_space.get_function_names()))
            else:
                text = recipes.INSTRUCT_PARSE_FAILURE_TEXT
            task_reward, terminated, truncated = 0.0, False, False
            metadata.update(env_feedback=recipes.PARSE_FAILURE_FEEDBACK, extracted_action="", feedback_code="PARSE_FAILURE")
        else:
            self.parsed_turns += 1
            _, task_reward, terminated, truncated, info = self.env.step(extracted)
            done = bool(terminated or truncated or self.turns >= self.max_turns)
            text = info.get("env_feedback") or recipes.NO_FEEDBACK_TEXT
            code = feedback_code(info)
            self.wall_bumps += int(code == "HIT_WALL")
            if terminated:
                self.success = float(task_reward) >= 1.0
            metadata.update(env_feedback=info.get("env_feedback", ""), extracted_action=extracted, feedback_code=code)
        metadata.update(terminated=bool(terminated), truncated=bool(truncated))
        observations = [] if done else [user_message(text, self.env.render())]
        if not done:
            reward = 0.0
        elif sft:
            reward = recipes.sft_reward(float(task_reward), self.format_successes, self.turns)
        else:
            reward = float(task_reward)
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata=metadata)

    def _final_reward(self, task_reward: float) -> float:
        if self.reward_mode == "task":
            return task_reward
        parsed_rate = self.parsed_turns / self.turns if self.turns else 0.0
        return TASK_REWARD_COEFF * task_reward + FORMAT_REWARD_COEFF * parsed_rate

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers SkyRL averages across episodes (non-numerics are dropped)."""
        return {
            "turns": self.turns,
            "success": float(self.success),
            "parse_failures": self.parse_failures,
            "wall_bumps": self.wall_bumps,
            "parsed_rate": self.parsed_turns / self.turns if self.turns else 0.0,
            "format_successes": self.format_successes,
            "format_success_rate": self.format_successes / self.turns if self.turns else 0.0,
        }

    def close(self) -> None:
        self.env.close()


def register_skyrl_envs(*, reward: RewardMode = "task", protocol: str | None = None) -> None:
    """Register :class:`MazeTextEnv` with skyrl-gym as ``maze_visgym`` and ``visgym``.

    Idempotent when called again with the same options; re-registers (logging it) when the
    options differ, so one process can switch reward modes.

    Args:
        reward: ``"sft"``, ``"instruct"`` (SkyRL's recipes), ``"task"`` or ``"task+parsed"``
            (see :class:`MazeTextEnv`).
        protocol: prompt protocol name (``tuple`` or ``keyword``); a recipe's own by default.
    """
    protocol = resolve_options(reward, protocol)
    kwargs = {"reward": reward, "protocol": protocol}
    for env_class in (ENV_CLASS, VISGYM_ENV_CLASS):
        existing = registry.get(env_class)
        if existing is not None:
            if existing.entry_point == ENTRY_POINT and existing.kwargs == kwargs:
                continue
            log.info("re-registering skyrl-gym env %r with %s", env_class, kwargs)
            deregister(env_class)
        register(id=env_class, entry_point=ENTRY_POINT, kwargs=kwargs)
