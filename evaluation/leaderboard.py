"""Leaderboard and paired comparison over the results store."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent.runner import is_scored
from evaluation.config import DEFAULT_SEEDS
from evaluation.manifest import RunManifest
from evaluation.stats import mcnemar_exact
from evaluation.store import Store
from evaluation.summary import RunSummary, summarize
from serving.adapters import ModelId


class LeaderboardRow(BaseModel):
    """The latest complete run of one (base, adapter, env, protocol) on one maze set."""

    base: str
    adapter: str | None
    adapter_version: str | None = Field(None, description="the version the run was pinned to, when reported")
    env_id: str
    protocol: str
    seeds: str = Field(description="the maze set, compactly (e.g. '0-63')")
    run_id: str
    date: str
    summary: RunSummary

    @property
    def model(self) -> str:
        return str(ModelId(self.base, self.adapter or None))


def seeds_label(seeds: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the form ``--seeds`` takes)."""
    parts: list[str] = []
    for seed in sorted(seeds):
        if parts and seed == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{seed}"
        else:
            parts.append(str(seed))
    return ",".join(parts)


def leaderboard(store: Store, env_id: str | None = None) -> list[LeaderboardRow]:
    """One row per (base, adapter, env, protocol, maze set): its latest complete run. Rows on the
    fixed maze set come first, best solve rate first; a run on fewer mazes (a quick check, a
    watcher's short curve) gets its own row instead of replacing the full-set score."""
    latest: dict[tuple, dict[str, Any]] = {}
    for run in store.list_runs():  # ordered by start time, so later runs replace earlier ones
        if run["status"] != "complete" or (env_id and run["env_id"] != env_id):
            continue
        seeds = seeds_label(run["manifest"].get("seeds", []))
        latest[(run["base"], run["adapter"], run["env_id"], run["protocol"], seeds)] = run
    rows = []
    for (base, adapter, env, protocol, seeds), run in latest.items():
        summary = summarize(store.episode_rows(run["run_id"]), run["manifest"].get("samples", 1))
        rows.append(LeaderboardRow(base=base, adapter=adapter, adapter_version=run["manifest"].get("adapter_version"),
                                   env_id=env, protocol=protocol, seeds=seeds, run_id=run["run_id"],
                                   date=run["started_at"].strftime("%Y-%m-%d %H:%M"), summary=summary))
    return sorted(rows, key=lambda r: (r.seeds != DEFAULT_SEEDS, -r.summary.solve_rate, r.model))


SIGNIFICANCE = 0.05  # compare's verdict: a difference with an exact McNemar p below this


class Comparison(BaseModel):
    """Paired outcomes of two runs on the seeds both played (first sample of each)."""

    run_a: str
    run_b: str
    paired: int = Field(description="seeds with an outcome in both runs")
    both: int
    only_a: int
    only_b: int
    neither: int
    solve_rate_a: float
    solve_rate_b: float
    p_value: float = Field(description="exact McNemar two-sided p-value")
    model_a: str = Field("", description="what run A was served: base:adapter@version when the run was pinned")
    model_b: str = Field("", description="what run B was served: base:adapter@version when the run was pinned")
    alpha: float = Field(SIGNIFICANCE, description="significance level of the verdict")
    gates: list[dict[str, Any]] = Field(
        default_factory=list, description="offline gate decisions made from these two runs (maze-eval gate): "
                                          "verdict, promoted, and the gate's evidence")

    @property
    def verdict(self) -> str:
        """``a_better``, ``b_better`` or ``no_difference`` (at ``alpha``): e.g. whether a canary
        version (run B) beats the version it is tested against (run A)."""
        if self.p_value >= self.alpha or self.only_a == self.only_b:
            return "no_difference"
        return "b_better" if self.only_b > self.only_a else "a_better"


def compare(store: Store, run_a: str, run_b: str) -> Comparison:
    """Pair two runs on seeds; raises ``KeyError`` naming a run that does not exist."""
    outcomes, models = [], []
    for run_id in (run_a, run_b):
        run = store.get_run(run_id)
        if run is None:
            raise KeyError(run_id)
        models.append(RunManifest.model_validate(run["manifest"]).served_model)
        rows = store.episode_rows(run_id)
        outcomes.append({r["seed"]: bool(r["success"]) for r in rows if r["sample"] == 0 and is_scored(r["stop_reason"])})
    a, b = outcomes
    seeds = sorted(set(a) & set(b))
    both = sum(a[s] and b[s] for s in seeds)
    only_a = sum(a[s] and not b[s] for s in seeds)
    only_b = sum(b[s] and not a[s] for s in seeds)
    n = len(seeds)
    return Comparison(
        run_a=run_a, run_b=run_b, paired=n, both=both, only_a=only_a, only_b=only_b, neither=n - both - only_a - only_b,
        solve_rate_a=(both + only_a) / n if n else 0.0, solve_rate_b=(both + only_b) / n if n else 0.0,
        p_value=mcnemar_exact(only_a, only_b), model_a=models[0], model_b=models[1],
        gates=[row["evidence"] for row in store.gate_decisions(run_a, run_b)
               if {row["run_id"], row["against_run_id"]} == {run_a, run_b}],
    )
