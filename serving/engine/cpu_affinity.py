"""Which cores the embedded stack's processes run on (``ServingConfig.cpu_affinity``).

A CPU engine's forward passes run in vLLM's worker process, whose OpenMP threads vLLM binds to a set
of cores; its automatic binding leaves the last core for "the rest" but moves nothing there. The
engine core, the Serve replica that holds it, Serve's controller and Ray's daemons all float over
every core, the worker's included, and Ray starts the replica (and so the engine) at niceness 15:
any of those processes that wakes on the worker's core takes it from a forward pass, and the
engine's two busy-waiting processes (worker and engine core) then wait on each other longer. With
'split' the worker keeps its cores and every other process of the stack's Ray session moves to the
remaining ones. It is an engine setting like any other: plain vLLM gets the same split with
``taskset``-style pinning, and benchmarks/paired_ab.py measures its effect on both sides
(docs/benchmarks.md).

Processes Ray starts later (a replica Serve restarts) inherit the placement from the raylet that
forks them; such a replica starts its engine on every core and moves back once it is up
(:func:`engine_start`), and the worker's own binding comes from ``VLLM_CPU_OMP_THREADS_BIND``, set
explicitly so that a worker started from a moved process still finds its cores.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from serving.config import ServingConfig

__all__ = ["BIND_ENV", "CoreSplit", "bound_cores", "engine_start", "pin_session", "plan_core_split", "split_cores"]

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
CPU_SYS = Path("/sys/devices/system/cpu")
# vLLM names its worker processes "VLLM::Worker" (one per rank: "VLLM::Worker_TP0", ...).
WORKER_TITLE = "VLLM::Worker"


@dataclass(frozen=True)
class CoreSplit:
    """The engine worker's cores and everyone else's."""

    worker: tuple[int, ...]
    rest: tuple[int, ...]

    def bind_env(self) -> dict[str, str]:
        """The engine variable that binds the worker's threads to ``worker``."""
        return {BIND_ENV: ",".join(map(str, self.worker))}

    def describe(self, moved: int) -> str:
        return (f"engine worker on cores {_ranges(self.worker)}; Ray, Serve and the front end "
                f"({moved} processes) on {_ranges(self.rest)}")


def _parse_list(text: str) -> set[int]:
    """A kernel CPU list ('0-3,8,10-11') as a set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _ranges(cpus: Iterable[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def _siblings(cpu: int) -> frozenset[int]:
    """The logical CPUs sharing ``cpu``'s physical core (itself alone where sysfs does not say)."""
    try:
        return frozenset(_parse_list((CPU_SYS / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()))
    except (OSError, ValueError):
        return frozenset({cpu})


def _numa_node(cpu: int) -> int:
    nodes = sorted((CPU_SYS / f"cpu{cpu}").glob("node[0-9]*"))
    return int(nodes[0].name[4:]) if nodes else 0


def split_cores(allowed: Iterable[int] | None = None) -> CoreSplit | None:
    """The worker's cores as vLLM's automatic binding picks them on x86 (one logical CPU per physical
    core of the first NUMA node, all but the last core) and the rest of ``allowed`` (default: this
    process's CPUs); None on fewer than two physical cores, where there is nothing to split."""
    cpus = sorted(set(allowed) if allowed is not None else os.sched_getaffinity(0))
    if not cpus:
        return None
    node = _numa_node(cpus[0])
    cores: set[frozenset[int]] = {(_siblings(c) & set(cpus)) or frozenset({c}) for c in cpus if _numa_node(c) == node}
    physical = sorted(cores, key=min)
    if len(physical) < 2:
        return None
    worker = tuple(min(core) for core in physical[:-1])
    return CoreSplit(worker=worker, rest=tuple(c for c in cpus if c not in worker))


def plan_core_split(cfg: ServingConfig) -> tuple[ServingConfig, CoreSplit | None]:
    """``cfg`` with the worker's binding in its engine ``env`` (unless the config binds it itself) and
    the split to apply once the engine is up; ``cfg`` and None unless its ``cpu_affinity`` is 'split'
    and this machine has cores to split."""
    if cfg.cpu_affinity != "split":
        return cfg, None
    if BIND_ENV in cfg.env:  # the config binds the worker itself: the rest is everything else
        worker, allowed = bound_cores(cfg.env[BIND_ENV]), os.sched_getaffinity(0)
        rest = tuple(sorted(allowed - worker))
        return cfg, CoreSplit(tuple(sorted(worker)), rest) if worker and rest else None
    split = split_cores()
    if split is None:
        return cfg, None
    return cfg.model_copy(update={"env": {**cfg.env, **split.bind_env()}}), split


def bound_cores(bind: str) -> set[int]:
    """The cores a ``VLLM_CPU_OMP_THREADS_BIND`` value binds one worker to (none for 'auto', 'nobind'
    or several ranks' lists)."""
    try:
        return _parse_list(bind) if bind and "|" not in bind else set()
    except ValueError:
        return set()


@contextmanager
def engine_start() -> Iterator[None]:
    """Around an engine's start in a replica. A replica Ray starts after ``up`` moved the session
    (Serve replacing a failed one) inherits the rest's cores only, and its engine's processes would
    import and load on those alone: for the start it gets the worker's cores too, then it and the
    engine core go back (the worker binds itself). A no-op where nothing was moved."""
    worker, mine = bound_cores(os.environ.get(BIND_ENV, "")), os.sched_getaffinity(0)
    if not worker or worker & mine:
        yield
        return
    _set_threads(os.getpid(), mine | worker)
    try:
        yield
    finally:
        import psutil

        pids = [os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))]
        pin_session(pids, CoreSplit(tuple(sorted(worker)), tuple(sorted(mine))))


def _is_worker(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(WORKER_TITLE.encode())
    except OSError:
        return False


def pin_session(pids: Iterable[int], split: CoreSplit) -> int:
    """Move every thread of ``pids`` except the engine workers' to ``split.rest``; the number of
    processes moved (ones that exit meanwhile are skipped)."""
    moved = 0
    for pid in pids:
        if not _is_worker(pid) and _set_threads(pid, set(split.rest)):
            moved += 1
    return moved


def _set_threads(pid: int, cpus: set[int]) -> bool:
    """Every thread of ``pid`` on ``cpus``; False when the process is gone."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended
            continue
    return True
