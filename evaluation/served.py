"""Served curves: a training run's exported steps as a gateway serves them, next to the trainer's
own pass@1 at the same steps.

The trainer scores its policy in-process, with its own prompts and sampling; what users get is the
adapter published to the store and answered by the gateway. ``maze-train watch`` publishes every
exported step as a new adapter version, scores that version here (pinned, so a later publish or
promote cannot change what a run measured) and calls :func:`record_served_step`; with ``--gate``
each point also shows the offline gate's decision on its version (:func:`gate_label`);
:func:`served_curves` reads the curves back for ``maze-eval leaderboard --curves`` and
``maze-eval report --curve``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from evaluation.store import Store
from evaluation.summary import summarize
from serving.adapters import ModelId

SERVED_METRIC = "served/pass_at_1"
TRAINER_METRIC = "trainer/pass_at_1"
# The trainer's own pass@1 as the launcher's commands record it (the watcher, `maze-train logs
# --follow`, `maze-train sync`), in order of preference.
TRAINER_METRICS = (TRAINER_METRIC, "eval/all/pass_at_1", "eval/true_pass_at_1")


def served_run_name(source: str, step: int) -> str:
    """The evaluation run name of step ``step`` of ``source`` (how a restarted watcher finds it)."""
    return f"{source}-step-{step}"


class ServedPoint(BaseModel):
    """One exported step: the trainer's pass@1 and the served solve rate of its published version."""

    step: int = Field(description="global training step")
    trainer_pass_at_1: float | None = Field(description="the trainer's own pass@1 at this step; None if it logged none")
    served: float = Field(description="solve rate through the gateway (greedy pass@1)")
    ci_low: float = Field(description="95% Wilson interval of the served solve rate, low end")
    ci_high: float = Field(description="95% Wilson interval of the served solve rate, high end")
    n: int = Field(description="episodes scored")
    gap: float | None = Field(description="served minus trainer pass@1; None without a trainer value")
    version: str = Field(description="the adapter version the step was published as")
    run_id: str = Field(description="the evaluation run that scored it")
    gate: str | None = Field(None, description="the offline gate's decision on the version (maze-train watch --gate): "
                                               "promoted, worse, undecided, or 'better, not promoted'; None: not gated")


class ServedCurve(BaseModel):
    """A training run's served curve."""

    source: str = Field(description="training run (job submission id)")
    base: str = Field(description="base model id the adapter versions are served on")
    adapter: str = Field(description="adapter name the steps were published under")
    env_id: str = Field(description="maze variant scored")
    points: list[ServedPoint] = Field(description="one per scored step, oldest first")
    best_step: int | None = Field(description="the first step with the highest served solve rate")

    @property
    def best(self) -> ServedPoint | None:
        return next((p for p in self.points if p.step == self.best_step), None)

    @property
    def promote_command(self) -> str | None:
        """The command that makes the adapter name serve the best step."""
        best = self.best
        return f"maze-serve adapters promote {ModelId(None, self.adapter, best.version)}" if best else None


def record_served_step(store: Store, source: str, step: int, *, base: str, adapter: str, version: str,
                       env_id: str, run_id: str, served: float, trainer_pass_at_1: float | None) -> bool:
    """Record a scored step: the served (and trainer) curve points, then the step's link to its
    version and run. The link goes last, so its presence means the step is done; every write is
    idempotent, so recording a step twice changes nothing. Returns False if it was already done."""
    store.add_curve_point(source, base, env_id, step, SERVED_METRIC, served)
    if trainer_pass_at_1 is not None:
        store.add_curve_point(source, base, env_id, step, TRAINER_METRIC, trainer_pass_at_1)
    return store.add_served_step(source, step, base=base, adapter=adapter, version=version, run_id=run_id)


def _trainer_values(points: list[dict]) -> dict[int, float]:
    """Step -> the trainer's pass@1, from the most preferred metric each step has."""
    rank = {m: i for i, m in enumerate(TRAINER_METRICS)}
    best: dict[int, tuple[int, float]] = {}
    for p in points:
        r = rank.get(p["metric"])
        if r is not None and (p["step"] not in best or r < best[p["step"]][0]):
            best[p["step"]] = (r, float(p["value"]))
    return {step: value for step, (_, value) in best.items()}


def served_curves(store: Store, source: str | None = None, env_id: str | None = None) -> list[ServedCurve]:
    """Every training run's served curve (or ``source``'s), with the trainer's pass@1 beside it."""
    by_source: dict[str, list[dict]] = {}
    for row in store.list_served_steps(source):
        by_source.setdefault(row["source"], []).append(row)
    curves = []
    for src, rows in by_source.items():
        trainer = _trainer_values(store.curve(src))
        points, env = [], None
        for row in rows:
            run = store.get_run(row["run_id"])
            if run is None or (env_id and run["env_id"] != env_id):
                continue
            env = run["env_id"]
            s = summarize(store.episode_rows(row["run_id"]), run["manifest"].get("samples", 1))
            t = trainer.get(row["step"])
            points.append(ServedPoint(step=row["step"], trainer_pass_at_1=t, served=s.solve_rate, ci_low=s.ci_low,
                                      ci_high=s.ci_high, n=s.n, gap=None if t is None else s.solve_rate - t,
                                      version=row["version"], run_id=row["run_id"],
                                      gate=gate_label(store, row["adapter"], row["version"])))
        if not points:
            continue
        top = max(p.served for p in points)
        curves.append(ServedCurve(source=src, base=rows[-1]["base"], adapter=rows[-1]["adapter"], env_id=env or "?",
                                  points=points, best_step=next(p.step for p in points if p.served == top)))
    return curves


def gate_label(store: Store, adapter: str, version: str) -> str | None:
    """The latest offline gate decision on ``adapter@version`` in a word or two (None: never gated)."""
    decisions = store.gate_decisions(adapter=adapter, version=version)
    if not decisions:
        return None
    last = decisions[-1]
    if last["promoted"]:
        return "promoted"
    return "better, not promoted" if last["verdict"] == "better" else last["verdict"]


def served_step_of_run(store: Store, run_id: str) -> dict | None:
    """The served step a run scored (source, step, adapter, version), if it scored one."""
    return next((r for r in store.list_served_steps() if r["run_id"] == run_id), None)
