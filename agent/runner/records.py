"""Typed, versioned records of episodes and turns, serialisable as JSON lines."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Bump when fields change meaning; readers check it.
SCHEMA_VERSION = 1


class StopReason(str, Enum):
    """Why an episode ended."""

    GOAL = "goal"  # stopped on the goal: solved
    WRONG_STOP = "wrong_stop"  # stopped elsewhere
    TURN_LIMIT = "turn_limit"  # ran out of turns
    ERROR = "error"  # the endpoint failed for good: neither solved nor failed


def is_scored(stop_reason: StopReason | str) -> bool:
    """Whether an episode that ended for ``stop_reason`` counts in a score: every outcome does but an
    endpoint error, which says nothing about the model (it is retried on resume, never scored as
    a failure). The one statement of that rule: records, store rows and summaries all ask here."""
    return StopReason(stop_reason) is not StopReason.ERROR


class TurnRecord(BaseModel):
    """One turn: the model's reply and what the environment made of it."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="1-based turn number")
    reply: str = Field(description="the model's raw reply text")
    action: list[Any] | None = Field(description="parsed action (name, payload); None on a parse failure")
    feedback: str = Field(description="feedback text shown to the model next")
    feedback_code: str = Field(description="Feedback name, or PARSE_FAILURE when the env was not stepped")
    reward: float = Field(0.0, description="reward of this step")
    agent: list[int] = Field(description="agent position (row, col) after the turn")
    latency_s: float = Field(description="seconds spent waiting for the reply, retries included")
    prompt_tokens: int | None = Field(None, description="prompt tokens reported by the server")
    completion_tokens: int | None = Field(None, description="completion tokens reported by the server")
    retries: int = Field(0, description="transient failures retried during this turn")


class EpisodeRecord(BaseModel):
    """One episode with its outcome, metrics and full trajectory (enough to replay it)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(SCHEMA_VERSION, description="record schema version")
    env_id: str = Field(description="maze variant id")
    env_spec_version: str = Field(description="agent.env.ENV_SPEC_VERSION used")
    seed: int | None = Field(description="reset seed; None for an explicit initial state")
    sample: int = Field(0, description="sample index when a seed is played several times")
    model: str = Field(description="model id the policy used ('<base>:<adapter>' or a label)")
    protocol: str = Field(description="prompt protocol id, e.g. tuple/v1")
    history: str = Field(description="history policy, 'full' or 'window:K'")
    sampling: dict[str, Any] = Field(default_factory=dict, description="sampling parameters sent")
    max_turns: int = Field(description="turn limit in force")
    maze: list[str] = Field(description="maze rows, '#' wall and '.' floor")
    start: list[int] = Field(description="agent start (row, col)")
    goal: list[int] = Field(description="goal (row, col)")
    optimal_moves: int | None = Field(description="BFS shortest path length; None if unreachable")
    success: bool = Field(False, description="stopped on the goal")
    reward: float = Field(0.0, description="episode return")
    stop_reason: StopReason = Field(description="why the episode ended")
    error: str | None = Field(None, description="the failure, when stop_reason is error")
    turns: list[TurnRecord] = Field(default_factory=list, description="every turn, in order")
    wall_time_s: float = Field(0.0, description="episode wall time in seconds")

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def scored(self) -> bool:
        """Whether the episode counts in a score (:func:`is_scored`: not an endpoint error)."""
        return is_scored(self.stop_reason)

    @property
    def invalid_actions(self) -> int:
        """Turns whose reply did not parse or failed validation (wall bumps are valid)."""
        return sum(t.feedback_code not in ("EXECUTED", "HIT_WALL") for t in self.turns)

    @property
    def parse_failures(self) -> int:
        return sum(t.feedback_code == "PARSE_FAILURE" for t in self.turns)

    @property
    def wall_bumps(self) -> int:
        return sum(t.feedback_code == "HIT_WALL" for t in self.turns)

    @property
    def path_efficiency(self) -> float | None:
        """(optimal moves + the stop) / turns taken, for solved episodes; 1.0 is optimal."""
        if not self.success or self.optimal_moves is None or not self.turns:
            return None
        return (self.optimal_moves + 1) / len(self.turns)

    @property
    def total_tokens(self) -> int:
        return sum((t.prompt_tokens or 0) + (t.completion_tokens or 0) for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        """Tokens the model generated over the episode (what a reply costs to produce)."""
        return sum(t.completion_tokens or 0 for t in self.turns)

    def summary(self) -> dict[str, Any]:
        """Flat metrics, for tables and stores."""
        return {
            "seed": self.seed,
            "sample": self.sample,
            "success": self.success,
            "stop_reason": self.stop_reason.value,
            "turns": self.num_turns,
            "reward": self.reward,
            "optimal_moves": self.optimal_moves,
            "path_efficiency": self.path_efficiency,
            "invalid_actions": self.invalid_actions,
            "wall_bumps": self.wall_bumps,
            "total_tokens": self.total_tokens,
            "completion_tokens": self.completion_tokens,
            "error": self.error,
        }


def write_jsonl(records: Iterable[EpisodeRecord], path: str | Path) -> int:
    """Write records as JSON lines; returns how many were written."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(rec.model_dump_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> Iterator[EpisodeRecord]:
    """Read records written by :func:`write_jsonl`, checking the schema version."""
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            data = json.loads(line)
            if data.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"{path}:{lineno}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
            yield EpisodeRecord.model_validate(data)
