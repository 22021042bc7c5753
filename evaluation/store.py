"""Results store: runs, episodes, training-curve points and gate decisions in any SQLAlchemy database.

SQLite (one file) is the default; PostgreSQL works through ``postgresql+psycopg://...``. Every
episode is committed on its own as it finishes, and ``(run_id, seed, sample)`` is unique, so a run
killed at any moment (``kill -9`` included) loses at most the episodes in flight and can never
count one twice. :func:`is_unavailable` tells a database that does not answer (worth waiting for:
``evaluation.evaluate`` does) from a statement it rejected.
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from agent.runner import EpisodeRecord, StopReason, is_scored
from evaluation.manifest import RunManifest

DEFAULT_DB_PATH = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "maze-gateway" / "results.db"

# The stop reasons of episodes that count (agent.runner.records.is_scored), for queries: an episode with
# any other is not done (a resume plays it again) and is replaced when it is.
SCORED_STOP_REASONS = [r.value for r in StopReason if is_scored(r)]

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("status", String(16), nullable=False),  # running | complete | failed
    Column("base", String(256), nullable=False),
    Column("adapter", String(256), nullable=True),
    Column("env_id", String(64), nullable=False),
    Column("protocol", String(32), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("manifest", JSON, nullable=False),
)

episodes = Table(
    "episodes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False, index=True),
    Column("seed", Integer, nullable=False),
    Column("sample", Integer, nullable=False),
    Column("success", Boolean, nullable=False),
    Column("stop_reason", String(16), nullable=False),
    Column("turns", Integer, nullable=False),
    Column("reward", Float, nullable=False),
    Column("optimal_moves", Integer, nullable=True),
    Column("path_efficiency", Float, nullable=True),
    Column("invalid_actions", Integer, nullable=False),
    Column("wall_bumps", Integer, nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=True),  # added later: see _add_completion_tokens
    Column("latency_s", Float, nullable=False),
    Column("error", Text, nullable=True),
    Column("trajectory", Text, nullable=False),  # the EpisodeRecord as JSON
    UniqueConstraint("run_id", "seed", "sample", name="uq_episode"),
)

curve_points = Table(
    "curve_points",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("source", String(256), nullable=False),  # training run name / submission id
    Column("base", String(256), nullable=False),
    Column("env_id", String(64), nullable=False),
    Column("step", Integer, nullable=False),
    Column("metric", String(128), nullable=False),
    Column("value", Float, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("source", "step", "metric", name="uq_curve_point"),
)

# A training run's served curve: which adapter version each exported step was published as, and
# the evaluation run that scored it through a gateway. Written last, so a row means "done".
served_steps = Table(
    "served_steps",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("source", String(256), nullable=False),  # training run name / submission id
    Column("step", Integer, nullable=False),
    Column("base", String(256), nullable=False),
    Column("adapter", String(256), nullable=False),
    Column("version", String(64), nullable=False),
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("source", "step", name="uq_served_step"),
)

# The offline gate's decisions (evaluation.gate): which two runs a decision on a candidate version was
# made from, and its evidence, so `maze-eval compare` of those runs shows it. The adapter store's
# history holds the same record next to the alias it decided on.
gate_decisions = Table(
    "gate_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("adapter", String(256), nullable=False),
    Column("version", String(64), nullable=False),  # the candidate
    Column("against", String(64), nullable=False),  # the version the name served
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),  # candidate's
    Column("against_run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("verdict", String(16), nullable=False),  # better | worse | undecided
    Column("promoted", Boolean, nullable=False),
    Column("evidence", JSON, nullable=False),  # the GateResult as JSON
    Column("decided_at", DateTime(timezone=True), nullable=False),
)


def _now() -> datetime:
    return datetime.now(UTC)


def resolve_db_url(db: str | None) -> str:
    """A SQLAlchemy URL from ``--db`` (URL or file path), ``MAZE_DB``, or the default file."""
    db = db or os.environ.get("MAZE_DB")
    if not db:
        DEFAULT_DB_PATH.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{DEFAULT_DB_PATH}"
    if "://" in db:
        return db
    Path(db).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(db).expanduser().resolve()}"


# Stores opened at once in one process (two evaluations started together) set the schema up one at
# a time: on a new SQLite file their first connections would race for the WAL switch and the tables.
_SCHEMA_LOCK = threading.Lock()


def _create_tables(engine: Engine) -> None:
    """The tables, made where missing. Two processes opening a new database at once (a watcher and
    the evaluation it starts) can both find a table missing; the loser's CREATE fails with "already
    exists", and a second look finds it there. Each such failure means the other side made a table,
    so one more attempt than there are tables always ends it."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    attempts = len(metadata.tables) + 1
    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            return
        except (OperationalError, ProgrammingError) as exc:
            if "already exists" not in str(exc) or attempt == attempts - 1:
                raise


