"""A free TCP port on the loopback interface: the one helper every local stack, test and benchmark uses.

The kernel picks the port (bind to port 0) and the socket is closed before the caller's server
binds it, so another process could take it in between: callers start their server right after.
It lives in ``serving`` (which imports neither agent nor evaluation) so product code, tests and
benchmarks can all share it, with the ``ray start`` port arguments built from it.
"""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now, on ``host`` (the loopback interface by default)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ray_node_port_args(host: str = HOST) -> list[str]:
    """``ray start`` arguments giving a node's agents their own free ports. Ray's defaults are fixed
    (the dashboard agent listens on 52365), so a second Ray node on the same machine (a training
    head beside the gateway's, a test cluster's nodes) would find them taken and run without a job
    agent: every job submission then fails with "No available agent to submit job"."""
    return [f"--node-manager-port={free_port(host)}", f"--object-manager-port={free_port(host)}",
            f"--dashboard-agent-listen-port={free_port(host)}", f"--dashboard-agent-grpc-port={free_port(host)}",
            f"--runtime-env-agent-port={free_port(host)}"]
