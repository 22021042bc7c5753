"""A multi-node Ray cluster on 127.0.0.1: the production layout across nodes on one machine.

``maze-serve cluster up --workers 2`` starts what a KubeRay RayService runs on several pods, as
separate processes of this machine (the way Ray's own multi-node tests do it):

1. the local S3 server (moto) with the shipped adapters, as the embedded stack has it;
2. a Ray head (``ray start --head --block``): GCS, the Serve controller, Serve's one HTTP proxy,
   the Jobs API, and the custom resource ``maze_head``;
3. worker nodes (``ray start --address=HEAD --block``, each in its own session, so one can be
   killed like a lost machine), worker ``i`` offering ``maze_worker_<i>`` (pin a job to it) and
   one ``maze_replica`` (an LLM replica takes one, so each worker holds at most one);
4. a shared folder every node sees (``$MAZE_SHARED``; it stands in for FSx ``/shared``);
5. unless ``app=False``, the gateway app from the config (default ``configs/cluster.yaml``:
   ``standard`` layout, 1..2 replicas), waiting for ``/ready``.

Every node has a loopback address of its own: the head ``127.0.0.2``, worker ``i``
``127.0.0.(2+i)``, as each pod has its own IP on KubeRay. Ray joins nodes only in its cluster mode,
which registers a node given ``127.0.0.1`` (or ``localhost``) under the machine's network address;
other loopback addresses it keeps as given, so no traffic between nodes leaves 127.0.0.0/8 and
nothing listens for it outside loopback. Serve runs a proxy on every node, as production does: all
of them bind the gateway's address (``127.0.0.1:PORT``) with ``SO_REUSEPORT`` (Serve's default),
and the kernel spreads connections over them the way a Kubernetes Service spreads them over pods;
a lost node's proxy closes its socket and drops out. S3 listens on 127.0.0.1. State (pids, ports,
logs) lives in ``$MAZE_HOME/cluster``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from serving.adapters import s3_env
from serving.config import ServingConfig
from serving.errors import ServingError
from serving.local import embedded
from serving.local.driver_output import caller_logging_kept, output_to
from serving.local.ports import HOST, free_port, free_ports, ray_node_port_args  # HOST: what clients connect to
from serving.local.processes import RAY_GRACE_S, alive, http_status, port_free, reap, session_pids, stop_group, wait_for

log = logging.getLogger(__name__)

HEAD_HOST = "127.0.0.2"
WORKER_CPUS = 2  # logical CPUs per worker: one LLM replica's placement group (replica + engine bundle)
HEAD_RESOURCE = "maze_head"
REPLICA_RESOURCE = "maze_replica"
# The embedded stack's token auth (drivers and `maze-train` read ~/.ray/auth_token). Worker nodes
# need Ray's cluster mode, which the embedded stack turns off to stay a laptop node. Drivers keep
# embedded.RAY_ENV (they connect from this machine either way).
NODE_ENV = {**embedded.RAY_ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0"}


class ClusterError(ServingError):
    """The local cluster cannot start, or a node command failed."""


def node_host(index: int) -> str:
    """Worker ``index``'s own loopback address (the head is :data:`HEAD_HOST`)."""
    if not 1 <= index <= 250:
        raise ClusterError(f"worker index {index} out of range 1..250")
    return f"127.0.0.{2 + index}"


class WorkerNode(BaseModel):
    """One worker node: the ``ray start`` process leading its session, and what it offers."""

    index: int
    host: str
    pid: int
    resources: dict[str, float]
    metrics_port: int


class ClusterState(BaseModel):
    """What ``up`` started (state.json in ``$MAZE_HOME/cluster``)."""

    name: str
    base_url: str | None
    s3_endpoint: str
    moto_pid: int
    head_pid: int
    ray_address: str
    dashboard_url: str
    temp_dir: str
    shared_dir: str
    head_metrics_port: int
    workers: list[WorkerNode]
    config: dict
    started_at: float


def state_dir() -> Path:
    return embedded.state_dir().with_name("cluster")


def _state_file() -> Path:
    return state_dir() / "state.json"


def read_state() -> ClusterState | None:
    try:
        return ClusterState.model_validate_json(_state_file().read_text())
    except (OSError, ValueError):
        return None


def _write_state(state: ClusterState) -> None:
    _state_file().write_text(state.model_dump_json(indent=2))


def worker_resources(index: int) -> dict[str, float]:
    """Worker ``index``'s custom resources: its own name (pin work to it) and one replica slot."""
    return {f"maze_worker_{index}": 1.0, REPLICA_RESOURCE: 1.0}


