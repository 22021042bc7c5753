"""Checkpoint -> served score, automatically (``maze-train watch JOB --adapter NAME``).

For every step a training run exports, the watcher

1. publishes it as a new immutable version of adapter ``NAME`` (:func:`training.publishing.publish`;
   the alias moves to the newest step, ``maze-serve adapters promote`` picks another; with ``gate``
   the version is published as a candidate and the alias does not move),
2. scores that version through a gateway with ``maze-eval``'s library, pinned to ``NAME@VERSION``
   so a later publish or promote cannot change what the run measures,
3. records the point on the run's served curve next to the trainer's own pass@1
   (:func:`evaluation.served.record_served_step`),
4. with ``gate``, puts the version through the offline gate (:mod:`evaluation.gate`) against the
   version the name serves: the alias moves only when the step plays better, and the decision is
   marked on the served curve.

It is restart-safe (``kill -9`` included) and never repeats work. What is done lives where it
happened: the ledger (a small JSON file, replaced atomically) maps each published step to its
version; the results store holds the scoring run (found again by its name, every episode
committed as it finishes) and, written last, the step's link to it. So a restarted watcher skips
linked steps, resumes a half-played run where it stopped, scores a published but unscored step
without publishing it again, and records a scored but unlinked step without playing it again. A
step's gate decision is in the results store too: a restarted watcher gates only the steps without
one (a gate killed mid-way is played again from its start).

Training imports evaluation here and in the curve commands (``sync``, ``logs --follow``);
evaluation never imports training, so the graph stays one way.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from agent.cli import EXIT_BAD_INPUT
from agent.runner import ConfigModel
from training.checkpoints import ExportStep, list_steps
from training.errors import TrainingError
from training.publishing import publish

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
DEFAULT_SEEDS = "0-63"  # the fixed maze set maze-eval scores


def default_ledger_path(source: str, adapter: str) -> Path:
    """Where the ledger of (source, adapter) lives unless given: next to the default results store."""
    root = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "maze-gateway" / "watch"
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{source}.{adapter}")
    return root / f"{slug}.json"


class WatchConfig(ConfigModel):
    """What to watch, where to publish it and how to score it."""

    source: str = Field(description="the training run (its job submission id): the served curve's name")
    export_path: str = Field(description="the run's export path (local or s3://), where exported steps appear")
    adapter: str = Field(description="adapter name every step is published under (a new version each)")
    serving_config: str | None = Field(None, description="serving config (name or YAML) whose adapter store receives "
                                                         "the steps; None: the embedded one")
    base: str | None = Field(None, description="base model id; None: the serving config's first")
    endpoint: str | None = Field(None, description="the gateway serving that store (OpenAI base URL); None: the "
                                                   "embedded gateway, started if needed")
    api_key: str = Field("EMPTY", description="bearer token for the endpoint")
    env_id: str | None = Field(None, description="maze variant scored; None: maze-eval's default")
    seeds: str = Field(DEFAULT_SEEDS, description="maze seeds scored per step (default: the fixed 64-maze set)")
    concurrency: int = Field(8, ge=1, description="episodes at once")
    db: str | None = Field(None, description="results store (URL or SQLite path); None: MAZE_DB or the default file")
    ledger: str | None = Field(None, description="the ledger file; None: default_ledger_path(source, adapter)")
    parity: bool = Field(True, description="before scoring a step, check that the gateway serves its version as "
                                           "trained (serving.parity) and keep the result with the version; a "
                                           "step whose parity failed is not scored (one not compared with a "
                                           "reference is, and the watch says so)")
    gate: bool = Field(False, description="publish each step as a candidate (the alias stays) and, once scored, put it "
                                          "through the offline gate against the version the name serves "
                                          "(evaluation.gate, the store's adapters.gate policy): the alias moves only "
                                          "when the step plays better; the first step of a new name is served as "
                                          "published. The gate needs the step's parity passed (`parity` on)")

    @property
    def ledger_path(self) -> Path:
        return Path(self.ledger) if self.ledger else default_ledger_path(self.source, self.adapter)


class LedgerError(TrainingError):
    """The ledger file is unreadable or belongs to another run."""

    exit_code = EXIT_BAD_INPUT


class Ledger:
    """Step -> published adapter version, in a JSON file replaced atomically on every change."""

    def __init__(self, path: Path, source: str, adapter: str, export_path: str):
        self.path, self.source, self.adapter, self.export_path = path, source, adapter, export_path
        self.steps: dict[int, str] = {}
        if path.exists():
            try:
                doc = json.loads(path.read_text())
                owner = (doc["source"], doc["adapter"], doc["export_path"])
                self.steps = {int(k): str(v["version"]) for k, v in doc["steps"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise LedgerError(f"unreadable watch ledger {path}: {exc}") from None
            if owner != (source, adapter, export_path):
                raise LedgerError(f"watch ledger {path} belongs to source {owner[0]!r}, adapter {owner[1]!r}, "
                                  f"export {owner[2]!r}; pass --ledger to use another file")

    def version(self, step: int) -> str | None:
        return self.steps.get(step)

    def record(self, step: int, version: str) -> None:
        """Remember ``step`` as published at ``version``; the file is never seen half-written."""
        self.steps[step] = version
        doc = {"source": self.source, "adapter": self.adapter, "export_path": self.export_path,
               "steps": {str(k): {"version": v} for k, v in sorted(self.steps.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(doc, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)


class Action(enum.Enum):
    """What a step needs next."""

    SKIP = "skip"  # linked in the results store: done
    PUBLISH = "publish"  # not published yet
    SCORE = "score"  # published, no scoring run yet
    RESUME = "resume"  # a scoring run exists but is not complete
    RECORD = "record"  # scored completely, not linked yet


def next_action(*, linked: bool, version: str | None, run_status: str | None) -> Action:
    """The next thing to do for one step, from what the ledger and the results store say about it."""
    if linked:
        return Action.SKIP
    if version is None:
        return Action.PUBLISH
    if run_status is None:
        return Action.SCORE
    return Action.RECORD if run_status == "complete" else Action.RESUME


@dataclass
class StepOutcome:
    """What one pass did for one step."""

    step: int
    action: Action
    version: str | None = None
    run_id: str | None = None
    served: float | None = None
    n: int = 0
    complete: bool = True
    gate: str | None = None  # the gate's decision (evaluation.served.gate_label) with `gate` on


@dataclass
class WatchSummary:
    """The outcome of a watch: per step, and the job's final status when it was followed."""

    outcomes: dict[int, StepOutcome] = field(default_factory=dict)
    job_status: str | None = None

    @property
    def incomplete(self) -> list[int]:
        return sorted(s for s, o in self.outcomes.items() if not o.complete)


