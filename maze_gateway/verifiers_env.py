"""The maze as a verifiers (0.4, ``verifiers.v1``) environment: ``vf-eval maze-gateway`` or
:func:`load_environment`.

A task is one seed of a variant; an episode is the project's runner
(:func:`agent.runner.run_episode_async`) with the verifiers agent as its policy, so it is played
exactly as ``maze-eval`` plays it: the prompt protocol and history window of the model's agent
profile (read from the endpoint's ``/v1/models``; the taskset's ``protocol``/``history`` override
it), the variant's turn limit, parse failures counted as turns. Each turn goes to the model as
verifiers carries a multimodal turn, a user message with a text part and the frame as an
``image_url`` part (a ``data:image/png`` URL), through verifiers' interception, which records the
call on the trace. :class:`MazeHarness` makes that call in-process with exactly the messages the
runner's history policy selected (a sliding window is a history rewrite, recorded as its own
branch, as compaction is). Reward ``solved``: 1.0 when the episode stopped on the goal. Greedy,
32-token replies unless ``--env.player.sampling.*`` say otherwise.

    vf-eval maze-gateway -m maze-tiny:maze-grpo --client.base-url http://127.0.0.1:8000/v1 \\
        --client.api-key-var MAZE_API_KEY --env.taskset.seeds 0-63 --no-push
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field, field_validator
from verifiers.v1.configs.client import resolve_api_key
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.types import AssistantMessage

from agent.env import DEFAULT_ENV_ID, get_variant, register_envs
from agent.errors import PolicyError
from agent.protocol import Message
from agent.runner import (
    DEFAULT_MAX_TOKENS,
    EpisodeSpec,
    PolicyReply,
    SamplingParams,
    StopReason,
    parse_seeds,
    run_episode_async,
)
from maze_gateway.endpoint import gateway_profile, runner_config

__all__ = ["MazeData", "MazeEnvConfig", "MazeHarness", "MazeHarnessConfig", "MazeTask", "MazeTaskset",
           "MazeTasksetConfig", "MazeVerifiersEnv", "load_environment"]

TASKSET_ID = "maze-gateway"  # the installed package vf-eval imports (maze_gateway) for the taskset


class MazeTasksetConfig(vf.TasksetConfig):
    """Which mazes, and how the runner talks to the model (``--env.taskset.*``)."""

    variant: str = Field(DEFAULT_ENV_ID, description="maze variant: maze_2d/simple, maze_2d/easy or maze_2d/hard")
    seeds: str = Field("0-63", description="maze seeds, e.g. 0-63 or 1,5,9: one task each")
    protocol: str | None = Field(None, description="prompt protocol; None: the model's agent profile")
    history: str | None = Field(None, description="'full' or 'window:K'; None: the model's agent profile")
    max_turns: int | None = Field(None, ge=1, description="turn limit; None: the variant's")

    @field_validator("variant")
    @classmethod
    def _known_variant(cls, v: str) -> str:
        get_variant(v)
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: str) -> str:
        parse_seeds(v)
        return v


class MazeData(vf.TaskData):
    """One maze: the env opens the conversation with its first frame (the task has no prompt)."""

    seed: int = Field(description="reset seed of the maze")
    variant: str = Field(DEFAULT_ENV_ID, description="maze variant")


class MazeTask(vf.Task[MazeData]):
    pass


class MazeTaskset(vf.Taskset[MazeTask, MazeTasksetConfig]):
    """The seeds of one variant, in order."""

    def load(self) -> Iterator[MazeTask]:
        variant = self.config.variant
        for seed in parse_seeds(self.config.seeds):
            yield MazeTask(MazeData(id=f"{variant}#{seed}", name=f"{variant} seed {seed}", prompt=None, seed=seed,
                                    variant=variant), self.config.task)


class MazeHarnessConfig(vf.HarnessConfig):
    pass


class MazeHarness(vf.Harness[MazeHarnessConfig]):
    """One chat call per segment, in-process, through the rollout's interception endpoint: the
    messages a turn carries are the whole request (the runner applied its history policy), not an
    addition to the transcript. Records which model version answered in ``trace.info``."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData, tool_interception_url: str | None = None
                     ) -> vf.ProgramResult:
        if not isinstance(data.prompt, list):
            raise vf.HarnessError("the maze harness plays env-opened exchanges: each turn brings its messages")
        return await self._call(ctx, trace, endpoint, secret, data.prompt)

    async def resume(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData, messages: vf.Messages,
                     tool_interception_url: str | None = None) -> vf.ProgramResult:
        return await self._call(ctx, trace, endpoint, secret, messages)

    async def _call(self, ctx: vf.ModelContext, trace: vf.Trace, endpoint: str, secret: str,
                    messages: vf.Messages) -> vf.ProgramResult:
        from openai import AsyncOpenAI

        # The interception imposes the run's model and sampling and forwards to the real endpoint.
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            completion = await client.chat.completions.create(model=ctx.model,
                                                              messages=[message_to_wire(m) for m in messages])
        served = trace.info.setdefault("served_models", [])
        if completion.model and completion.model not in served:
            served.append(completion.model)
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


