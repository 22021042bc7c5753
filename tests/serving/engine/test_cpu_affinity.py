"""serving.engine.cpu_affinity: the engine worker's cores are picked as vLLM's automatic binding picks them
(one logical CPU per physical core, the last core left free), and moving a process moves all of its
threads and skips the engine workers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from serving.config import ServingConfig
from serving.engine import cpu_affinity


def fake_sysfs(root: Path, siblings: dict[int, str], nodes: dict[int, int] | None = None) -> Path:
    for cpu, text in siblings.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(text + "\n")
        (root / f"cpu{cpu}" / f"node{(nodes or {}).get(cpu, 0)}").mkdir()
    return root


def test_two_cores_give_the_worker_the_first(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_affinity, "CPU_SYS", fake_sysfs(tmp_path, {0: "0", 1: "1"}))
    split = cpu_affinity.split_cores([0, 1])
    assert split == cpu_affinity.CoreSplit(worker=(0,), rest=(1,))
    assert split.bind_env() == {"VLLM_CPU_OMP_THREADS_BIND": "0"}


def test_one_logical_cpu_per_physical_core_and_the_first_numa_node(monkeypatch, tmp_path):
    # 2 NUMA nodes x 2 cores x 2 threads: cpus 0-3 on node 0 (siblings 0/2, 1/3), 4-7 on node 1.
    siblings = {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3", 4: "4,6", 5: "5,7", 6: "4,6", 7: "5,7"}
    nodes = {c: 0 if c < 4 else 1 for c in siblings}
    monkeypatch.setattr(cpu_affinity, "CPU_SYS", fake_sysfs(tmp_path, siblings, nodes))
    split = cpu_affinity.split_cores(range(8))
    assert split.worker == (0,) and split.rest == (1, 2, 3, 4, 5, 6, 7)
    assert split.describe(moved=3) == "engine worker on cores 0; Ray, Serve and the front end (3 processes) on 1,2,3,4,5,6,7"


def test_nothing_to_split_on_one_core(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_affinity, "CPU_SYS", fake_sysfs(tmp_path, {0: "0,1", 1: "0,1"}))
    assert cpu_affinity.split_cores([0, 1]) is None  # two hyperthreads of one core
    assert cpu_affinity.split_cores([1]) is None


def test_plan_binds_the_worker_unless_the_config_does(monkeypatch):
    monkeypatch.setattr(cpu_affinity, "split_cores", lambda: cpu_affinity.CoreSplit((0, 1, 2), (3,)))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    cfg = ServingConfig.shipped("embedded")
    planned, split = cpu_affinity.plan_core_split(cfg)
    assert planned.env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1,2" and split.rest == (3,)
    # The config's own binding is kept, and the rest is every other core.
    own = cfg.model_copy(update={"env": {**cfg.env, "VLLM_CPU_OMP_THREADS_BIND": "1"}})
    assert cpu_affinity.plan_core_split(own) == (own, cpu_affinity.CoreSplit((1,), (0, 2, 3)))
    auto = cfg.model_copy(update={"env": {**cfg.env, "VLLM_CPU_OMP_THREADS_BIND": "auto"}})
    assert cpu_affinity.plan_core_split(auto) == (auto, None)  # vLLM picks: nothing to move around it
    off = cfg.model_copy(update={"cpu_affinity": "none"})
    assert cpu_affinity.plan_core_split(off) == (off, None)


def test_split_needs_a_cpu_device():
    data = ServingConfig.shipped("production").model_dump(mode="json")
    data["cpu_affinity"] = "split"
    with pytest.raises(ValueError, match="cpu_affinity 'split' places a CPU engine's worker"):
        ServingConfig.model_validate(data)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move a process between")
def test_pin_moves_every_thread_and_skips_workers():
    code = "import threading,time\n[threading.Thread(target=time.sleep,args=(30,)).start() for _ in range(3)]\ntime.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    # A process titled as vLLM's worker (argv[0] is its title): left where it is.
    worker = subprocess.Popen(["bash", "-c", "exec -a VLLM::Worker sleep 30"])
    try:
        threading.Event().wait(1.0)  # the threads have started
        target = cpu_affinity.CoreSplit(worker=(0,), rest=(max(os.sched_getaffinity(0)),))
        assert cpu_affinity.pin_session([proc.pid, worker.pid], target) == 1
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(tids) == 4 and all(os.sched_getaffinity(t) == set(target.rest) for t in tids)
        assert os.sched_getaffinity(worker.pid) == os.sched_getaffinity(0)
    finally:
        for p in (proc, worker):
            p.kill()
            p.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_moved_replica_starts_its_engine_on_every_core_then_moves_back(monkeypatch):
    """As in a replica Serve started after `up` moved the session: this thread on the rest's cores,
    the worker bound elsewhere. The engine's processes start with every core; afterwards this
    process and its children are back on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    worker, rest = {cpus[0]}, set(cpus[1:])
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", str(cpus[0]))
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, rest)
    try:
        with cpu_affinity.engine_start():
            assert os.sched_getaffinity(0) == worker | rest
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        assert os.sched_getaffinity(0) == rest and os.sched_getaffinity(child.pid) == rest
        child.kill()
        child.wait()
        # Not moved (the first start, which `up` moves once ready): left alone.
        cpu_affinity._set_threads(os.getpid(), mine)
        with cpu_affinity.engine_start():
            pass
        assert os.sched_getaffinity(0) == mine
    finally:
        cpu_affinity._set_threads(os.getpid(), mine)  # every thread of this process, as before