def _ray_env(cfg: ServingConfig, shared: Path) -> dict[str, str]:
    return {**embedded.RAY_SERVE_TUNING_ENV, **os.environ, **NODE_ENV, **s3_env(cfg),
            "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0", "MAZE_SHARED": str(shared),
            # Jobs run `python ...`: this interpreter, as an activated venv would.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _spawn(cmd: list[str], env: dict[str, str], log_name: str) -> int:
    with open(state_dir() / "logs" / log_name, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    return proc.pid


def _start_head(cfg: ServingConfig, shared: Path, head_cpus: int) -> tuple[int, str, str, str, int]:
    """The head node; returns (pid, GCS address, dashboard URL, temp dir, metrics port)."""
    gcs, dash, metrics = free_ports(3)
    temp_dir = tempfile.mkdtemp(prefix="maze-rc-", dir="/tmp")  # short: Ray's socket paths stay < 107 chars
    ray_exe = str(Path(sys.executable).with_name("ray"))
    embedded.ensure_auth_token(Path(ray_exe))
    cmd = [ray_exe, "start", "--head", "--block", f"--node-ip-address={HEAD_HOST}", f"--port={gcs}",
           f"--num-cpus={head_cpus}", f"--resources={json.dumps({HEAD_RESOURCE: 1})}",
           "--include-dashboard=true", f"--dashboard-host={HEAD_HOST}", f"--dashboard-port={dash}",
           "--disable-usage-stats", f"--temp-dir={temp_dir}", f"--metrics-export-port={metrics}",
           "--object-store-memory=100000000", *ray_node_port_args(gcs, dash, metrics)]
    pid = _spawn(cmd, _ray_env(cfg, shared), "head.log")
    return pid, f"{HEAD_HOST}:{gcs}", f"http://{HEAD_HOST}:{dash}", temp_dir, metrics


def start_worker(state: ClusterState, index: int, cfg: ServingConfig | None = None) -> WorkerNode:
    """Start (or restart, after a loss) worker ``index``, joining the head; returns it."""
    cfg = cfg or ServingConfig.model_validate(state.config)
    metrics = free_port()
    resources = worker_resources(index)
    ray_exe = str(Path(sys.executable).with_name("ray"))
    host = node_host(index)
    cmd = [ray_exe, "start", f"--address={state.ray_address}", "--block", f"--node-ip-address={host}",
           f"--num-cpus={WORKER_CPUS}", f"--resources={json.dumps(resources)}", "--disable-usage-stats",
           f"--metrics-export-port={metrics}", "--object-store-memory=100000000", *ray_node_port_args(metrics)]
    env = _ray_env(cfg, Path(state.shared_dir))
    # Each node would be its own machine: give each worker's engine its own core, where vLLM's CPU
    # backend would otherwise bind every node's engine to the same first core.
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", str((index - 1) % (os.cpu_count() or 1)))
    pid = _spawn(cmd, env, f"worker-{index}.log")
    return WorkerNode(index=index, host=host, pid=pid, resources=resources, metrics_port=metrics)


def _auth_headers() -> dict[str, str]:
    """Ray's token for the head's HTTP APIs (the same token auth as the embedded stack)."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def nodes(dashboard_url: str) -> list[dict]:
    """Alive nodes as the head reports them (Ray's State API): ``node_id``, ``resources_total``, ..."""
    import urllib.request

    req = urllib.request.Request(f"{dashboard_url}/api/v0/nodes?limit=100", headers=_auth_headers())
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return []
    rows = data.get("data", {}).get("result", {}).get("result", [])
    return [n for n in rows if n.get("state") == "ALIVE"]


def worker_of(dashboard_url: str, node_id: str) -> int | None:
    """The worker index of an alive node (from its ``maze_worker_<i>`` resource); None for the head."""
    for n in nodes(dashboard_url):
        if n.get("node_id") == node_id:
            return next((int(k.rsplit("_", 1)[1]) for k in n.get("resources_total", {})
                         if k.startswith("maze_worker_")), None)
    return None


def wait_nodes(state: ClusterState, count: int, timeout: float = 120.0) -> bool:
    """Wait until ``count`` nodes are alive (head included)."""
    return wait_for(lambda: len(nodes(state.dashboard_url)) >= count, timeout, interval=1.0)


def _with_descendants(pids: list[int]) -> list[int]:
    """``pids`` and every live process below them: Ray's job manager starts a job's driver in a
    session of its own, which a lost machine takes down all the same."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    ppid = int(fh.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(name))
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid not in out and alive(pid):
            out.append(pid)
            todo += parents.get(pid, [])
    return out


def kill_worker(index: int) -> list[int]:
    """SIGKILL every process of worker ``index`` at once (raylet, replicas, engines, job drivers):
    what a machine that loses power does. Returns the pids killed."""
    import signal

    state = _require_state()
    node = next((w for w in state.workers if w.index == index), None)
    if node is None:
        raise ClusterError(f"no worker {index}; workers: {[w.index for w in state.workers]}")
    pids = _with_descendants(session_pids(node.pid))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    def gone() -> bool:
        reap(pids)  # our own child (`ray start`) would stay a zombie
        return not any(alive(p) for p in pids)

    # Delivery is asynchronous: return once they are gone, so a restart can follow at once.
    wait_for(gone, 10, interval=0.05)
    return pids


def restart_worker(index: int) -> WorkerNode:
    """Start worker ``index`` again (a replacement machine joining under the same name), once the
    head has declared the lost node dead; returns once the new node runs."""
    state = _require_state()
    if not any(w.index == index for w in state.workers):
        raise ClusterError(f"no worker {index}; workers: {[w.index for w in state.workers]}")
    if alive(next(w for w in state.workers if w.index == index).pid):
        raise ClusterError(f"worker {index} is running; `maze-serve cluster kill {index}` first")
    # A raylet started while the head still lists the lost node (its health checks take ~15 s to
    # declare it dead) fails to register here: wait for the head to let go of it first.
    resource = f"maze_worker_{index}"
    wait_for(lambda: not any(resource in n.get("resources_total", {}) for n in nodes(state.dashboard_url)),
                      90, interval=0.5)
    return _start_and_join(state, index, ServingConfig.model_validate(state.config),
                           lambda msg: log.info("%s", msg))


def _require_state() -> ClusterState:
    state = read_state()
    if state is None:
        raise ClusterError(f"no local cluster running (state dir {state_dir()}); `maze-serve cluster up` first")
    return state


def _deploy(cfg: ServingConfig, state: ClusterState) -> None:
    with caller_logging_kept():
        os.environ.update(embedded.RAY_ENV)
        driver_log = state_dir() / "logs" / "deploy.log"
        with output_to(driver_log):
            import ray
            from ray import serve

            from serving.app import build_app

            ray.init(address=state.ray_address, log_to_driver=False, logging_level=logging.WARNING)
            try:
                # A proxy on every node, each binding the gateway's address with SO_REUSEPORT.
                serve.start(proxy_location="EveryNode", http_options={"host": cfg.host, "port": cfg.port})
                serve.run(build_app(cfg), name=cfg.name, route_prefix="/", blocking=False,
                          logging_config={"log_level": "WARNING", "enable_access_log": False})
            finally:
                ray.shutdown()  # Serve is detached: it outlives this driver


def _start_and_join(state: ClusterState, index: int, cfg: ServingConfig, progress: Callable[[str], None],
                    tries: int = 3) -> WorkerNode:
    """Start worker ``index`` and wait until its ``ray start`` reports the node running. A raylet
    must register with the GCS within 30 s (Ray's fixed limit), which a busy machine can miss:
    one that gave up is started again, up to ``tries`` times in all."""
    log_file = state_dir() / "logs" / f"worker-{index}.log"
    for attempt in range(tries):
        offset = log_file.stat().st_size if log_file.exists() else 0
        node = start_worker(state, index, cfg)
        state.workers = sorted([w for w in state.workers if w.index != index] + [node], key=lambda w: w.index)
        _write_state(state)

        def settled(pid: int = node.pid, offset: int = offset) -> bool:
            with open(log_file, "rb") as fh:
                fh.seek(offset)
                started = b"Ray runtime started" in fh.read()
            return started or not alive(pid)

        wait_for(settled, 150, interval=1.0)
        if alive(node.pid):
            return node
        stop_group(node.pid, grace_s=RAY_GRACE_S)
        progress(f"worker {index} did not join (attempt {attempt + 1}); starting it again")
    raise ClusterError(f"worker {index} did not join; see {log_file}")


def _join_workers(state: ClusterState, workers: int, cfg: ServingConfig, progress: Callable[[str], None]) -> None:
    """Start the workers one after the other, each once the previous one runs (two raylets
    registering at once on a busy machine miss Ray's start-up limit more often)."""
    for i in range(1, workers + 1):
        _start_and_join(state, i, cfg, progress)
    if not wait_nodes(state, workers + 1):
        raise ClusterError(f"worker nodes did not join; see {state_dir() / 'logs'}")


def up(cfg: ServingConfig | None = None, *, workers: int = 2, app: bool = True, head_cpus: int = 1,
       adapters: dict[str, Path] | None = None, ready_timeout: float = embedded.READY_TIMEOUT_S,
       progress: Callable[[str], None] | None = None) -> ClusterState:
    """Start S3, the head, ``workers`` worker nodes and (``app``) the gateway; returns the state.

    Raises:
        ClusterError: a cluster already running, a taken port, nodes or app not getting ready.
    """
    cfg = cfg or ServingConfig.shipped("cluster")
    progress = progress or (lambda msg: log.info("%s", msg))
    if read_state() is not None:
        raise ClusterError(f"a local cluster is already running (state in {state_dir()}); `maze-serve cluster down` first")
    if cfg.ingress == "direct":
        raise ClusterError("a cluster serves through Serve's proxy: use a config with ingress 'proxy'")
    if app:
        embedded.check_models(cfg)
        if not port_free(cfg.port):
            raise ClusterError(f"HTTP port {cfg.port} on {HOST} is taken; use a config with another port")
    (state_dir() / "logs").mkdir(parents=True, exist_ok=True)
    shared = state_dir() / "shared"
    shared.mkdir(exist_ok=True)
    progress(f"logs in {state_dir() / 'logs'}; shared folder {shared}")
    moto_pid = embedded.start_s3(cfg, adapters, log_dir=state_dir() / "logs")
    try:
        head_pid, address, dash, temp_dir, metrics = _start_head(cfg, shared, head_cpus)
    except BaseException:
        stop_group(moto_pid)
        raise
    state = ClusterState(name=cfg.name, base_url=f"http://{HOST}:{cfg.port}/v1" if app else None,
                         s3_endpoint=cfg.adapters.endpoint_url or "", moto_pid=moto_pid, head_pid=head_pid,
                         ray_address=address, dashboard_url=dash, temp_dir=temp_dir, shared_dir=str(shared),
                         head_metrics_port=metrics, workers=[], config=cfg.model_dump(mode="json"),
                         started_at=time.time())
    _write_state(state)
    try:
        if not wait_for(lambda: len(nodes(dash)) >= 1, 120, interval=1.0):
            raise ClusterError(f"the Ray head did not start; see {state_dir() / 'logs' / 'head.log'}")
        progress(f"head at {address}; starting {workers} worker node(s)")
        _join_workers(state, workers, cfg, progress)
        if app:
            progress("deploying the gateway app (standard layout)")
            _deploy(cfg, state)
            embedded.wait_ready(state.base_url, head_pid, ready_timeout, progress)
    except BaseException:
        down()
        raise
    return state


def down() -> bool:
    """Stop every node, then S3; False when no cluster was running."""
    state = read_state()
    if state is None:
        return False
    left = []
    for w in state.workers:
        left += stop_group(w.pid, grace_s=RAY_GRACE_S)
    left += stop_group(state.head_pid, grace_s=RAY_GRACE_S) + stop_group(state.moto_pid)
    _state_file().unlink(missing_ok=True)
    shutil.rmtree(state.temp_dir, ignore_errors=True)
    shutil.rmtree(state.shared_dir, ignore_errors=True)
    if left:
        raise ClusterError(f"cluster stopped incompletely: pids {left} still alive")
    return True


def status() -> dict:
    """Nodes (alive by the head's account), worker processes, and readiness of the gateway."""
    state = read_state()
    if state is None:
        return {"running": False, "state_dir": str(state_dir())}
    ready = None
    if state.base_url:
        ready = http_status(state.base_url.removesuffix("/v1") + "/ready") == 200
    return {**state.model_dump(exclude={"config"}), "running": alive(state.head_pid),
            "alive_nodes": len(nodes(state.dashboard_url)),
            "workers_alive": {w.index: alive(w.pid) for w in state.workers}, "ready": ready,
            "metrics_urls": metrics_urls(state)}


def metrics_urls(state: ClusterState) -> list[str]:
    """Every node's Prometheus endpoint (each node exports the metrics of its own processes)."""
    nodes_ = [(HEAD_HOST, state.head_metrics_port)] + [(w.host, w.metrics_port) for w in state.workers]
    return [f"http://{host}:{port}/metrics" for host, port in nodes_]


__all__ = ["ClusterError", "ClusterState", "WorkerNode", "down", "kill_worker", "metrics_urls", "node_host", "nodes", "read_state",
           "restart_worker", "start_worker", "status", "up", "wait_nodes", "worker_of", "worker_resources"]
