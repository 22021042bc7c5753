"""An evaluation rides through a restart of the embedded gateway's only replica.

The colocated replica (ingress and engine in one Serve replica, listening on the gateway's port) is
SIGKILLed while ``maze-eval --adapter maze-grpo`` plays; Serve starts a new one, which loads the
model and the adapter again. Meanwhile the runner waits (agent.runner.outage: connection failures and 503s
are waited out, the gateway's /ready polled once for all episodes), so the run completes by itself:
16 episodes (the kill lands after 4 with 8 in flight and 4 not started: episodes cut off mid-turn and
episodes not begun, both waited out), none errored, every seed's outcome the single-node gateway's
(models/scores_gateway.json), the wait reported.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from evaluation import EvalConfig, Store, evaluate

from tests.support.gateway_stack import KEY, assert_cores_split

ROOT = Path(__file__).resolve().parents[3]
N = 16  # seeds 0..15
pytestmark = pytest.mark.slow


def replica_pid(cfg) -> int | None:
    """The pid of the stack's Serve replica (Ray titles it ``ray::ServeReplica:<app>:<deployment>``)."""
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith("ray::ServeReplica") and f":{cfg.name}:" in cmd:
            return p.info["pid"]
    return None


def ready(root: str) -> bool:
    try:
        return httpx.get(f"{root}/ready", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def test_eval_rides_through_a_replica_restart(stack, tmp_path):
    reference = next(r for r in json.loads((ROOT / "models" / "scores_gateway.json").read_text())
                     if r["model"] == "maze-grpo")["outcomes"]
    db = str(tmp_path / "eval.sqlite")
    started, finished = threading.Event(), []

    def on_episode(rec, n, total):
        finished.append(rec.seed)
        if n >= 4:
            started.set()

    pool = cf.ThreadPoolExecutor(1)
    future = pool.submit(evaluate, EvalConfig(endpoint=stack.base_url, api_key=KEY, adapter="maze-grpo",
                                              seeds=f"0-{N - 1}", concurrency=8, db=db), on_episode=on_episode)
    future.add_done_callback(lambda _: started.set())
    assert started.wait(600) and not future.done(), future.result()
    pid = replica_pid(stack.cfg)
    assert pid is not None, "no Serve replica process found"
    before = len(finished)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    result = future.result(timeout=900)
    pool.shutdown()
    took = time.monotonic() - killed_at
    rr = result.retries
    print(f"\nreplica {pid} killed after {before} episodes; run ended {took:.0f}s later: {result.summary.solved}/{N}, "
          f"waited {rr.waited_s}s in {rr.outages} outage(s), {rr.retried_requests} requests retried")
    assert result.status == "complete" and result.summary.n == N and result.summary.errors == 0
    rows = Store(db).episode_rows(result.run_id)
    assert sorted(r["seed"] for r in rows) == list(range(N))  # exactly N, none duplicated
    outcomes = {r["seed"]: bool(r["success"]) for r in rows}
    differ = sorted(s for s in range(N) if outcomes[s] != bool(reference[str(s)]))
    assert not differ, f"seeds whose outcome differs from the single-node gateway's: {differ}"
    assert rr.outages >= 1 and rr.waited_s > 5 and rr.errored == 0  # a real wait, reported
    assert replica_pid(stack.cfg) not in (None, pid) and ready(stack.root)
    # The new replica started its engine on every core and moved back (serving.engine.cpu_affinity.engine_start).
    assert_cores_split()
