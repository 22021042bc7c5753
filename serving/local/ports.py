"""A free TCP port on the loopback interface: the one helper every local stack, test and benchmark uses.

The kernel picks the port (bind to port 0) and the socket is closed before the caller's server
binds it, so another process could take it in between: callers start their server right after.
It lives in ``serving`` (which imports neither agent nor evaluation) so product code, tests and
benchmarks can all share it, with the ``ray start`` port arguments built from it (:func:`free_ports`:
several distinct ones at once).
"""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now, on ``host`` (the loopback interface by default)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = HOST, avoid: tuple[int, ...] = ()) -> list[int]:
    """``n`` distinct free TCP ports on ``host``, none in ``avoid``. The sockets stay bound until all are
    picked: ports taken one at a time can repeat (the kernel may hand a just-released port out again),
    and a ``ray start`` given one port for two of its components refuses to start."""
    held: list[socket.socket] = []
    try:
        while len(held) < n:
            s = socket.socket()
            s.bind((host, 0))
            if s.getsockname()[1] in avoid:
                s.close()
                continue
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def ray_node_port_args(*taken: int, host: str = HOST) -> list[str]:
    """``ray start`` arguments giving a node's agents their own free ports, distinct from each other and
    from ``taken`` (the node's other ports: GCS, dashboard, metrics). Ray's defaults are fixed (the
    dashboard agent listens on 52365), so a second Ray node on the same machine (a training head beside
    the gateway's, a test cluster's nodes) would find them taken and run without a job agent: every
    job submission then fails with "No available agent to submit job"."""
    node, objects, agent, agent_grpc, runtime_env = free_ports(5, host, avoid=taken)
    return [f"--node-manager-port={node}", f"--object-manager-port={objects}",
            f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}"]
