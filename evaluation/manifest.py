"""The manifest of an evaluation run: everything needed to interpret or resume it."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_VERSION = 1


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
    env_id: str = Field(description="maze variant")
    env_spec_version: str = Field(description="agent.env.ENV_SPEC_VERSION")
    protocol: str = Field(description="prompt protocol id")
    history: str = Field(description="history policy")
    sampling: dict[str, Any] = Field(description="sampling parameters")
    max_turns: int = Field(description="turn limit")
    seeds: list[int] = Field(description="maze seeds")
    samples: int = Field(1, description="samples per seed (pass@k)")
    code_version: str = Field(default_factory=code_version, description="maze-gateway version + git commit")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(), description="UTC start")

    @property
    def model_id(self) -> str:
        """The model as the user named it (``base:adapter``): what runs are grouped and compared by."""
        return f"{self.base}:{self.adapter}" if self.adapter else self.base

    @property
    def served_model(self) -> str:
        """The model every request of the run is sent as: ``base:adapter@version`` when pinned, so
        the run (and a resume of it) keeps its version even when the adapter's alias moves."""
        return f"{self.model_id}@{self.adapter_version}" if self.adapter and self.adapter_version else self.model_id

    @property
    def expected_episodes(self) -> int:
        return len(self.seeds) * self.samples
