"""The manifest of an evaluation run: everything needed to interpret or resume it.

The runner settings a run was played with (env, turn limit, protocol, history, sampling) are a
typed :class:`RunnerSettings` (``runner``); a resume builds its ``RunnerConfig`` from them as
they are. Manifests stored before ``runner`` existed held the same settings as top-level fields
(``manifest_version`` 1); they still load, lifted into ``runner``.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, model_validator

from agent.protocol import get_protocol
from agent.runner import ConfigModel, EnvId, History, RetryPolicy, RunnerConfig, SamplingParams
from serving.adapters import ModelId

MANIFEST_VERSION = 2
#: The runner's settings that version 1 manifests held as top-level fields.
RUNNER_FIELDS = ("env_id", "max_turns", "protocol", "history", "sampling")

#: A protocol id with its version (``tuple/v1``): what a result was produced with.
ProtocolId = Annotated[str, AfterValidator(lambda v: get_protocol(v).id)]
#: A history policy, stored as its text form (``full``, ``window:2``).
StoredHistory = Annotated[History, PlainSerializer(str, return_type=str)]


class RunnerSettings(ConfigModel):
    """How a run's episodes are played: the runner config less what a resume may change (its
    retries and concurrency are the resuming call's)."""

    env_id: EnvId = Field(description="maze variant")
    max_turns: int = Field(ge=1, description="turn limit (the variant's when the run named none)")
    protocol: ProtocolId = Field(description="prompt protocol id, with its version")
    history: StoredHistory = Field(description="history policy")
    sampling: SamplingParams = Field(description="sampling parameters")

    def runner_config(self, *, retry: RetryPolicy, concurrency: int) -> RunnerConfig:
        """The runner config that plays (or resumes) the run with these settings."""
        return RunnerConfig(env_id=self.env_id, max_turns=self.max_turns, protocol=self.protocol, history=self.history,
                            sampling=self.sampling, retry=retry, concurrency=concurrency)


def code_version() -> str:
    """Package version plus the git commit when run from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg = version("maze-gateway")
    except PackageNotFoundError:
        pkg = "0+unknown"
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{pkg}+g{sha}" if sha else pkg


class RunManifest(BaseModel):
    """What a run evaluated, how, and with which code."""

    model_config = ConfigDict(extra="forbid")

    manifest_version: int = Field(MANIFEST_VERSION, description="manifest schema version")
    run_id: str = Field(description="unique run id")
    run_name: str | None = Field(None, description="user-given name")
    endpoint: str = Field(description="OpenAI-compatible base URL evaluated")
    base: str = Field(description="base model id")
    adapter: str | None = Field(None, description="LoRA adapter name; None for the base alone")
    adapter_version: str | None = Field(
        None, description="the adapter version the run is pinned to (resolved once at its start), when the gateway reports one")
    env_spec_version: str = Field(description="agent.env.ENV_SPEC_VERSION")
    runner: RunnerSettings = Field(description="how the episodes are played: env, turn limit, protocol, history, sampling")
    seeds: list[int] = Field(description="maze seeds")
    samples: int = Field(1, description="samples per seed (pass@k)")
    code_version: str = Field(default_factory=code_version, description="maze-gateway version + git commit")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(), description="UTC start")

    @model_validator(mode="before")
    @classmethod
    def _lift_runner_fields(cls, data: Any) -> Any:
        """A version 1 manifest's top-level runner settings, as ``runner``."""
        if isinstance(data, dict) and "runner" not in data and any(k in data for k in RUNNER_FIELDS):
            data = {k: v for k, v in data.items() if k not in RUNNER_FIELDS} | {
                "runner": {k: data[k] for k in RUNNER_FIELDS if k in data}}
        return data

    # The runner's settings as plain values, for tables, reports and the store's columns.
    @property
    def env_id(self) -> str:
        return self.runner.env_id

    @property
    def protocol(self) -> str:
        return self.runner.protocol

    @property
    def history(self) -> str:
        return str(self.runner.history)

    @property
    def max_turns(self) -> int:
        return self.runner.max_turns

    @property
    def sampling(self) -> dict[str, Any]:
        return self.runner.sampling.model_dump(exclude_none=True)

    @property
    def model_id(self) -> str:
        """The model as the user named it (``base:adapter``): what runs are grouped and compared by."""
        return str(ModelId(self.base, self.adapter or None))

    @property
    def served_model(self) -> str:
        """The model every request of the run is sent as: ``base:adapter@version`` when pinned, so
        the run (and a resume of it) keeps its version even when the adapter's alias moves."""
        return str(ModelId(self.base, self.adapter or None, (self.adapter_version or None) if self.adapter else None))

    @property
    def expected_episodes(self) -> int:
        return len(self.seeds) * self.samples
