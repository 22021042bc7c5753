"""The key gate and the management routes on the gateway's real FastAPI app (``create_app``), with
a real local S3 server (moto) behind the adapter routes. The engine routes are stand-ins here (the
app is not deployed on Ray): they answer with a fixed usage, so the gate's part is what is tested;
tests/serving/stack/test_tenants.py runs the same keys against the real stack."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import yaml
from starlette.responses import JSONResponse, StreamingResponse

from serving.auth import CALLER
from serving.cli.gateway_client import GatewayAdapters
from serving.config import ServingConfig
from serving.ingress import create_app
from tests.support.adapter_store import make_adapter

A, B, ADMIN, LIMITED = "sk-team-a-0123456789", "sk-team-b-0123456789", "sk-admin-0123456789ab", "sk-limited-0123456789"
KEYS = {"keys": [
    {"name": "team-a", "role": "inference", "models": ["maze-tiny", "maze-tiny:team-a-*"], "secrets": [A]},
    {"name": "team-b", "role": "publisher", "models": ["maze-tiny", "maze-tiny:team-b-*"], "secrets": [B]},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [ADMIN]},
    {"name": "limited", "role": "inference", "models": ["*"], "secrets": [LIMITED],
     "limits": {"requests": 3, "tokens": 120, "concurrent": 4}},
]}
USAGE = {"prompt_tokens": 30, "completion_tokens": 20, "total_tokens": 50}


def stand_in_routes(app) -> None:
    @app.post("/v1/chat/completions")
    async def chat():  # the gate is under test, not the engine
        return JSONResponse({"id": "x", "object": "chat.completion", "model": "maze-tiny",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                             "usage": USAGE})

    @app.post("/v1/completions")
    async def stream():
        CALLER.get().strip_usage = True  # what the ingress does when it asked for the stream's usage

        async def chunks():
            yield 'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
            yield 'data: {"choices":[{"index":0,"text":"b"}]}\n\n'
            yield f'data: {{"choices":[],"usage":{json.dumps(USAGE)}}}\n\ndata: [DONE]\n\n'
        return StreamingResponse(chunks(), media_type="text/event-stream")


@pytest.fixture
def gateway(s3_server, monkeypatch):
    monkeypatch.setenv("TEST_GATE_KEYS", yaml.safe_dump(KEYS))
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://gate-{uuid.uuid4().hex[:8]}/lora", "endpoint_url": s3_server.url}
    data["auth"] = {"keys_env": "TEST_GATE_KEYS"}
    data["limits"]["max_body_bytes"] = 4096
    data["extensions"] = []
    cfg = ServingConfig.model_validate(data)
    from serving.adapters import AdapterStore

    AdapterStore(cfg.adapters).ensure_bucket()
    app = create_app(cfg)
    stand_in_routes(app)
    transport = httpx.ASGITransport(app=app)

    def client(key: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers)

    return client


def sync_admin(client_factory, key):
    """GatewayAdapters (the CLI's client) over the ASGI app: a sync facade over the async client."""
    import asyncio

    class Bridge(httpx.BaseTransport):
        def handle_request(self, request):
            async def go():
                async with client_factory(None) as c:
                    resp = await c.send(request)
                    await resp.aread()
                    return httpx.Response(resp.status_code, headers=resp.headers, content=resp.content)
            return asyncio.run(go())

    http = httpx.Client(transport=Bridge(), base_url="http://gateway", headers={"Authorization": f"Bearer {key}"})
    return GatewayAdapters("http://gateway/v1", key, http=http)


def openai_error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "code"} and err["message"]
    return err


async def test_missing_and_unknown_keys_are_401(gateway):
    for key in (None, "sk-nobody-0123456789"):
        async with gateway(key) as c:
            err = openai_error(await c.post("/v1/chat/completions", json={}), 401)
            assert err["code"] == "invalid_api_key"
            openai_error(await c.get("/v1/usage"), 401)
            openai_error(await c.get("/v1/adapters"), 401)
    async with gateway(None) as c:
        assert (await c.get("/health")).status_code != 401  # probes stay open


