"""The processes of a local stack: loopback ports, sessions of processes, and stopping them.

The embedded stack (:mod:`serving.local.embedded`) and the local cluster
(:mod:`serving.local.cluster`) start moto and Ray each in a session of its own; these helpers
check ports as their servers bind them, find a session's processes and stop exactly those.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from serving.local.ports import HOST


def port_free(port: int, reuse: bool = True) -> bool:
    """Whether ``port`` can be bound as its server binds it: with ``reuse`` (SO_REUSEADDR: moto, Ray's
    GCS, Serve's proxy) or without (the direct-ingress replica), which connections a stopped server
    closed block for up to a minute (TIME_WAIT), as they block either way after a server without it."""
    with socket.socket() as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def listening(port: int) -> bool:
    """Whether a server accepts connections on ``port`` (as opposed to old connections lingering there)."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def http_status(url: str, timeout: float = 2.0) -> int:
    """The HTTP status of a GET of ``url``, 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def session_pids(sid: int) -> list[int]:
    """Pids of the session ``sid`` leads (we start moto and Ray with their own session; Ray's
    workers make their own process groups but stay in the session)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getsid(int(name)) == sid:
                    pids.append(int(name))
            except OSError:
                continue
    return pids


def reap(pids: list[int]) -> None:
    for pid in pids:  # our own children (moto, Ray started by this process) would linger as zombies
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


# Ray's worker processes (Serve's controller and proxy among them) do not exit on SIGTERM; the raylet
# and GCS do within seconds. Their state lives in memory and goes with the stack, so the SIGKILL that
# follows loses nothing; a longer grace only held `down` (and every test teardown) that long.
RAY_GRACE_S = 5.0


def stop_group(sid: int, grace_s: float = 20.0, kill_wait_s: float = 10.0) -> list[int]:
    """SIGTERM every process of the session ``sid``, SIGKILL what is left after ``grace_s``, and
    wait until none is left; returns the pids still alive after ``kill_wait_s`` more (normally none).

    A process that appears during the grace period (Ray starting a worker while its others exit)
    gets its SIGTERM too, or it alone would hold ``down`` for the whole grace period."""
    pids: list[int] = []
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        running = [p for p in session_pids(sid) if alive(p)]
        if not running:
            break
        for pid in running:
            if pid not in pids:
                pids.append(pid)
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
        reap(pids)
        time.sleep(0.2)
    deadline = time.monotonic() + kill_wait_s
    while True:
        left = [p for p in session_pids(sid) if alive(p)]
        if not left or time.monotonic() > deadline:
            reap(pids)  # exited children of this process (moto, `ray start`) leave no zombie behind
            return left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap(left)
        time.sleep(0.1)


def wait_for(fn: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Poll ``fn`` until true or ``timeout`` (a small helper for callers and tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(interval)
    return False


__all__ = ["RAY_GRACE_S", "alive", "http_status", "listening", "port_free", "reap", "session_pids", "stop_group",
           "wait_for"]
