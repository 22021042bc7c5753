"""``EvalConfig``: one typed config for an evaluation run (CLI and library share it)."""

from __future__ import annotations

from pydantic import Field, field_validator

from agent.env import DEFAULT_ENV_ID
from agent.runner import ConfigModel, EnvId, History, ProtocolName, RetryPolicy, parse_seeds

DEFAULT_SEEDS = "0-63"
DEFAULT_CONCURRENCY = 8


class EvalConfig(ConfigModel):
    """An evaluation of one (base, adapter) on a maze set."""

    endpoint: str | None = Field(None, description="OpenAI-compatible base URL; None: the embedded gateway")
    api_key: str = Field("EMPTY", description="bearer token for the endpoint")
    base: str | None = Field(None, description="base model id; None: the endpoint's first base model")
    adapter: str | None = Field(
        None, description="LoRA adapter name (the run pins the version it serves at the start) or name@version; "
                          "None evaluates the base alone")
    env_id: EnvId = Field(DEFAULT_ENV_ID, description="maze variant")
    seeds: list[int] = Field(default_factory=lambda: parse_seeds(DEFAULT_SEEDS), description="maze seeds")
    samples: int = Field(1, ge=1, description="samples per seed; pass@k uses k = samples")
    temperature: float = Field(0.0, ge=0, description="sampling temperature (0: greedy)")
    max_tokens: int = Field(32, ge=1, description="completion tokens per turn")
    max_turns: int | None = Field(None, ge=1, description="turn limit; None: the variant's")
    protocol: ProtocolName | None = Field(None, description="prompt protocol; None: the base model's agent profile")
    history: History | None = Field(None, description="history policy; None: the base model's agent profile")
    concurrency: int = Field(DEFAULT_CONCURRENCY, ge=1, description="episodes at once")
    timeout_s: float = Field(120.0, gt=0, description="per-request timeout")
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="transient-failure retries")
    run_name: str | None = Field(None, description="a name for the run")
    db: str | None = Field(None, description="results database URL or SQLite path; None: MAZE_DB or the default file")

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v):
        return parse_seeds(v) if isinstance(v, str) else v

    @field_validator("adapter")
    @classmethod
    def _adapter(cls, v: str | None) -> str | None:
        if v is not None and (not v or ":" in v or "/" in v):
            raise ValueError(f"adapter must be a plain name (no ':' or '/'), got {v!r}")
        return v