class Store:
    """Typed access to the results database."""

    def __init__(self, url: str | None = None):
        self.url = resolve_db_url(url)
        # pre_ping: a connection the database dropped (a restart) is replaced before use, not failed on.
        self.engine: Engine = create_engine(self.url, future=True, pool_pre_ping=True)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        with _SCHEMA_LOCK:
            _create_tables(self.engine)
            _add_completion_tokens(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # -- runs -----------------------------------------------------------------------------
    def create_run(self, manifest: RunManifest) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                runs.insert().values(
                    run_id=manifest.run_id, status="running", base=manifest.base, adapter=manifest.adapter,
                    env_id=manifest.env_id, protocol=manifest.protocol, started_at=_now(),
                    manifest=manifest.model_dump(mode="json"),
                )
            )

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).mappings().first()
        return dict(row) if row else None

    def list_runs(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(runs).order_by(runs.c.started_at)).mappings()]

    def set_status(self, run_id: str, status: str) -> None:
        finished = _now() if status != "running" else None
        with self.engine.begin() as conn:
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(status=status, finished_at=finished))

    # -- episodes -------------------------------------------------------------------------
    def add_episode(self, run_id: str, rec: EpisodeRecord) -> None:
        """Insert one episode in its own transaction (an errored row for the key is replaced)."""
        s = rec.summary()
        row = {
            "run_id": run_id, "seed": rec.seed, "sample": rec.sample, "success": rec.success, "stop_reason": s["stop_reason"],
            "turns": s["turns"], "reward": rec.reward, "optimal_moves": rec.optimal_moves, "path_efficiency": s["path_efficiency"],
            "invalid_actions": s["invalid_actions"], "wall_bumps": s["wall_bumps"], "tokens": s["total_tokens"],
            "completion_tokens": s["completion_tokens"],
            "latency_s": sum(t.latency_s for t in rec.turns), "error": rec.error, "trajectory": rec.model_dump_json(),
        }
        with self.engine.begin() as conn:
            key = (episodes.c.run_id == run_id) & (episodes.c.seed == rec.seed) & (episodes.c.sample == rec.sample)
            conn.execute(delete(episodes).where(key & episodes.c.stop_reason.not_in(SCORED_STOP_REASONS)))
            conn.execute(episodes.insert().values(**row))

    def episode_rows(self, run_id: str) -> list[dict[str, Any]]:
        """Flat metric rows (no trajectories), ordered by seed and sample."""
        cols = [c for c in episodes.c if c.name != "trajectory"]
        with self.engine.connect() as conn:
            q = select(*cols).where(episodes.c.run_id == run_id).order_by(episodes.c.seed, episodes.c.sample)
            return [dict(r) for r in conn.execute(q).mappings()]

    def episode_records(self, run_id: str) -> list[EpisodeRecord]:
        with self.engine.connect() as conn:
            q = select(episodes.c.trajectory).where(episodes.c.run_id == run_id).order_by(episodes.c.seed, episodes.c.sample)
            return [EpisodeRecord.model_validate_json(r[0]) for r in conn.execute(q)]

    def done_keys(self, run_id: str) -> set[tuple[int, int]]:
        """(seed, sample) keys with a final outcome; errored episodes are not done."""
        with self.engine.connect() as conn:
            q = select(episodes.c.seed, episodes.c.sample).where(
                (episodes.c.run_id == run_id) & episodes.c.stop_reason.in_(SCORED_STOP_REASONS)
            )
            return {(int(a), int(b)) for a, b in conn.execute(q)}

    # -- training curves ------------------------------------------------------------------
    def add_curve_point(self, source: str, base: str, env_id: str, step: int, metric: str, value: float) -> bool:
        """Record one point; returns False if (source, step, metric) was already there."""
        with self.engine.begin() as conn:
            exists = conn.execute(
                select(curve_points.c.id).where(
                    (curve_points.c.source == source) & (curve_points.c.step == step) & (curve_points.c.metric == metric)
                )
            ).first()
            if exists:
                return False
            conn.execute(curve_points.insert().values(source=source, base=base, env_id=env_id, step=step, metric=metric,
                                                      value=float(value), recorded_at=_now()))
        return True

    def curve(self, source: str | None = None) -> list[dict[str, Any]]:
        q = select(curve_points).order_by(curve_points.c.source, curve_points.c.step)
        if source:
            q = q.where(curve_points.c.source == source)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    # -- served curves --------------------------------------------------------------------
    def add_served_step(self, source: str, step: int, *, base: str, adapter: str, version: str, run_id: str) -> bool:
        """Link step ``step`` of ``source`` to the adapter version and run that scored it; returns
        False if the step was already linked."""
        with self.engine.begin() as conn:
            key = (served_steps.c.source == source) & (served_steps.c.step == step)
            if conn.execute(select(served_steps.c.id).where(key)).first():
                return False
            conn.execute(served_steps.insert().values(source=source, step=step, base=base, adapter=adapter,
                                                      version=version, run_id=run_id, recorded_at=_now()))
        return True

    def list_served_steps(self, source: str | None = None, step: int | None = None) -> list[dict[str, Any]]:
        """Served steps (of ``source``, at ``step``), by source then step."""
        q = select(served_steps).order_by(served_steps.c.source, served_steps.c.step)
        if source:
            q = q.where(served_steps.c.source == source)
        if step is not None:
            q = q.where(served_steps.c.step == step)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def extend_seeds(self, run_id: str, seeds: list[int]) -> None:
        """Grow run ``run_id``'s maze set to ``seeds`` (which must start with the seeds it has): a
        resume then plays the new ones. The offline gate grows its runs look by look, so each look's
        run is complete on the seeds played so far."""
        with self.engine.begin() as conn:
            manifest = conn.execute(select(runs.c.manifest).where(runs.c.run_id == run_id)).scalar_one_or_none()
            if manifest is None:
                raise KeyError(run_id)
            if list(seeds[: len(manifest["seeds"])]) != list(manifest["seeds"]):
                raise ValueError(f"run {run_id}: seeds {seeds} do not extend its seeds {manifest['seeds']}")
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(manifest={**manifest, "seeds": list(seeds)}))

    # -- gate decisions -------------------------------------------------------------------
    def add_gate_decision(self, *, adapter: str, version: str, against: str, run_id: str, against_run_id: str,
                          verdict: str, promoted: bool, evidence: dict[str, Any]) -> None:
        """Record an offline gate's decision on ``adapter@version`` made from two runs of this store."""
        with self.engine.begin() as conn:
            conn.execute(gate_decisions.insert().values(
                adapter=adapter, version=version, against=against, run_id=run_id, against_run_id=against_run_id,
                verdict=verdict, promoted=promoted, evidence=evidence, decided_at=_now()))

    def gate_decisions(self, *run_ids: str, adapter: str | None = None, version: str | None = None,
                       ) -> list[dict[str, Any]]:
        """Gate decisions made from any of ``run_ids`` (all without), on ``adapter`` and candidate
        ``version`` when given, oldest first."""
        q = select(gate_decisions).order_by(gate_decisions.c.id)
        if run_ids:
            q = q.where(gate_decisions.c.run_id.in_(run_ids) | gate_decisions.c.against_run_id.in_(run_ids))
        if adapter is not None:
            q = q.where(gate_decisions.c.adapter == adapter)
        if version is not None:
            q = q.where(gate_decisions.c.version == version)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def runs_named(self, run_name: str) -> list[dict[str, Any]]:
        """Runs whose manifest carries ``run_name``, oldest first."""
        return [r for r in self.list_runs() if r["manifest"].get("run_name") == run_name]


def is_unavailable(exc: BaseException) -> bool:
    """Whether a store call failed because the database did not answer (stopped, restarting,
    unreachable, its file gone or locked): a later attempt may succeed, unlike a rejected statement."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


def _add_completion_tokens(engine: Engine) -> None:
    """Give a database made before ``episodes.completion_tokens`` existed that column, filled from
    each episode's stored trajectory (once: later opens find the column and do nothing)."""
    if "completion_tokens" in {c["name"] for c in inspect(engine).get_columns("episodes")}:
        return
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE episodes ADD COLUMN completion_tokens INTEGER"))
            for row_id, trajectory in conn.execute(select(episodes.c.id, episodes.c.trajectory)).all():
                n = EpisodeRecord.model_validate_json(trajectory).completion_tokens
                conn.execute(update(episodes).where(episodes.c.id == row_id).values(completion_tokens=n))
    except DBAPIError:
        # Another process opening the same database added it first; anything else is a real failure.
        if "completion_tokens" not in {c["name"] for c in inspect(engine).get_columns("episodes")}:
            raise


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL keeps readers (leaderboard, reports) from blocking a running eval; FK for cascades.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
