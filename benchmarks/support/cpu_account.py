"""Who used the CPU during a benchmark window: CPU seconds per process role, from psutil.

A snapshot maps every live process to a role (vLLM engine/worker, the Serve replicas, proxy,
Ray's own daemons, the benchmark itself) and its cumulative user+system CPU seconds; the
difference of two snapshots says where the CPU went between them. Processes that started or
ended inside the window count from zero or are missed; benchmarks keep the stack up throughout,
so that loss is small.
"""

from __future__ import annotations

import os
import re

import psutil

# First match wins; the pattern is searched in "name cmdline".
ROLES: list[tuple[str, str]] = [
    ("vllm_worker", r"VLLM::Worker"),
    ("vllm_engine_core", r"VLLM::EngineCore"),
    ("serve_colocated_replica", r"ServeReplica:[^ ]*ColocatedGateway"),
    ("serve_llm_replica", r"ServeReplica:[^ ]*(LLMServer|LLM)"),
    ("serve_ingress_replica", r"ServeReplica:[^ ]*Ingress"),
    ("serve_proxy", r"ProxyActor"),
    ("serve_controller", r"ServeController"),
    ("ray_telemetry_agent", r"TelemetryAgent"),
    ("ray_dashboard", r"[Dd]ashboard"),
    ("ray_daemons", r"raylet|gcs_server|log_monitor|ray start|monitor\.py"),
    ("s3_server", r"moto"),
    ("vllm_api_server", r"vllm.entrypoints|vllm serve"),
]


def _role(p: psutil.Process) -> str | None:
    try:
        text = p.name() + " " + " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if p.pid == os.getpid():
        return "benchmark_client"
    for role, pattern in ROLES:
        if re.search(pattern, text):
            return role
    return "other"


def snapshot() -> dict:
    """{pid: (role, cpu seconds)} plus the machine's busy CPU seconds."""
    procs = {}
    for p in psutil.process_iter():
        role = _role(p)
        if role is None:
            continue
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        procs[p.pid] = (role, t.user + t.system)
    sys_t = psutil.cpu_times()
    busy = sum(getattr(sys_t, k) for k in sys_t._fields if k not in ("idle", "iowait", "guest", "guest_nice"))
    return {"procs": procs, "busy_s": busy}


def diff(before: dict, after: dict, wall_s: float) -> dict:
    """CPU seconds per role between two snapshots, and the machine's utilisation."""
    roles: dict[str, float] = {}
    for pid, (role, cpu) in after["procs"].items():
        prev = before["procs"].get(pid)
        used = cpu - prev[1] if prev and prev[0] == role else cpu
        roles[role] = roles.get(role, 0.0) + max(used, 0.0)
    busy = after["busy_s"] - before["busy_s"]
    ncpu = psutil.cpu_count() or 1
    return {
        "cpu_s_by_role": {k: round(v, 2) for k, v in sorted(roles.items(), key=lambda kv: -kv[1]) if v >= 0.05},
        "machine_busy_cpu_s": round(busy, 2),
        "machine_utilisation": round(busy / (wall_s * ncpu), 3),
    }
