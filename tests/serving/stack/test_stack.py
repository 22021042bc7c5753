"""The embedded gateway stack for real (local S3 + Ray Serve LLM + vLLM CPU), driven by the official
``openai`` client. Started once per test run (~100 s), with auth on and small request limits.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from serving.local import embedded
from tests.support.gateway_stack import (  # the `stack` fixture lives in conftest.py
    KEY,
    assert_cores_split,
    image_messages,
    png_url,
)

pytestmark = pytest.mark.slow


def test_models_lists_bases_with_profile_and_shipped_adapters(stack):
    ids = {m.id for m in stack.client.models.list().data}
    assert stack.base in ids
    assert {f"{stack.base}:{name}" for name in stack.assets.shipped} <= ids
    body = stack.http.get("/v1/models").json()
    base_card = next(m for m in body["data"] if m["id"] == stack.base)
    assert base_card["agent_profile"] == stack.cfg.base_models[0].agent_profile.model_dump()
    assert body["has_more"] is False


def test_models_pagination(stack):
    for i, folder in enumerate(stack.assets.extra[:2]):
        stack.push(folder, f"page-{i}")
    first = stack.http.get("/v1/models", params={"limit": 1}).json()
    assert first["has_more"] is True
    adapters = [m["id"] for m in first["data"] if ":" in m["id"]]
    assert len(adapters) == 1
    rest = stack.http.get("/v1/models", params={"after": adapters[0], "limit": 1000}).json()
    assert rest["has_more"] is False and all(":" in m["id"] for m in rest["data"])
    assert adapters[0] not in {m["id"] for m in rest["data"]}


def test_chat_with_image_base_and_lora_differ(stack):
    name = next(iter(stack.assets.shipped))
    base = stack.first_logprobs(stack.base)
    lora = stack.first_logprobs(f"{stack.base}:{name}")
    assert base and lora and base != lora, "the LoRA must change the output"
    assert stack.first_logprobs(stack.base) == base  # deterministic at temperature 0


def test_streaming(stack):
    name = next(iter(stack.assets.shipped))
    stream = stack.client.chat.completions.create(model=f"{stack.base}:{name}", messages=image_messages(),
                                                  max_tokens=6, temperature=0, stream=True)
    chunks = [c for c in stream]
    assert len(chunks) >= 2  # streamed, not one response
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)
    assert all(c.model.startswith(f"{stack.base}:{name}@") for c in chunks)


@pytest.mark.engine_seam
def test_adapter_pushed_during_run_is_served(stack):
    name = "pushed-live"
    with pytest.raises(openai.NotFoundError):
        stack.first_logprobs(f"{stack.base}:{name}")
    stack.push(stack.assets.extra[2], name)
    assert stack.first_logprobs(f"{stack.base}:{name}")  # no restart, no wait: misses are not cached
    assert f"{stack.base}:{name}" in {m.id for m in stack.client.models.list().data}


def test_repushed_version_is_served_fresh(stack):
    name = "repushed"
    stack.push(stack.assets.extra[3], name)
    before = stack.first_logprobs(f"{stack.base}:{name}")
    with pytest.raises(Exception, match="exists"):
        stack.push(stack.assets.extra[4], name)  # refused without force
    ref = stack.push(stack.assets.extra[4], name, force=True)
    time.sleep(stack.cfg.adapters.resolve_ttl_s + 0.2)  # the gateway's short name -> version cache
    after = stack.first_logprobs(f"{stack.base}:{name}")
    assert after != before, "a re-pushed adapter must not be served stale"
    assert after == stack.first_logprobs(f"{stack.base}:{name}")
    resp = stack.client.chat.completions.create(model=f"{stack.base}:{name}", messages=image_messages(), max_tokens=1)
    assert resp.model.endswith(f"@{ref.version}")


@pytest.mark.parametrize(("model", "status", "code", "named"), [
    ("{base}:no-such-adapter", 404, "adapter_not_found", "no-such-adapter"),
    ("nobase:maze-grpo", 404, "model_not_found", "nobase"),
    ("{base}:bad name!", 400, "invalid_model_name", "bad name!"),
    ("{base}:x@123", 400, "invalid_model_name", "x@123"),
])
def test_model_errors_in_openai_shape(stack, model, status, code, named):
    model = model.format(base=stack.base)
    r = stack.http.post("/v1/chat/completions", json={"model": model, "messages": image_messages(), "max_tokens": 2})
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == code and named in err["message"] and err["type"]


def test_missing_adapter_is_404_for_the_openai_client(stack):
    with pytest.raises(openai.NotFoundError) as info:
        stack.first_logprobs(f"{stack.base}:never-pushed")
    assert "never-pushed" in info.value.message


@pytest.mark.engine_seam
def test_corrupt_adapter_clear_error_and_others_keep_serving(stack):
    store = stack.store
    good = stack.assets.extra[5]
    store.objects.put(store.versions.key("corrupt", "deadbeef0000", "adapter_model.safetensors"), b"\x00garbage" * 64)
    store.objects.put(store.versions.key("corrupt", "deadbeef0000", "adapter_config.json"),
                      (good / "adapter_config.json").read_bytes())
    ref = {"version": "deadbeef0000", "base": stack.base, "rank": 8, "pushed_at": "2026-01-01T00:00:00+00:00"}
    store.objects.put(store.refs.key("corrupt"), json.dumps(ref).encode())
    r = stack.http.post("/v1/chat/completions",
                        json={"model": f"{stack.base}:corrupt", "messages": image_messages(), "max_tokens": 2})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "adapter_load_failed" and "corrupt" in err["message"]
    name = next(iter(stack.assets.shipped))
    assert stack.first_logprobs(stack.base)
    assert stack.first_logprobs(f"{stack.base}:{name}")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + KEY}])
def test_auth_401_without_a_valid_key(stack, headers):
    r = httpx.post(stack.root + "/v1/chat/completions", headers=headers, timeout=30,
                   json={"model": stack.base, "messages": image_messages(), "max_tokens": 2})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(stack.root + "/v1/models", headers=headers).status_code == 401
    assert httpx.get(stack.root + "/v1/leaderboard", headers=headers).status_code == 401  # extensions too


def test_auth_with_the_openai_client(stack):
    bad = openai.OpenAI(base_url=stack.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert httpx.get(stack.root + "/health").status_code == 200  # probes are open
    assert httpx.get(stack.root + "/ready").json()["status"] == "ready"


def test_limits(stack):
    def post(messages, **extra):
        return stack.http.post("/v1/chat/completions", json={"model": stack.base, "messages": messages,
                                                              "max_tokens": 1, **extra})

    remote = post(image_messages(url="https://example.com/maze.png"))
    assert remote.status_code == 400 and "data: URL" in remote.json()["error"]["message"]
    assert post(image_messages(n_images=5)).status_code == 400
    big = png_url(side=400, noisy=True)  # ~480 KB PNG > 256 KiB limit
    r = post(image_messages(url=big))
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = post(image_messages(), padding="x" * (3 * 2**20))
    assert r.status_code == 413
    assert post(image_messages(n_images=2)).status_code == 200


def test_extension_router_is_mounted(stack):
    r = stack.http.get("/v1/leaderboard")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and isinstance(body["data"], list)


def test_metrics_exported(stack):
    url = embedded.status()["metrics_url"]
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:
        text = httpx.get(url, timeout=10).text
        if "maze_gateway_requests_total" in text and "maze_gateway_adapter_resolutions_total" in text:
            break
        time.sleep(2)
    assert "ray_maze_gateway_requests_total" in text
    assert "ray_maze_gateway_adapter_resolutions_total" in text
    assert "ray_serve_num_http_requests_total" in text


def test_s3_outage_gives_503_then_recovers(stack):
    name = "after-outage"
    embedded.stop_s3()
    try:
        r = stack.http.post("/v1/chat/completions",
                            json={"model": f"{stack.base}:{name}", "messages": image_messages(), "max_tokens": 2})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "adapter_store_unavailable"
        assert stack.first_logprobs(stack.base)  # the base model does not need S3
    finally:
        # The local S3 keeps its data in memory: bring it back with the shipped adapters and the new one.
        embedded.start_s3(stack.cfg, adapters={**stack.assets.shipped, name: stack.assets.extra[6]})
    assert stack.first_logprobs(f"{stack.base}:{name}")  # the 503 was not remembered as "missing"


def test_listeners_are_loopback_except_serve_replica_grpc(stack):
    """Everything binds 127.0.0.1, except the gRPC server each Serve replica opens on [::]:0 (Ray internals)."""
    import ipaddress
    import os

    import psutil

    state = embedded.read_state()
    exposed = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) not in (state.ray_pid, state.moto_pid):
                continue
            name, conns = proc.name(), proc.net_connections(kind="tcp")
        except (psutil.Error, OSError):
            continue
        for conn in conns:
            ip = ipaddress.ip_address(conn.laddr.ip.split("%")[0])
            if conn.status == psutil.CONN_LISTEN and not (getattr(ip, "ipv4_mapped", None) or ip).is_loopback:
                exposed.append((name, conn.laddr.ip, conn.laddr.port))
    assert all("ServeReplica" in name for name, _, _ in exposed), exposed


def test_port_is_served_by_the_configured_ingress(stack):
    """``ingress: direct``: the replica itself listens on the config's port; ``proxy``: Serve's proxy."""
    import os

    import psutil

    state = embedded.read_state()
    owners = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == state.ray_pid and any(
                    c.status == psutil.CONN_LISTEN and c.laddr.port == stack.cfg.port
                    for c in proc.net_connections(kind="tcp")):
                owners.append(proc.name())
        except (psutil.Error, OSError):
            continue
    expected = "ServeReplica" if stack.cfg.ingress == "direct" else "ProxyActor"
    assert len(owners) == 1 and expected in owners[0], owners


def test_concurrent_first_requests_for_one_adapter(stack):
    """Ray's resolve_lora races (check, then await the load): every concurrent first request must succeed."""
    import asyncio

    names = ["burst-0", "burst-1"]
    for name, folder in zip(names, stack.assets.extra[6:8]):
        stack.push(folder, name)

    async def burst():
        async with httpx.AsyncClient(base_url=stack.root, headers=stack.http.headers, timeout=120) as client:
            return await asyncio.gather(*(
                client.post("/v1/chat/completions", json={"model": f"{stack.base}:{names[i % 2]}",
                                                          "messages": image_messages(), "max_tokens": 2})
                for i in range(8)))

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 8, [r.text[:200] for r in responses if r.status_code != 200]


def test_engine_worker_has_its_cores_to_itself(stack):
    """cpu_affinity 'split' (the embedded config's): vLLM's worker on the worker cores, every thread of
    every other process of the stack's Ray session (daemons, Serve, replica, engine core) on the rest."""
    assert stack.cfg.cpu_affinity == "split"
    assert_cores_split()
