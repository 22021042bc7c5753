"""The Inspect AI task ``maze_gateway/maze``: the fixed maze set, each seed a full multi-turn episode.

    MAZE_BASE_URL=http://127.0.0.1:8000/v1 MAZE_API_KEY=KEY \\
    inspect eval maze_gateway/maze --model openai-api/maze/maze-tiny:maze-grpo -T seeds=0-63

Every episode is played by the project's runner (:func:`agent.runner.run_episode_async`), with
Inspect's model as its policy: the prompt protocol and history window of the model's agent
profile (read from the gateway's ``/v1/models``; ``-T protocol=``/``-T history=`` override it),
the variant's turn limit (``-T max_turns=``), parse failures counted as turns, greedy decoding
with the runner's 32-token replies unless Inspect's ``--temperature``/``--max-tokens`` say
otherwise. A sample scores C when the episode stopped on the goal, I otherwise; an episode that
ended on an endpoint error is a sample error, never a failure. The log holds, per sample, every
model call (the messages sent, frames included, and the reply), the whole conversation with the
frame after each turn (``messages``), and in the score's metadata the version the gateway served
(``served_model``: ``base:adapter@version``), stop reason, turns and tokens.
"""

from __future__ import annotations

from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageUser,
    ContentImage,
    ContentText,
    GenerateConfig,
    Model,
    get_model,
)
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    Metric,
    SampleScore,
    Score,
    Target,
    accuracy,
    metric,
    scorer,
    stderr,
    value_to_float,
)
from inspect_ai.solver import Generate, Solver, TaskState, solver

from agent.env import DEFAULT_ENV_ID, get_variant, register_envs
from agent.errors import PolicyError
from agent.protocol import AgentProfile, Message
from agent.runner import (
    DEFAULT_MAX_TOKENS,
    EpisodeRecord,
    EpisodeSpec,
    PolicyReply,
    SamplingParams,
    StopReason,
    parse_seeds,
    run_episode_async,
)
from agent.tools import replay_conversation
from maze_gateway.endpoint import gateway_profile, runner_config

__all__ = ["InspectPolicy", "maze", "play_maze", "solved"]

EPISODE_KEY = "maze_episode"  # where the solver leaves the EpisodeRecord for the scorer (the sample's store)


class MazeEpisodeError(RuntimeError):
    """The endpoint failed for good during an episode: the sample errors, it is not scored."""


@task
def maze(seeds: str | int | list[int] = "0-63", variant: str = DEFAULT_ENV_ID, protocol: str | None = None,
         history: str | None = None, max_turns: int | None = None) -> Task:
    """Seeds of a maze variant, each played to the end through the model (``-T seeds=0-63``,
    ``-T variant=maze_2d/easy``, ``-T history=window:2``, ...)."""
    seed_list = _seed_list(seeds)
    get_variant(variant)  # an unknown variant fails here, naming the known ones
    samples = [Sample(id=seed, input=f"{variant}, seed {seed}", target="solved",
                      metadata={"seed": seed, "variant": variant}) for seed in seed_list]
    return Task(dataset=MemoryDataset(samples, name=f"{variant} seeds {seeds}"),
                solver=play_maze(variant, protocol=protocol, history=history, max_turns=max_turns),
                scorer=solved(), config=GenerateConfig(temperature=0.0, max_tokens=DEFAULT_MAX_TOKENS),
                metadata={"variant": variant, "seeds": seed_list})


def _seed_list(seeds: str | int | list[int]) -> list[int]:
    if isinstance(seeds, bool):
        raise ValueError(f"seeds must look like '0-63' or '1,5,9', got {seeds!r}")
    if isinstance(seeds, int):
        return parse_seeds(str(seeds))
    if isinstance(seeds, list):
        return parse_seeds(",".join(str(s) for s in seeds))
    return parse_seeds(str(seeds))


