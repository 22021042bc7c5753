"""Fixtures of the multi-node tests: a local Ray cluster (head + 2 worker nodes on 127.0.0.1, local
S3, shared folder) started once per module through :mod:`serving.local.cluster`, in a private MAZE_HOME."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

import pytest

from serving.local.embedded import RAY_ENV

# The deploying driver connects with the stack's token auth; Ray reads the mode when first imported.
os.environ.update(RAY_ENV)

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def cluster_slot(tmp_path_factory):
    """Held while a module's cluster runs: one cluster at a time on this machine. Every local cluster
    puts its nodes on 127.0.0.2-4, and under xdist the serving and the training module may run on
    different workers (tests/conftest.py). The lock file is shared by the run's workers."""
    with open(tmp_path_factory.getbasetemp().parent / "cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def maze_home(tmp_path_factory):
    """A private MAZE_HOME for this module's cluster (its state, logs and shared folder), with the
    machine's cluster slot."""
    old = os.environ.get("MAZE_HOME")
    with cluster_slot(tmp_path_factory):
        os.environ["MAZE_HOME"] = str(tmp_path_factory.mktemp("maze-home"))
        yield Path(os.environ["MAZE_HOME"])
        if old is None:
            os.environ.pop("MAZE_HOME", None)
        else:
            os.environ["MAZE_HOME"] = old


def start_cluster(app: bool):
    from benchmarks.support.stack import cluster_stack_config
    from serving.local import cluster

    if not (ROOT / "models" / "maze-tiny" / "model.safetensors").is_file():
        pytest.fail("models/maze-tiny is missing (it ships in the repo)")
    cfg = cluster_stack_config()
    state = cluster.up(cfg, workers=2, app=app, progress=lambda msg: print(f"... {msg}", flush=True))
    return cfg, state
