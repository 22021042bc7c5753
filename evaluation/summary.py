"""Summaries of a run's episodes: solve rate with its Wilson interval, pass@k, turn metrics."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import BaseModel, Field

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
    stop_reasons: dict[str, int] = Field(default_factory=dict, description="count per stop reason")


def summarize(rows: list[dict[str, Any]], samples: int = 1) -> RunSummary:
    """Summarise flat episode rows (as :meth:`Store.episode_rows` returns them)."""
    scored = [r for r in rows if r["stop_reason"] != "error"]
    solved = [r for r in scored if r["success"]]
    n, c = len(scored), len(solved)
    low, high = wilson_interval(c, n)
    reasons: dict[str, int] = defaultdict(int)
    for r in rows:
        reasons[r["stop_reason"]] += 1
    turns = sum(r["turns"] for r in scored)
    effs = [r["path_efficiency"] for r in solved if r["path_efficiency"] is not None]
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
        stop_reasons=dict(reasons),
    )
