"""Typed configuration of the episode runner. Defaults are named constants."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from agent.env import DEFAULT_ENV_ID, get_variant
from agent.protocol import HistoryPolicy, get_protocol

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_BACKOFF_INITIAL_S = 0.25
DEFAULT_BACKOFF_MAX_S = 8.0
DEFAULT_RETRY_AFTER_CAP_S = 30.0
DEFAULT_EPISODE_RETRY_BUDGET = 16
DEFAULT_WAIT_BUDGET_S = 300.0
DEFAULT_MAX_TOKENS = 32
DEFAULT_CONCURRENCY = 8


def _known_env(v: str) -> str:
    get_variant(v)
    return v


#: Field types shared by every config that names an env, a protocol or a history policy.
EnvId = Annotated[str, AfterValidator(_known_env)]
ProtocolName = Annotated[str, AfterValidator(lambda v: get_protocol(v).name)]
History = Annotated[HistoryPolicy, BeforeValidator(lambda v: HistoryPolicy.parse(v) if isinstance(v, str) else v)]


def parse_seeds(text: str) -> list[int]:
    """``"0-63"``, ``"1,5,9"`` or ``"0-7,20"`` -> sorted unique seeds."""
    seeds: set[int] = set()
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            if sep:
                if int(hi) < int(lo):
                    raise ValueError
                seeds.update(range(int(lo), int(hi) + 1))
            else:
                seeds.add(int(lo))
    except ValueError:
        raise ValueError(f"seeds must look like '0-63' or '1,5,9', got {text!r}") from None
    if any(s < 0 for s in seeds):
        raise ValueError("seeds must be >= 0")
    return sorted(seeds)


class ConfigModel(BaseModel):
    """Base of every config: unknown keys are errors; loadable from YAML."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def from_file(cls, path: str | Path):
        """Load from a YAML (or JSON) file."""
        data: Any = yaml.safe_load(Path(path).read_text())
        return cls.model_validate(data or {})


class EndpointConfig(ConfigModel):
    """Where the model is served: any OpenAI-compatible API."""

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    api_key: str = Field("EMPTY", description="bearer token; 'EMPTY' when the server needs none")
    model: str = Field(description="model id, '<base>' or '<base>:<adapter>'")
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, description="per-request timeout in seconds")
    report_outcomes: bool = Field(
        True, description=("after an episode that a maze-gateway answered with a version of an adapter name (it names "
                           "base:name@version for a base:name request), send the episode's outcome to the gateway's "
                           "/v1/outcomes, where a running canary is judged on its sessions; a server that never names "
                           "a version (plain vLLM, OpenAI) is never sent one"))


class RetryPolicy(ConfigModel):
    """How transient endpoint failures are retried. An unavailable endpoint (no connection, no answer in
    time, 502, 503, 504) or a rate limit (429) is waited out for up to ``wait_budget_s`` per request
    (agent.runner.outage); the other transient failures (408, 409, 500, a reply without choices) are
    counted in attempts and in the episode's budget."""

    max_attempts: int = Field(DEFAULT_MAX_ATTEMPTS, ge=1,
                              description="attempts per request for failures counted in attempts, first included")
    backoff_initial_s: float = Field(DEFAULT_BACKOFF_INITIAL_S, ge=0, description="first backoff delay")
    backoff_max_s: float = Field(DEFAULT_BACKOFF_MAX_S, ge=0, description="largest backoff delay")
    retry_after_cap_s: float = Field(DEFAULT_RETRY_AFTER_CAP_S, ge=0, description="cap on a server's Retry-After")
    episode_budget: int = Field(DEFAULT_EPISODE_RETRY_BUDGET, ge=0,
                                description="retries counted in attempts allowed per episode in all")
    wait_budget_s: float = Field(
        DEFAULT_WAIT_BUDGET_S, ge=0,
        description=("seconds one request keeps waiting for an unavailable or rate-limiting endpoint before its "
                     "episode ends as errored: long enough for a gateway replica to restart; 0 counts those "
                     "failures in attempts like the others"))


class SamplingParams(ConfigModel):
    """Sampling sent with every chat request."""

    temperature: float = Field(0.0, ge=0, description="0 is greedy")
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1, description="completion token limit per turn")
    top_p: float | None = Field(None, gt=0, le=1, description="nucleus sampling; None leaves the server default")
    seed: int | None = Field(None, description="sampling seed, when the server supports it")


class RunnerConfig(ConfigModel):
    """What an episode run needs besides the policy."""

    env_id: EnvId = Field(DEFAULT_ENV_ID, description="registered maze variant")
    max_turns: int | None = Field(None, ge=1, description="turn limit; None uses the variant's default")
    protocol: ProtocolName = Field("tuple", description="prompt protocol name (tuple or keyword)")
    history: History = Field(default_factory=HistoryPolicy, description="which earlier turns are sent")
    sampling: SamplingParams = Field(default_factory=SamplingParams, description="sampling parameters")
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="transient-failure retry policy")
    concurrency: int = Field(DEFAULT_CONCURRENCY, ge=1, description="episodes run at once")

    @property
    def turn_limit(self) -> int:
        return self.max_turns or get_variant(self.env_id).max_turns
