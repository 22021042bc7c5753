"""A run's requests before its episodes (the model list, the pinned version) honour its timeout."""

from __future__ import annotations

import socket
import time

import pytest

from evaluation import EvalConfig, evaluate
from evaluation.errors import EndpointUnavailable


@pytest.fixture
def silent_endpoint():
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_a_silent_endpoint_fails_the_run_within_its_timeout(silent_endpoint, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(EndpointUnavailable, match="cannot reach"):
        evaluate(EvalConfig(endpoint=silent_endpoint, timeout_s=0.5, db=str(tmp_path / "r.sqlite")))
    assert time.monotonic() - t0 < 5  # the run's timeout_s, not a fixed 30 s
