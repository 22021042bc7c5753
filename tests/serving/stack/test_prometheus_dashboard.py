"""A real Prometheus (Debian's ``prometheus`` package) scrapes the embedded gateway's metrics
endpoint (Ray's metrics agent: Serve's, vLLM's and the gateway's own metrics, ``ray_`` prefixed)
every second while it serves a base model, an adapter, a canary, errors and adapter loads; then
every query of every panel in ``k8s/grafana-dashboard.json`` must return data through
Prometheus's HTTP API."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import yaml

from serving.local import free_port
from tests.support.gateway_stack import image_messages  # the `stack` fixture lives in conftest.py

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DASHBOARD = Path(__file__).resolve().parents[3] / "k8s" / "grafana-dashboard.json"
CANARY = "prom-canary"
IDLE_ZERO = ("Running / waiting requests (vLLM",)  # the engine's queue: 0 when idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(PROMETHEUS).is_file(),
                       reason="the prometheus binary is not installed (scripts/install_system_deps.sh installs Debian's)"),
]


def panel_queries() -> list[tuple[str, str]]:
    """(panel title / refId, PromQL) of every target of every panel, query variables (the tenant a
    panel repeats for) set to their 'All' value, as Grafana sends them with All selected."""
    dash = json.loads(DASHBOARD.read_text())
    all_values = {v["name"]: v.get("allValue", ".*") for v in dash["templating"]["list"] if v["type"] == "query"}

    def expand(text: str) -> str:
        for name, value in all_values.items():
            text = text.replace(f"${name}", value)
        return text

    return [(expand(f"{p['title']} / {t['refId']}"), expand(t["expr"])) for p in dash["panels"] for t in p["targets"]]


class Prometheus:
    """A prometheus process of its own: temp config and storage, loopback port, 1 s scrapes."""

    def __init__(self, target: str, folder: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": "ray", "static_configs": [{"targets": [target]}]}]}
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = folder / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.3)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, expr: str) -> list[dict]:
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def targets_up(self) -> bool:
        return bool(self.query('up{job="ray"} == 1'))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def prometheus(stack, tmp_path_factory):
    from serving.local import embedded

    target = urlparse(embedded.status()["metrics_url"]).netloc
    prom = Prometheus(target, tmp_path_factory.mktemp("prometheus"))
    try:
        yield prom
    finally:
        prom.stop()


def chat(stack, model: str, *, session: str | None = None, images: int = 1) -> int:
    """One short request; its HTTP status (errors are traffic too)."""
    headers = {"X-Session-Id": session} if session else {}
    body = {"model": model, "messages": image_messages(images), "max_tokens": 2, "temperature": 0}
    return stack.http.post("/v1/chat/completions", json=body, headers=headers).status_code


def wave(stack, loads: list, wave_no: int) -> list[int]:
    """Base, adapter, canary (8 sessions), an error and a first load of a new adapter version."""
    name = f"prom-load-{wave_no}-{uuid.uuid4().hex[:4]}"
    stack.push(loads[wave_no % len(loads)], name)
    statuses = [chat(stack, stack.base) for _ in range(3)]
    statuses += [chat(stack, f"{stack.base}:maze-grpo") for _ in range(3)]
    statuses += [chat(stack, f"{stack.base}:{CANARY}", session=f"s{wave_no}-{i}") for i in range(8)]
    statuses += [chat(stack, f"{stack.base}:{name}")]  # a version no replica holds: an adapter load
    # one session, so every wave's error lands on the same version's series (a series born with
    # its only increment shows no rate)
    statuses += [chat(stack, f"{stack.base}:{CANARY}", session="errors",
                      images=stack.cfg.limits.max_images_per_request + 1)]
    return statuses


def test_every_dashboard_query_returns_data(stack, prometheus):
    t0 = time.monotonic()
    v1 = stack.push(stack.assets.extra[0], CANARY).version
    v2 = stack.push(stack.assets.extra[1], CANARY, force=True).version
    stack.store.promote(CANARY, v1)
    stack.store.canary(CANARY, v2, 50)
    time.sleep(stack.cfg.adapters.resolve_ttl_s + 0.3)
    assert prometheus_up(prometheus)
    queries = panel_queries()
    assert len(queries) >= 15

    def missing() -> list[str]:
        """Queries without a finite value, or (but for gauges that read 0 when idle) without a
        positive one: the traffic sent must show in every panel."""
        out = []
        for title, expr in queries:
            values = [float(r["value"][1]) for r in prometheus.query(expr)]
            finite = [v for v in values if math.isfinite(v)]
            if not finite or (not title.startswith(IDLE_ZERO) and max(finite) <= 0):
                out.append(f"{title}: {expr} -> {values or 'no series'}")
        return out

    # Waves of traffic until Prometheus shows it all: rates need a series seen growing across
    # scrapes, and Ray's metrics agent exports every few seconds.
    waves, deadline, left = 0, time.monotonic() + 180, ["not checked yet"]
    while left and time.monotonic() < deadline:
        statuses = wave(stack, stack.assets.extra[2:4], waves)
        assert statuses.count(400) == 1 and statuses.count(200) == len(statuses) - 1, statuses
        waves += 1
        time.sleep(5)
        left = missing() if waves >= 2 else left
    assert not left, "\n".join(left)
    per_version = {r["metric"]["version"]: float(r["value"][1]) for r in prometheus.query(
        f'sum by (version) (ray_maze_gateway_adapter_requests_total{{adapter="{CANARY}", status="200"}})')}
    assert set(per_version) == {v1, v2}, per_version
    print(f"\n{len(queries)} panel queries return data after {waves} waves; canary requests per version "
          f"{per_version}; {time.monotonic() - t0:.0f}s")


def prometheus_up(prom: Prometheus) -> bool:
    return wait(prom.targets_up, 30)


def wait(fn, timeout: float, interval: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if fn():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
