"""Samples the TCP connections of a set of process trees while a test runs, and names every one
whose address lies outside loopback: proof that a local stack keeps its traffic on 127.0.0.0/8.

Connections are judged by both ends, listening sockets by their bound address: a listener on a
specific address outside loopback (a node registered under the machine's network address) is a
violation; one on the wildcard (0.0.0.0 or ::, where Ray's gRPC servers bind every node's
listeners, with no setting to change it) carries no traffic by itself and is recorded apart, in
``wildcard_listeners``.
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable, Iterable

import psutil


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def tree_pids(roots: Iterable[int]) -> set[int]:
    """``roots`` and every live process below them."""
    out: set[int] = set()
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            out |= {pid, *(c.pid for c in proc.children(recursive=True))}
        except psutil.Error:
            continue
    return out


WILDCARDS = ("0.0.0.0", "::")


def outside_loopback(pids: set[int], wildcard: set[str] | None = None) -> list[str]:
    """The connections of ``pids`` (TCP, any state) with an address outside loopback, described;
    wildcard listeners go into ``wildcard`` (as ``process:port``) instead."""
    found = []
    for c in psutil.net_connections(kind="tcp"):
        if c.pid not in pids or not c.laddr:
            continue
        if c.status == psutil.CONN_LISTEN and c.laddr.ip in WILDCARDS:
            if wildcard is not None:
                # A process that exited since the listing has no name left: keep its pid instead.
                wildcard.add(f"{(_name(c.pid).split() or [f'pid {c.pid}'])[0]}:{c.laddr.port}")
            continue
        ends = [c.laddr] + ([c.raddr] if c.raddr else [])
        bad = [e for e in ends if not is_loopback(e.ip)]
        if bad:
            name = _name(c.pid)
            found.append(f"pid {c.pid} ({name}) {c.status} {c.laddr.ip}:{c.laddr.port}"
                         + (f" -> {c.raddr.ip}:{c.raddr.port}" if c.raddr else ""))
    return found


def _name(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline()[:3])[:120]
    except psutil.Error:
        return "?"


class LoopbackWatch:
    """Samples ``roots()``'s process trees (plus this process) every ``interval`` seconds until
    stopped; ``violations`` holds each offending connection once, ``samples`` counts the rounds and
    ``seen`` the connections looked at."""

    def __init__(self, roots: Callable[[], Iterable[int]], interval: float = 0.5) -> None:
        self.roots, self.interval = roots, interval
        self.violations: list[str] = []
        self.wildcard_listeners: set[str] = set()
        self.samples = 0
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="loopback-watch")

    def sample(self) -> None:
        pids = tree_pids([os.getpid(), *self.roots()])
        self.seen += sum(1 for c in psutil.net_connections(kind="tcp") if c.pid in pids)
        for v in outside_loopback(pids, self.wildcard_listeners):
            if v not in self.violations:
                self.violations.append(v)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except psutil.Error:
                continue

    def start(self) -> LoopbackWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
