"""serving.local.s3_server: moto's app with its writes taken one at a time, so a conditional write is
atomic as on S3. A check-then-write app shows the race it closes."""

from __future__ import annotations

import threading
import time

from serving.local.s3_server import SerialWrites
from tests.support.threads import run_together

THREADS = 8


class CheckThenWrite:
    """A WSGI app that, like moto's PUT with If-Match, reads the value, lets ``between`` run, then
    writes what it read plus one (a GET only reads)."""

    def __init__(self, between=lambda: time.sleep(0.01)):
        self.value, self.between = 0, between

    def __call__(self, environ, start_response):
        seen = self.value
        self.between()
        if environ["REQUEST_METHOD"] != "GET":
            self.value = seen + 1
        start_response("200 OK", [("content-type", "text/plain")])
        return [str(seen).encode()]


def hammer(app, method: str, threads: int = THREADS) -> None:
    call = lambda: list(app({"REQUEST_METHOD": method}, lambda status, headers: None))  # noqa: E731
    raised = run_together([call] * threads)
    if raised:
        raise raised[0]


def test_writes_run_in_turn_and_lose_no_update():
    for method in ("PUT", "POST", "DELETE"):
        inner = CheckThenWrite()
        hammer(SerialWrites(inner), method)
        assert inner.value == THREADS, method


def test_the_bare_app_loses_updates_and_reads_stay_concurrent():
    # every request reads before any writes: the race SerialWrites exists for
    all_read = threading.Barrier(THREADS, timeout=10)
    bare = CheckThenWrite(between=all_read.wait)
    hammer(bare, "PUT")
    assert bare.value == 1
    # reads pass SerialWrites side by side: were they taken in turn, the barrier would break
    reads = CheckThenWrite(between=threading.Barrier(THREADS, timeout=10).wait)
    hammer(SerialWrites(reads), "GET")
    assert reads.value == 0
