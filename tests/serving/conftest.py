"""Serving fixtures: a real local S3 server (moto_server on 127.0.0.1) and adapter folders."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from serving.embedded import RAY_ENV
from serving.ports import free_port

# Ray reads its auth mode when it is first imported: the stack's driver (serving.embedded._deploy)
# must connect with token auth, so set it before any test module imports ray (test_colocated does).
os.environ.update(RAY_ENV)


class S3Server:
    """moto_server in a subprocess, restartable on the same port (to test outages)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url, timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("moto_server did not start")

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture(scope="session")
def s3_server(monkeypatch_session):
    server = S3Server()
    server.start()
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch_session.setenv(k, v)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture
def store(s3_server):
    """An empty adapter store in a bucket of its own on the session's S3 server."""
    from serving.adapters import AdapterStore
    from serving.config import AdapterStoreSpec

    s = AdapterStore(AdapterStoreSpec(prefix=f"s3://store-{uuid.uuid4().hex[:8]}/lora", endpoint_url=s3_server.url))
    s.ensure_bucket()
    return s


def make_adapter(folder: Path, *, rank: int = 8, base: str = "maze-tiny", seed: int = 0, hidden: int = 32) -> Path:
    """A small, well-formed peft LoRA folder (config + safetensors weights)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for proj in ("q_proj", "v_proj"):
        stem = f"base_model.model.model.language_model.layers.0.self_attn.{proj}"
        tensors[f"{stem}.lora_A.weight"] = rng.standard_normal((rank, hidden)).astype(np.float32)
        tensors[f"{stem}.lora_B.weight"] = rng.standard_normal((hidden, rank)).astype(np.float32)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": rank, "lora_alpha": rank, "base_model_name_or_path": base,
           "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return folder


# -- the real embedded gateway, started once per test run (benchmarks/stack.py) --------------
@pytest.fixture(scope="session")
def stack(tmp_path_factory, monkeypatch_session):
    """The embedded gateway stack (~100 s to start), auth on (flat and scoped keys), small request
    limits; stopped at the end."""
    from benchmarks.stack import dev_assets, stack_config
    from serving import embedded
    from tests.serving.stack import KEY, KEY_ENV, Stack, write_tenant_keys

    home = tmp_path_factory.mktemp("maze-home")
    monkeypatch_session.setenv("MAZE_HOME", str(home))
    monkeypatch_session.setenv(KEY_ENV, f"other-key,{KEY}")
    assets = dev_assets()
    # The flat keys (each an admin, no limits) and the tenants' scoped keys (tests/serving/stack.py).
    cfg = stack_config(assets.base_dir, auth_env=KEY_ENV, keys_file=str(write_tenant_keys(home / "keys.yaml")))
    t0 = time.monotonic()
    base_url = embedded.up(cfg, adapters=assets.shipped)
    print(f"\nembedded stack ({cfg.layout} layout, {cfg.ingress} ingress) ready in {time.monotonic() - t0:.0f}s at {base_url}")
    running = Stack(cfg, assets, base_url)
    try:
        yield running
    finally:
        # The last stop of the run: no stack follows on these ports, so `down` need not wait out the
        # connections the killed servers leave in TIME_WAIT (up to a minute; the down/up test checks
        # that wait). Every process is still waited for.
        running.client.close()
        running.http.close()
        gc.collect()
        embedded.down(wait_ports=False)
