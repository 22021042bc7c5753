"""Polling for a condition that a real service reaches on its own schedule (a replica's report,
Ray's metrics export, a run's rows in the store)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.5) -> T:
    """The first truthy value of ``predicate()``, polled every ``interval`` seconds; at ``timeout`` its
    last value (falsy), which the caller asserts with the context that explains a failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()
