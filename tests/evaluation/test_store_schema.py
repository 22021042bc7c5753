"""Opening the results database: stores made at once on one new file all come up (two evaluations
started together share one database, as the stack's evaluation test and `maze-train watch` do)."""

from __future__ import annotations

import sys
import threading

from sqlalchemy import inspect

from evaluation import Store
from tests.support.threads import run_together

THREADS, TRIALS = 8, 40


def _open_at_once(url: str, errors: list[BaseException]) -> None:
    start = threading.Barrier(THREADS)

    def open_one() -> None:
        start.wait()
        Store(url).close()

    errors.extend(run_together([open_one] * THREADS))


def test_stores_opened_at_once_on_a_new_database_all_open(tmp_path):
    # A tiny switch interval interleaves the threads inside SQLAlchemy's table checks and SQLite's
    # first connection (the WAL switch), where unserialised opens failed with "table ... already
    # exists" or "database is locked".
    errors: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(TRIALS):
            _open_at_once(str(tmp_path / f"eval-{trial}.sqlite"), errors)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    store = Store(str(tmp_path / "eval-0.sqlite"))
    assert {"runs", "episodes", "curve_points", "served_steps"} <= set(inspect(store.engine).get_table_names())
