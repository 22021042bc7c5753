"""Serving fixtures: a real local S3 server (moto_server on 127.0.0.1), the adapter store on it and in a
local folder, and adapter folders."""

from __future__ import annotations

import gc
import os
import time
import uuid

import pytest

from serving.local.embedded import RAY_ENV
from tests.support.adapter_store import S3Server

# Ray reads its auth mode when it is first imported: the stack's driver (serving.local.embedded._deploy)
# must connect with token auth, so set it before any test module imports ray (test_colocated does).
os.environ.update(RAY_ENV)


@pytest.fixture(scope="session")
def s3_server(monkeypatch_session, tmp_path_factory):
    server = S3Server(log=tmp_path_factory.mktemp("s3-server") / "requests.log")
    server.start()
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch_session.setenv(k, v)
    yield server
    server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A test that failed with the session's S3 server in use shows the server's last requests, with
    # their times: whether a request that timed out ever reached it, and when it was answered.
    outcome = yield
    report = outcome.get_result()
    server = getattr(item, "funcargs", {}).get("s3_server")
    if report.failed and isinstance(server, S3Server):
        report.sections.append(("S3 server's last requests", server.log_tail()))


@pytest.fixture(scope="session")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(params=["s3", "local"])
def store(request, tmp_path):
    """An empty adapter store, once in a bucket of its own on the session's S3 server and once in a
    local folder (``file://``): the store's tests run against both implementations of its door."""
    from serving.adapters import AdapterStore
    from serving.config import AdapterStoreSpec

    bucket = f"store-{uuid.uuid4().hex[:8]}"
    if request.param == "s3":
        spec = AdapterStoreSpec(prefix=f"s3://{bucket}/lora", endpoint_url=request.getfixturevalue("s3_server").url)
    else:
        spec = AdapterStoreSpec(prefix=f"file://{tmp_path / bucket}/lora")
    s = AdapterStore(spec)
    s.ensure_bucket()
    return s


# -- the real embedded gateway, started once per test run (benchmarks/support/stack.py) --------------
@pytest.fixture(scope="session")
def stack(tmp_path_factory, monkeypatch_session):
    """The embedded gateway stack (~100 s to start), auth on (flat and scoped keys), small request
    limits; stopped at the end."""
    from benchmarks.support.stack import dev_assets, stack_config
    from serving.local import embedded
    from tests.support.gateway_stack import KEY, KEY_ENV, Stack, write_tenant_keys

    home = tmp_path_factory.mktemp("maze-home")
    monkeypatch_session.setenv("MAZE_HOME", str(home))
    monkeypatch_session.setenv(KEY_ENV, f"other-key,{KEY}")
    assets = dev_assets()
    # The flat keys (each an admin, no limits) and the tenants' scoped keys (tests/support/gateway_stack.py).
    # Tower LoRA on: the served = trained tests serve a vision-tower adapter (its refusal with the
    # switch off is checked at publish and in an engine of its own, tests/serving/engine).
    cfg = stack_config(assets.base_dir, auth_env=KEY_ENV, keys_file=str(write_tenant_keys(home / "keys.yaml")),
                       vision_tower=True)
    # The live guard's test name pairs sessions 20 s after they start, not the default 10 min, so a
    # verdict comes within the test's episodes (tests/serving/stack/test_guard.py).
    cfg.adapters.guard.names["guarded"] = {"horizon_s": 20.0}
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