class MazeEnvConfig(vf.EnvConfig):
    """The maze env's one seat (``--env.player.*``): local and tool-less (the harness runs in this
    process), greedy 32-token replies like ``maze-eval``."""

    player: vf.AgentConfig = vf.AgentConfig(
        runtime=vf.SubprocessConfig(), sampling=vf.SamplingConfig(temperature=0.0, max_tokens=DEFAULT_MAX_TOKENS))


class _InteractionPolicy:
    """The runner's policy seam over a verifiers interaction: one ``turn()`` per runner turn."""

    def __init__(self, interaction: Any, label: str) -> None:
        self.interaction, self.label = interaction, label

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> PolicyReply:
        calls_before = len(self.interaction.trace.calls)
        segment = await self.interaction.turn(messages)
        if segment.terminated:
            trace = self.interaction.trace
            reason = trace.stop_condition or (trace.errors[-1].message if trace.errors else "ended")
            raise PolicyError(f"the rollout ended: {reason}", transient=False)
        reply = next((m.content or "" for m in reversed(segment.messages) if isinstance(m, AssistantMessage)), "")
        calls = self.interaction.trace.calls[calls_before:]
        usage = calls[-1].usage if calls else None
        served = self.interaction.trace.info.get("served_models") or [None]
        return PolicyReply(text=reply, model=served[-1],
                           prompt_tokens=usage.input_tokens if usage else None,
                           completion_tokens=usage.completion_tokens if usage else None)


class MazeVerifiersEnv(vf.Env[MazeEnvConfig]):
    """Each task is one episode played by the runner; the trace's reward is ``solved``."""

    async def run(self, task: MazeTask, agents: vf.Agents) -> None:
        player = agents.player
        ts = self.taskset.config
        client = player.config.client
        profile = await gateway_profile(client.base_url, resolve_api_key(client), player.config.model)
        cfg = runner_config(task.data.variant, profile, protocol=ts.protocol, history=ts.history,
                            max_turns=ts.max_turns)
        register_envs()
        async with player.interaction(task) as interaction:
            record = await run_episode_async(_InteractionPolicy(interaction, player.config.model),
                                             EpisodeSpec(seed=task.data.seed), cfg)
            trace = interaction.trace
            if record.stop_reason is not StopReason.ERROR:
                trace.record_reward("solved", 1.0 if record.success else 0.0)
            trace.info["maze"] = {**record.summary(), "served_model": record.model, "protocol": record.protocol,
                                  "history": record.history, "max_turns": record.max_turns}


def load_environment(variant: str = DEFAULT_ENV_ID, seeds: str | list[int] = "0-63", *, protocol: str | None = None,
                     history: str | None = None, max_turns: int | None = None, **env_config: Any) -> MazeVerifiersEnv:
    """The maze environment for verifiers' Python API (``vf-eval maze-gateway`` builds the same):
    ``seeds`` as ``"0-63"`` or a list; ``env_config`` passes more :class:`MazeEnvConfig` fields
    (``player=...``)."""
    seed_text = seeds if isinstance(seeds, str) else ",".join(str(s) for s in seeds)
    taskset = MazeTasksetConfig(id=TASKSET_ID, variant=variant, seeds=seed_text, protocol=protocol, history=history,
                                max_turns=max_turns)
    return vf.load_environment(MazeEnvConfig(taskset=taskset, **env_config))
