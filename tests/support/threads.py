"""Calls run side by side in threads, for the tests of what must hold under racing callers."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_together(calls: list[Callable[[], object]]) -> list[BaseException]:
    """Start one thread per call, wait for all of them, and return what they raised (a thread's
    exception would otherwise only be printed), in the order the calls were given."""
    raised: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            calls[i]()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            raised[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [exc for exc in raised if exc is not None]


__all__ = ["run_together"]
