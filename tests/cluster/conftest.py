"""Fixtures of the multi-node tests: a local Ray cluster (head + 2 worker nodes on 127.0.0.1, local
S3, shared folder) started once per module through :mod:`serving.cluster`, in a private MAZE_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from serving.embedded import RAY_ENV

# The deploying driver connects with the stack's token auth; Ray reads the mode when first imported.
os.environ.update(RAY_ENV)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def maze_home(tmp_path_factory):
    """A private MAZE_HOME for this module's cluster (its state, logs and shared folder)."""
    old = os.environ.get("MAZE_HOME")
    os.environ["MAZE_HOME"] = str(tmp_path_factory.mktemp("maze-home"))
    yield Path(os.environ["MAZE_HOME"])
    if old is None:
        os.environ.pop("MAZE_HOME", None)
    else:
        os.environ["MAZE_HOME"] = old


def start_cluster(app: bool):
    from benchmarks.stack import cluster_stack_config
    from serving import cluster

    if not (ROOT / "models" / "maze-tiny" / "model.safetensors").is_file():
        pytest.fail("models/maze-tiny is missing (it ships in the repo)")
    cfg = cluster_stack_config()
    state = cluster.up(cfg, workers=2, app=app, progress=lambda msg: print(f"... {msg}", flush=True))
    return cfg, state
