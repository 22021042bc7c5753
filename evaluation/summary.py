"""Summaries of a run's episodes: solve rate with its Wilson interval, pass@k, turn metrics."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import BaseModel, Field

from agent.runner import is_scored
from evaluation.stats import pass_at_k, wilson_interval


class RunSummary(BaseModel):
    """Scores of one run. Errored episodes are counted apart, never as failures."""

    n: int = Field(description="episodes with an outcome (errors excluded)")
    solved: int = Field(description="episodes that stopped on the goal")
    errors: int = Field(description="episodes that ended on an endpoint error")
    solve_rate: float = Field(description="solved / n (pass@1 over all samples)")
    ci_low: float = Field(description="95% Wilson interval, low end")
    ci_high: float = Field(description="95% Wilson interval, high end")
    pass_at_k: float | None = Field(None, description="unbiased pass@k (k = samples per seed) when samples > 1")
    k: int = Field(1, description="samples per seed")
    mean_turns_solved: float | None = Field(None, description="mean turns of solved episodes")
    path_efficiency: float | None = Field(None, description="mean (optimal moves + 1) / turns over solved episodes")
    invalid_action_rate: float | None = Field(None, description="invalid actions / turns")
    tokens_per_solve: float | None = Field(
        None, description="mean tokens (prompt + completion, every turn) of a solved episode; None when the "
                          "endpoint reported no usage")
    completion_tokens_per_solve: float | None = Field(
        None, description="mean completion tokens of a solved episode; None when the endpoint reported no usage")
    stop_reasons: dict[str, int] = Field(default_factory=dict, description="count per stop reason")


class RetryReport(BaseModel):
    """Endpoint failures the runner retried while playing (a replica lost mid-request, a 5xx, a reset
    connection): what the run absorbed without losing an episode."""

    retried_requests: int = Field(0, description="turns whose request failed at least once and was retried")
    retries: int = Field(0, description="retries in all (failed attempts that were followed by another)")
    episodes: int = Field(0, description="episodes with at least one retried request")
    errored: int = Field(0, description="episodes that ended on an endpoint error despite the retries")
    recovery_s: float | None = Field(
        None, description="longest wait of a retried request, first attempt to reply: the time to recover it saw")
    waited_s: float = Field(
        0.0, description="seconds the run spent waiting for an unavailable or rate-limiting endpoint (agent.runner.outage)")
    outages: int = Field(0, description="periods in which at least one request waited for the endpoint")
    rate_limited: int = Field(0, description="429 answers waited out")

    def add_waits(self, waits: Any) -> None:
        """Take the run's :class:`agent.EndpointWaits` totals."""
        self.waited_s, self.outages, self.rate_limited = round(waits.waited_s, 2), waits.outages, waits.rate_limited

    def add(self, turns: list[Any], errored: bool) -> None:
        """Count one finished episode's turns (``TurnRecord``s)."""
        retried = [t for t in turns if t.retries]
        self.retried_requests += len(retried)
        self.retries += sum(t.retries for t in retried)
        self.episodes += bool(retried)
        self.errored += errored
        if retried:
            self.recovery_s = max(self.recovery_s or 0.0, *(t.latency_s for t in retried))


def summarize(rows: list[dict[str, Any]], samples: int = 1) -> RunSummary:
    """Summarise flat episode rows (as :meth:`Store.episode_rows` returns them)."""
    scored = [r for r in rows if is_scored(r["stop_reason"])]
    solved = [r for r in scored if r["success"]]
    n, c = len(scored), len(solved)
    low, high = wilson_interval(c, n)
    reasons: dict[str, int] = defaultdict(int)
    for r in rows:
        reasons[r["stop_reason"]] += 1
    turns = sum(r["turns"] for r in scored)
    effs = [r["path_efficiency"] for r in solved if r["path_efficiency"] is not None]
    tokens, completion = (_per_solve(solved, key) for key in ("tokens", "completion_tokens"))
    pak = None
    if samples > 1:
        by_seed: dict[int, list[bool]] = defaultdict(list)
        for r in scored:
            by_seed[r["seed"]].append(bool(r["success"]))
        full = [v for v in by_seed.values() if len(v) >= samples]
        if full:
            pak = sum(pass_at_k(len(v), sum(v), samples) for v in full) / len(full)
    return RunSummary(
        n=n,
        solved=c,
        errors=len(rows) - n,
        solve_rate=c / n if n else 0.0,
        ci_low=low,
        ci_high=high,
        pass_at_k=pak,
        k=samples,
        mean_turns_solved=sum(r["turns"] for r in solved) / c if c else None,
        path_efficiency=sum(effs) / len(effs) if effs else None,
        invalid_action_rate=sum(r["invalid_actions"] for r in scored) / turns if turns else None,
        tokens_per_solve=tokens,
        completion_tokens_per_solve=completion,
        stop_reasons=dict(reasons),
    )


def _per_solve(solved: list[dict[str, Any]], key: str) -> float | None:
    """Mean of ``key`` over solved episodes; None when no solved episode counted any (a server that
    reports no usage), since a solve never costs zero tokens."""
    total = sum(r.get(key) or 0 for r in solved)
    return total / len(solved) if total else None
