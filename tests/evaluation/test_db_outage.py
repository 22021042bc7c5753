"""The results database going away mid-``maze-eval``, on a real PostgreSQL server stopped and started
again on its port: a short outage is waited out (the progress line says so), a long one stops the run
with exit code 3 and a message saying how to resume, and ``--resume`` completes it. Either way every
seed is stored exactly once."""

from __future__ import annotations

import asyncio
import importlib
import re
import threading
import time
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy.exc import OperationalError

from agent import EndpointWaits, bfs_policy, run_episodes
from evaluation import EvalConfig, Store, evaluate
from evaluation.cli import main as cli
from evaluation.cli.run import WaitColumn
from evaluation.evaluate import EpisodeWriter
from tests.support.postgres import PostgresServer, pg_bindir

evaluate_module = importlib.import_module("evaluation.evaluate")  # the package's `evaluate` is the function
pytestmark = pytest.mark.skipif(pg_bindir() is None, reason="needs PostgreSQL server binaries (make setup-test)")


@pytest.fixture(scope="module")
def pg():
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.fixture
def db(pg):
    return pg.create_database("outage_" + uuid.uuid4().hex[:8])


def _keys(db: str, run_id: str) -> list[tuple[int, int]]:
    store = Store(db)
    try:
        return [(r["seed"], r["sample"]) for r in store.episode_rows(run_id)]
    finally:
        store.close()


def test_a_short_outage_is_waited_out_with_every_episode_stored_once(scripted, pg, db):
    db_waits, seen = EndpointWaits(), {}

    def outage_after_ten(rec, done, total):
        if done == 10 and "stopped" not in seen:
            pg.stop()
            seen["stopped"] = time.monotonic()
            # While it is down, what the progress line shows; then the server comes back on its port.
            threading.Timer(1.5, lambda: seen.setdefault("column", WaitColumn(db_waits, "the results database")
                                                         .render(None).plain)).start()
            threading.Timer(3.0, pg.start).start()

    cfg = EvalConfig(endpoint=scripted.url, db=db, adapter="slow", concurrency=4)
    result = evaluate(cfg, on_episode=outage_after_ten, db_waits=db_waits, db_wait_s=60)
    assert "stopped" in seen, "the outage never started"
    assert result.status == "complete" and result.summary.n == 64 and result.summary.errors == 0
    assert result.db_outages >= 1 and 2.0 <= result.db_waited_s < 30
    assert seen["column"].startswith("waiting for the results database (")
    keys = _keys(db, result.run_id)
    assert len(keys) == 64 and len(set(keys)) == 64


def _stop_when_stored(pg: PostgresServer, db: str, n: int, stopped: threading.Event) -> None:
    store = Store(db)
    try:
        while True:
            with store.engine.connect() as conn:
                count = conn.exec_driver_sql("SELECT count(*) FROM episodes").scalar()
            if count >= n:
                pg.stop()
                stopped.set()
                return
            time.sleep(0.05)
    finally:
        store.close()


def test_a_long_outage_stops_the_run_cleanly_and_resume_completes_it(scripted, pg, db, monkeypatch):
    monkeypatch.setattr(evaluate_module, "DB_WAIT_S", 2.0)
    stopped = threading.Event()
    args = ["--endpoint", scripted.url, "--adapter", "slow", "--concurrency", "4", "--db", db]
    Store(db).close()  # the tables, before the watcher counts rows
    watcher = threading.Thread(target=_stop_when_stored, args=(pg, db, 10, stopped), daemon=True)
    watcher.start()
    try:
        first = CliRunner().invoke(cli, args)
    finally:
        watcher.join(timeout=30)
        pg.start()
    assert stopped.is_set()
    assert first.exit_code == 3, first.output
    line = first.output.strip().splitlines()[-1]
    assert "the results database stopped answering (" in line
    # The time it reports is the time it waited: the 2 s budget, more on a loaded machine.
    waited = re.search(r"waited (\d+)s to store seed", line)
    assert waited and int(waited.group(1)) >= 2, line
    assert "Traceback" not in first.output
    run_id = line.split("continue with: maze-eval --resume ")[1].strip()
    stored = _keys(db, run_id)
    assert 10 <= len(stored) < 64 and len(set(stored)) == len(stored)

    again = CliRunner().invoke(cli, ["--resume", run_id, "--endpoint", scripted.url, "--db", db])
    assert again.exit_code == 0, again.output
    assert f"run {run_id} (complete)" in again.output
    keys = _keys(db, run_id)
    assert len(keys) == 64 and len(set(keys)) == 64 and set(stored) <= set(keys)


def test_a_write_whose_commit_landed_before_the_connection_dropped_is_not_stored_twice(scripted, db):
    run = evaluate(EvalConfig(endpoint=scripted.url, db=db, seeds="0"))
    rec = run_episodes(bfs_policy(), [5])[0]
    store = Store(db)
    calls = []

    def commit_then_lose_the_answer(run_id, record):
        calls.append(1)
        if len(calls) == 1:
            store.add_episode(run_id, record)
            raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))
        store.add_episode(run_id, record)  # the row is there: the unique key refuses a second one

    writer = EpisodeWriter(store, run.run_id, EndpointWaits(), budget_s=5)
    try:
        asyncio.run(writer.call(commit_then_lose_the_answer, run.run_id, rec, what="seed 5"))
    finally:
        store.close()
    assert len(calls) == 2
    assert sorted(_keys(db, run.run_id)) == [(0, 0), (5, 0)]