class InspectPolicy:
    """The runner's policy seam over an Inspect model: the runner's messages (text and data-URL
    frames) become Inspect chat messages; the reply keeps its usage and the model that served it."""

    def __init__(self, model: Model, label: str) -> None:
        self.model, self.label = model, label

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> PolicyReply:
        try:
            output = await self.model.generate([_inspect_message(m) for m in messages])
        except Exception as exc:  # noqa: BLE001 - Inspect has retried what it retries: this is final
            raise PolicyError(f"{type(exc).__name__}: {exc}", transient=False) from exc
        usage = output.usage
        return PolicyReply(text=output.completion, model=output.model or None,
                           prompt_tokens=usage.input_tokens if usage else None,
                           completion_tokens=usage.output_tokens if usage else None)


def _inspect_message(message: Message) -> ChatMessage:
    if message["role"] == "assistant":
        return ChatMessageAssistant(content=message["content"])
    parts: list[ContentText | ContentImage] = []
    for part in message["content"]:
        if part["type"] == "text":
            parts.append(ContentText(text=part["text"]))
        else:
            parts.append(ContentImage(image=part["image_url"]["url"]))
    return ChatMessageUser(content=parts)


_profiles: dict[tuple[str, str], AgentProfile] = {}


async def _profile(model: Model, name: str) -> AgentProfile:
    """The model's agent profile, asked of its endpoint once per process (samples share it; the
    first few may ask together)."""
    key = (str(model.api.base_url), name)
    if key not in _profiles:
        _profiles[key] = await gateway_profile(key[0], model.api.api_key, name)
    return _profiles[key]


@solver
def play_maze(variant: str = DEFAULT_ENV_ID, *, protocol: str | None = None, history: str | None = None,
              max_turns: int | None = None) -> Solver:
    """Play the sample's seed to the end with the runner, the model as its policy."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        service_name = getattr(model.api, "service_model_name", None)
        name = service_name() if callable(service_name) else model.name  # the id the endpoint knows
        cfg = runner_config(variant, await _profile(model, name), protocol=protocol, history=history,
                            max_turns=max_turns)
        register_envs()
        record = await run_episode_async(InspectPolicy(model, name), EpisodeSpec(seed=state.metadata["seed"]), cfg)
        if record.stop_reason is StopReason.ERROR:
            raise MazeEpisodeError(f"seed {record.seed}: the endpoint failed: {record.error}")
        state.messages = [_inspect_message(m) for m in replay_conversation(record)]
        for message in state.messages:
            if isinstance(message, ChatMessageAssistant):
                message.model = record.model
        state.store.set(EPISODE_KEY, record.model_dump(mode="json"))
        state.completed = True
        return state

    return solve


@metric
def completion_tokens_per_solve() -> Metric:
    """Mean completion tokens of a solved episode (as ``maze-eval`` reports it)."""
    return _per_solve("completion_tokens")


@metric
def tokens_per_solve() -> Metric:
    """Mean tokens (prompt and completion, every turn) of a solved episode."""
    return _per_solve("total_tokens")


def _per_solve(key: str) -> Metric:
    to_float = value_to_float()  # epochs reduce C/I to 1.0/0.0 before metrics see them

    def value(scores: list[SampleScore]) -> float:
        solved_ = [s.score.metadata[key] for s in scores if to_float(s.score.value) == 1.0 and s.score.metadata]
        return sum(solved_) / len(solved_) if solved_ else 0.0

    return value


@scorer(metrics=[accuracy(), stderr(), tokens_per_solve(), completion_tokens_per_solve()])
def solved() -> Any:
    """C when the episode stopped on the goal; the metadata say how it went and which version served it."""

    async def score(state: TaskState, target: Target) -> Score:
        record = EpisodeRecord.model_validate(state.store.get(EPISODE_KEY))
        last = record.turns[-1].reply if record.turns else ""
        return Score(
            value=CORRECT if record.success else INCORRECT, answer=last,
            explanation=f"{record.stop_reason.value} after {record.num_turns} turns "
                        f"(shortest path: {record.optimal_moves} moves)",
            metadata={"seed": record.seed, "served_model": record.model, "stop_reason": record.stop_reason.value,
                      "turns": record.num_turns, "optimal_moves": record.optimal_moves, "protocol": record.protocol,
                      "history": record.history, "max_turns": record.max_turns,
                      "completion_tokens": record.completion_tokens, "total_tokens": record.total_tokens})

    return score