class Watcher:
    """One watch of one run: passes over its exported steps (:meth:`run_pass`) until it ends (:meth:`watch`)."""

    def __init__(self, cfg: WatchConfig, on_event: Callable[[str], object] | None = None):
        from evaluation import EvalConfig

        self.cfg = cfg
        self.say = on_event or (lambda _msg: None)
        self.ledger = Ledger(cfg.ledger_path, cfg.source, cfg.adapter, cfg.export_path)
        self._endpoint = cfg.endpoint
        # Checked now: a bad seed list or env fails before anything is published.
        self._eval = EvalConfig(endpoint=cfg.endpoint, api_key=cfg.api_key, base=cfg.base, seeds=cfg.seeds,
                                concurrency=cfg.concurrency, db=cfg.db, **({"env_id": cfg.env_id} if cfg.env_id else {}))

    async def endpoint(self) -> str:
        """The gateway's URL; with none given, the embedded gateway (started once, when first needed)."""
        if self._endpoint is None:
            from serving.local import ensure_embedded_gateway

            self.say("no --endpoint: using the embedded gateway (if it is not running, starting it takes a few "
                     "minutes; `maze-serve logs` shows its progress)")
            self._endpoint = await asyncio.to_thread(ensure_embedded_gateway)
        return self._endpoint

    async def watch(self, job_status: Callable[[], str] | None = None, interval_s: float = 30.0) -> WatchSummary:
        """Passes until the job has ended (``job_status`` returns a terminal status) and its last
        export is scored; one pass without ``job_status``."""
        summary = WatchSummary()
        while True:
            # Read before the pass: a pass that starts after the job ended sees its last export.
            status = await asyncio.to_thread(job_status) if job_status else None
            summary.outcomes.update(await self.run_pass())
            if status is None or status in TERMINAL:
                summary.job_status = status
                return summary
            await asyncio.sleep(interval_s)

    async def run_pass(self) -> dict[int, StepOutcome]:
        """Bring every exported step up to date, oldest first."""
        from evaluation.store import Store

        steps = await asyncio.to_thread(list_steps, self.cfg.export_path)
        store = await asyncio.to_thread(Store, self.cfg.db)
        try:
            return {s.step: await self.bring_up_to_date(store, s) for s in steps}
        finally:
            store.close()

    async def bring_up_to_date(self, store, step: ExportStep) -> StepOutcome:
        """Publish, check, score and record ``step`` as far as it still needs; with ``gate``, then gate it."""
        outcome = await self._scored(store, step)
        if self.cfg.gate and outcome.complete and outcome.version:
            outcome = await self._gate(store, outcome)
        return outcome

    async def _scored(self, store, step: ExportStep) -> StepOutcome:
        from evaluation.served import TRAINER_METRIC

        linked = next(iter(await asyncio.to_thread(store.list_served_steps, self.cfg.source, step.step)), None)
        if linked is not None:
            if step.pass_at_1 is not None:  # a trainer eval dumped after the step was scored still lands
                await asyncio.to_thread(store.add_curve_point, self.cfg.source, linked["base"], self._env_of(store, linked),
                                        step.step, TRAINER_METRIC, step.pass_at_1)
            return StepOutcome(step.step, Action.SKIP, linked["version"], linked["run_id"])
        version, run = await asyncio.to_thread(self._known, store, step.step)
        action = next_action(linked=False, version=version, run_status=run and run["status"])
        if action is Action.PUBLISH:
            from serving.errors import ParityNotPassed

            try:
                version = await self._publish(step.step)
            except ParityNotPassed as exc:  # its files were published before and their parity did not pass
                self.say(f"step {step.step}: not published: {exc}; not scored")
                return StepOutcome(step.step, action, None, None, complete=False)
            action = Action.SCORE
        if action in (Action.SCORE, Action.RESUME):
            if not await self._parity_ok(step.step, version):
                return StepOutcome(step.step, action, version, None, complete=False)
            return await self._score(store, step, version, run, action)
        return await self._record(store, step, version, run)

    def _known(self, store, step: int) -> tuple[str | None, dict | None]:
        """The step's published version (ledger, else the version its scoring run pinned) and that run."""
        from evaluation.served import served_run_name

        runs = [r for r in store.runs_named(served_run_name(self.cfg.source, step)) if r["adapter"] == self.cfg.adapter]
        version = self.ledger.version(step)
        if version is None and runs:  # a lost ledger: the run remembers what it scored
            version = runs[-1]["manifest"].get("adapter_version")
            if version:
                self.ledger.record(step, version)
        run = next((r for r in reversed(runs) if r["manifest"].get("adapter_version") == version), None)
        return version, run

    @staticmethod
    def _env_of(store, linked: dict) -> str:
        run = store.get_run(linked["run_id"])
        return run["env_id"] if run else "?"

    async def _publish(self, step: int) -> str:
        await self.endpoint()  # the embedded stack's S3 must be up before anything is pushed to it
        # Gated, a step is a candidate; the first step of a name not published yet is served as published.
        candidate = self.cfg.gate and await asyncio.to_thread(self._name_published)
        done = await asyncio.to_thread(publish, self.cfg.export_path, step, self.cfg.adapter,
                                       serving_config=self.cfg.serving_config, base=self.cfg.base,
                                       force=not candidate, candidate=candidate)
        self.ledger.record(step, done.version)
        from serving.adapters import ModelId

        self.say(f"step {step}: published {ModelId(done.base, done.name, done.version)}"
                 + (" as a candidate for the gate" if candidate else ""))
        return done.version

    def _adapter_store(self):
        """The serving config's adapter store (its S3 client environment set)."""
        from serving.adapters import AdapterStore, export_s3_env
        from serving.config import load_config

        cfg = load_config(self.cfg.serving_config)
        export_s3_env(cfg)
        return AdapterStore(cfg.adapters)

    def _name_published(self) -> bool:
        return self.cfg.adapter in self._adapter_store().list_names()

    async def _gate(self, store, outcome: StepOutcome) -> StepOutcome:
        """The offline gate on the step's version against the version the name serves, once: a decision
        already in the results store is read back; a version that has served the name (the first step
        of a new name, one promoted by hand) needs none."""
        from evaluation.gate import GateIncomplete, StoreAliases, gate_async
        from evaluation.served import gate_label
        from serving.adapters import STABLE_MOVES, ModelId
        from serving.errors import ParityNotPassed

        step, version = outcome.step, outcome.version
        outcome.gate = await asyncio.to_thread(gate_label, store, self.cfg.adapter, version)
        adapters = await asyncio.to_thread(self._adapter_store)
        history = await asyncio.to_thread(adapters.history, self.cfg.adapter)
        if outcome.gate is not None or any(m.version == version and m.action in STABLE_MOVES for m in history):
            return outcome
        cfg = self._eval.model_copy(update={"endpoint": await self.endpoint()})
        try:
            target = str(ModelId(None, self.cfg.adapter, version))
            result = await gate_async(cfg, target, aliases=StoreAliases(adapters))
        except ParityNotPassed as exc:  # never measured (--no-parity), not compared, or failed: never promoted
            self.say(f"step {step}: not gated: {exc}")
            outcome.gate = "refused"
            return outcome
        except GateIncomplete as exc:
            self.say(f"step {step}: gate incomplete ({exc}); the next pass gates it again")
            outcome.complete = False
            return outcome
        outcome.gate = await asyncio.to_thread(gate_label, store, self.cfg.adapter, version)
        left = f"{self.cfg.adapter} stays on {result.against}" + (f" ({result.reason})" if result.reason else "")
        self.say(f"step {step}: gate {result.verdict} against {result.against}: {result.wins} wins, {result.losses} "
                 f"losses on {result.seeds} seeds (one-sided p {result.p_value:.3g}); "
                 + (f"promoted: {self.cfg.adapter} -> {version}" if result.promoted else left))
        return outcome

    async def _parity_ok(self, step: int, version: str) -> bool:
        """Served parity of the step's version, measured once (kept in the adapter store) before it is scored.

        A step whose parity failed is not scored; one not compared (no reference where it was measured:
        only that it changes the served output) is, and the watch says so: scoring reads the version
        served, whatever the store's gate on moves decides."""
        if not self.cfg.parity:
            return True
        from serving.adapters import parity_label
        from serving.config import load_config
        from serving.parity import Gateway, check_served

        cfg = load_config(self.cfg.serving_config)
        record = (await asyncio.to_thread(self._adapter_store().parity, self.cfg.adapter)).get(version)
        if record is None:
            gateway = Gateway(await self.endpoint(), None if self.cfg.api_key == "EMPTY" else self.cfg.api_key)
            _, record = await asyncio.to_thread(check_served, cfg, gateway, self.cfg.adapter, version,
                                                base=self.cfg.base)
            self.say(f"step {step}: parity {parity_label(record)} ({record.detail})")
        if record.ok is False:
            self.say(f"step {step}: version {version} is not served as trained ({record.detail}); not scored")
        elif record.ok is None:
            self.say(f"step {step}: version {version}'s parity was not compared with a reference ({record.detail}); "
                     "scored as served")
        return record.ok is not False

    async def _score(self, store, step: ExportStep, version: str, run: dict | None, action: Action) -> StepOutcome:
        from evaluation import evaluate_async
        from evaluation.served import served_run_name

        from serving.adapters import ModelId

        cfg = self._eval.model_copy(update={"endpoint": await self.endpoint(),
                                            "adapter": str(ModelId(None, self.cfg.adapter, version)),
                                            "run_name": served_run_name(self.cfg.source, step.step)})
        if run is not None:
            self.say(f"step {step.step}: resuming run {run['run_id']}")
        result = await evaluate_async(cfg, resume=run["run_id"] if run else None)
        if result.status != "complete":
            self.say(f"step {step.step}: run {result.run_id} incomplete ({result.summary.errors} episodes errored); "
                     "the next pass resumes it")
            return StepOutcome(step.step, action, version, result.run_id, complete=False)
        return await self._record(store, step, version, {"run_id": result.run_id}, action)

    async def _record(self, store, step: ExportStep, version: str, run: dict,
                      action: Action = Action.RECORD) -> StepOutcome:
        from evaluation.served import record_served_step
        from evaluation.summary import summarize

        row = await asyncio.to_thread(store.get_run, run["run_id"])
        s = summarize(await asyncio.to_thread(store.episode_rows, row["run_id"]), row["manifest"].get("samples", 1))
        await asyncio.to_thread(record_served_step, store, self.cfg.source, step.step, base=row["base"],
                                adapter=self.cfg.adapter, version=version, env_id=row["env_id"], run_id=row["run_id"],
                                served=s.solve_rate, trainer_pass_at_1=step.pass_at_1)
        trainer = "-" if step.pass_at_1 is None else f"{step.pass_at_1:.1%}"
        self.say(f"step {step.step}: served {s.solved}/{s.n} = {s.solve_rate:.1%} (trainer pass@1 {trainer}), "
                 f"version {version}, run {row['run_id']}")
        return StepOutcome(step.step, action, version, row["run_id"], s.solve_rate, s.n)


def watch(cfg: WatchConfig, job_status: Callable[[], str] | None = None, interval_s: float = 30.0,
          on_event: Callable[[str], object] | None = None) -> WatchSummary:
    """Synchronous shell over :meth:`Watcher.watch`."""
    return asyncio.run(Watcher(cfg, on_event).watch(job_status, interval_s))
