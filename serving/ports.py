"""A free TCP port on the loopback interface: the one helper every local stack, test and benchmark uses.

The kernel picks the port (bind to port 0) and the socket is closed before the caller's server
binds it, so another process could take it in between: callers start their server right after.
It lives in ``serving`` (which imports neither agent nor evaluation) so product code, tests and
benchmarks can all share it.
"""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now, on ``host`` (the loopback interface by default)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
