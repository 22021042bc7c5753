"""Start and stop a real local Ray cluster on 127.0.0.1 for tests (``ray start --head``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from serving.local.ports import free_ports, ray_node_port_args


@contextmanager
def local_ray_cluster(num_cpus: int = 2, auth_token: str | None = None):
    """Yields the dashboard address (http://127.0.0.1:PORT) of a fresh head node; with ``auth_token``
    the cluster requires that Ray token."""
    ray = str(Path(sys.executable).parent / "ray")
    tmp = tempfile.mkdtemp(prefix="maze-ray-")
    dash, gcs = free_ports(2)
    # Loopback-only test clusters: no token auth (Ray 2.60 turns it on when ~/.ray/auth_token exists).
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           # Jobs run `python ...`: make that this venv's interpreter, as an activated venv would.
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if auth_token:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=auth_token)
    cmd = [ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--num-cpus={num_cpus}",
           f"--temp-dir={tmp}", "--disable-usage-stats", "--include-dashboard=true", "--block",
           # Its own agent ports: a gateway's or another test's Ray may be up on this machine too.
           *ray_node_port_args(dash, gcs)]
    # --block keeps the head in a process we own: stopping its process group stops this cluster
    # only (`ray stop` would also stop any other Ray on the machine, e.g. the gateway's).
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{address}/api/version", timeout=2).status_code in (200, 401):  # 401: token auth is on
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("local Ray cluster did not come up")
        yield address
    finally:
        # Most of the head's processes exit within half a second of SIGTERM; the GCS, the raylet and
        # `ray start` itself then linger ~10 s on a graceful shutdown a throwaway cluster does not need.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