def test_roles_on_the_adapter_routes(gateway, tmp_path):
    a, b, admin = (sync_admin(gateway, k) for k in (A, B, ADMIN))
    v1, v2 = (make_adapter(tmp_path / f"v{i}", seed=i) for i in (1, 2))
    from serving.errors import AdapterNotFound, Forbidden

    with pytest.raises(Forbidden, match="role is 'inference'"):
        a.push(v1, "team-a-agent")
    with pytest.raises(Forbidden, match="do not cover 'team-a-agent'"):
        b.push(v1, "team-a-agent")
    stable = b.push(v1, "team-b-agent")
    canary = b.push(v2, "team-b-agent", canary="25")
    assert canary.canary is not None and canary.canary.weight == 25 and canary.version == stable.version
    assert b.canary("team-b-agent", canary.canary.version, 50).canary.weight == 50
    assert b.promote("team-b-agent").version == canary.canary.version  # its own name
    admin.push(v1, "team-a-agent")
    with pytest.raises(Forbidden):
        b.promote("team-a-agent", stable.version)
    with pytest.raises(Forbidden):
        b.rollback("team-a-agent")
    with pytest.raises(Forbidden, match="may not remove"):
        b.remove("team-b-agent")  # deleting files is the admin's
    assert admin.rollback("team-b-agent").version == stable.version
    assert [r.name for r in a.list()] == ["team-a-agent"]  # each key lists what it may see
    assert [r.name for r in b.list()] == ["team-b-agent"]
    assert [r.name for r in admin.list()] == ["team-a-agent", "team-b-agent"]
    with pytest.raises(AdapterNotFound):
        a.history("team-b-agent")
    assert admin.remove("team-a-agent").name == "team-a-agent"


async def test_limits_headers_and_429(gateway):
    body = {"model": "maze-tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with gateway(LIMITED) as c:
        first = await c.post("/v1/chat/completions", json=body)
        assert first.status_code == 200
        h = first.headers
        assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("3", "2")
        assert (h["x-ratelimit-limit-tokens"], h["x-ratelimit-remaining-tokens"]) == ("120", "120")
        second = await c.post("/v1/chat/completions", json=body)
        assert second.headers["x-ratelimit-remaining-tokens"] == "70"  # the first one's 50 tokens
        third = await c.post("/v1/chat/completions", json=body)
        assert third.headers["x-ratelimit-remaining-requests"] == "0"
        refused = await c.post("/v1/chat/completions", json=body)
        err = openai_error(refused, 429)
        assert err == {"message": err["message"], "type": "requests", "code": "rate_limit_exceeded"}
        assert 55 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        assert refused.headers["x-ratelimit-remaining-tokens"] == "0"  # 150 used of 120


async def test_token_limit_refuses_with_type_tokens(gateway, monkeypatch):
    keys = json.loads(json.dumps(KEYS))
    keys["keys"][3]["limits"] = {"tokens": 100}
    monkeypatch.setenv("TEST_GATE_KEYS", yaml.safe_dump(keys))
    body = {"model": "maze-tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with gateway(LIMITED) as c:
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
        err = openai_error(await c.post("/v1/chat/completions", json=body), 429)
        assert err["type"] == "tokens" and "tokens per min: limit 100" in err["message"]


async def test_stream_usage_is_counted_and_taken_out(gateway):
    async with gateway(LIMITED) as c:
        resp = await c.post("/v1/completions", json={"model": "maze-tiny", "prompt": "x", "stream": True})
        assert resp.status_code == 200
        assert '"usage"' not in resp.text and resp.text.count("data: ") == 3  # two chunks and [DONE]
        nxt = await c.post("/v1/chat/completions", json={})
        assert nxt.headers["x-ratelimit-remaining-tokens"] == "70"  # the stream's 50 were charged


async def test_usage_route_per_key(gateway):
    for key in (A, A, B):
        async with gateway(key) as c:
            await c.post("/v1/chat/completions", json={})
    async with gateway(A) as c:
        await c.get("/v1/models/maze-tiny:team-b-x")  # no route here: counted as an error, model "-"
        own = (await c.get("/v1/usage", params={"since": "5m"})).json()
        assert {r["key"] for r in own["data"]} == {"team-a"}
        openai_error(await c.get("/v1/usage", params={"key": "team-b"}), 403)
        openai_error(await c.get("/v1/usage", params={"since": "yesterday"}), 400)
    async with gateway(ADMIN) as c:
        rows = (await c.get("/v1/usage", params={"since": "1h"})).json()["data"]
    by = {(r["key"], r["model"]): r for r in rows}
    a = by[("team-a", "-")]
    # two chats, the missing model card (404) and its three usage reads (200, 403, 400): all counted
    assert (a["requests"], a["errors"], a["prompt_tokens"], a["completion_tokens"]) == (6, 3, 60, 40)
    assert by[("team-b", "-")]["requests"] == 1


async def test_upload_size_limit_is_its_own(gateway, tmp_path):
    """Adapter uploads may exceed max_body_bytes (4 KiB here) up to max_upload_bytes; other routes may not."""
    async with gateway(ADMIN) as c:
        err = openai_error(await c.post("/v1/chat/completions", content=b"x" * 5000), 413)
        assert err["code"] == "request_too_large"
        resp = await c.post("/v1/adapters/big/versions", content=b"x" * 5000)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_adapter"  # not a tar: read whole


def test_placement_commands_refuse_the_gateway_path():
    from click.testing import CliRunner

    from serving.cli import main as serve_cli

    r = CliRunner().invoke(serve_cli, ["adapters", "--gateway", "http://127.0.0.1:9/v1", "where"])
    assert r.exit_code == 2 and "no gateway route" in r.output
