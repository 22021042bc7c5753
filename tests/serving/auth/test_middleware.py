"""The key gate and the management routes on the gateway's real FastAPI app (``create_app``), with
a real local S3 server (moto) behind the adapter routes. The engine routes are stand-ins here (the
app is not deployed on Ray): they answer with a fixed usage, so the gate's part is what is tested;
tests/serving/stack/test_tenants.py runs the same keys against the real stack."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid

import httpx
import pytest
import yaml
from fastapi import Request
from starlette.responses import JSONResponse, StreamingResponse

from serving.auth import CALLER
from serving.cli.gateway_client import GatewayAdapters
from serving.config import ServingConfig
from serving.ingress import create_app
from tests.serving.auth.test_key_limits import count_calls
from tests.support.adapter_store import make_adapter
from tests.support.redis_server import RedisServer, available

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
    async def stream(request: Request):
        endless = request.headers.get("x-stand-in")  # a stream that goes on until the client leaves
        caller = CALLER.get()  # as the ingress sets them: "endless-plain" is a client that asked for usage
        caller.hide_chunk_usage, caller.hide_final_usage = True, endless != "endless-plain"
        if endless:
            return StreamingResponse(endless_chunks(usage_per_chunk=endless == "endless"),
                                     media_type="text/event-stream")

        async def chunks():
            yield 'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
            yield 'data: {"choices":[{"index":0,"text":"b"}]}\n\n'
            yield f'data: {{"choices":[],"usage":{json.dumps(USAGE)}}}\n\ndata: [DONE]\n\n'
        return StreamingResponse(chunks(), media_type="text/event-stream")

    app.state.release_episodes, app.state.episodes_playing = asyncio.Event(), 0

    @app.post("/v1/episodes")
    async def episode(request: Request):
        # As evaluation.api plays one: its model calls through the same app, in-process, with the
        # caller's key, while the episode's own request is in flight.
        auth = {"Authorization": request.headers["authorization"]}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=request.app), base_url="http://gateway.internal",
                                     headers=auth) as own:
            first = await own.post("/v1/chat/completions", json={})
            request.app.state.episodes_playing += 1
            await request.app.state.release_episodes.wait()
            last = await own.post("/v1/chat/completions", json={})
        return {"calls": [first.status_code, last.status_code]}


async def endless_chunks(usage_per_chunk: bool):
    """A completion stream that never ends; with ``usage_per_chunk``, vLLM's continuous usage stats."""
    for n in itertools.count(1):
        usage = (f',"usage":{{"prompt_tokens":30,"total_tokens":{30 + n},"completion_tokens":{n},'
                 f'"prompt_tokens_details":null}}') if usage_per_chunk else ""
        yield f'data: {{"id":"x","object":"text_completion","choices":[{{"index":0,"text":"t{n}"}}]{usage}}}\n\n'
        await asyncio.sleep(0.2)


@pytest.fixture
def gateway(s3_server, monkeypatch):
    return gateway_app(s3_server, monkeypatch)


def gateway_app(s3_server, monkeypatch, routes=stand_in_routes, **auth):
    """A client factory for the gateway's app (``.app``) with the stand-in engine routes (or what
    ``routes(app)`` adds); ``auth`` adds to its AuthSpec (the keys are KEYS, from TEST_GATE_KEYS)."""
    monkeypatch.setenv("TEST_GATE_KEYS", yaml.safe_dump(KEYS))
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://gate-{uuid.uuid4().hex[:8]}/lora", "endpoint_url": s3_server.url}
    data["auth"] = {"keys_env": "TEST_GATE_KEYS", **auth}
    data["limits"]["max_body_bytes"] = 4096
    data["extensions"] = []
    cfg = ServingConfig.model_validate(data)
    from serving.adapters import AdapterStore

    AdapterStore(cfg.adapters).ensure_bucket()
    app = create_app(cfg)
    routes(app)
    transport = httpx.ASGITransport(app=app)

    def client(key: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers)

    client.app = app
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


def set_limits(monkeypatch, limits: dict) -> None:
    """The limited key's limits (the key ring reads them on first use)."""
    keys = json.loads(json.dumps(KEYS))
    keys["keys"][3]["limits"] = limits
    monkeypatch.setenv("TEST_GATE_KEYS", yaml.safe_dump(keys))


async def wait_for(predicate, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(("limits", "message", "plain_call"), [
    ({"concurrent": 2, "requests": 50}, "Rate limit reached for key 'limited' on concurrent requests: limit 2. "
                                        "Please try again in 1s.", 429),  # the episodes hold both slots
    ({"episodes": 2, "concurrent": 8}, "Rate limit reached for key 'limited' on server-side episodes: limit 2. "
                                       "Please try again in 1s.", 200),
])
async def test_episodes_hold_a_slot_for_their_life_and_their_calls_run_within_it(gateway, monkeypatch, limits,
                                                                                message, plain_call):
    set_limits(monkeypatch, limits)
    state = gateway.app.state
    async with gateway(LIMITED) as c:
        playing = [asyncio.create_task(c.post("/v1/episodes", json={})) for _ in range(2)]
        await wait_for(lambda: state.episodes_playing == 2)  # both admitted and past their first call
        refused = await c.post("/v1/episodes", json={})
        assert openai_error(refused, 429) == {"message": message, "type": "requests", "code": "rate_limit_exceeded"}
        assert refused.headers["retry-after"] == "1"
        assert (await c.post("/v1/chat/completions", json={})).status_code == plain_call
        state.release_episodes.set()
        for done in playing:  # every call of the two ran in its episode's slot: none refused
            resp = await done
            assert resp.status_code == 200 and resp.json() == {"calls": [200, 200]}
        state.release_episodes = asyncio.Event()
        again = asyncio.create_task(c.post("/v1/episodes", json={}))  # the slots were given back
        await wait_for(lambda: state.episodes_playing == 3)
        state.release_episodes.set()
        assert (await again).status_code == 200


def stream_scope(key: str, stand_in: str, path: str = "/v1/completions") -> dict:
    headers = [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json"),
               (b"host", b"gateway"), (b"x-stand-in", stand_in.encode())]
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": headers, "client": ("127.0.0.1", 5000), "server": ("gateway", 80)}


async def cut_stream(app, stand_in: str, how: str, after: int, path: str = "/v1/completions",
                     request: dict | None = None) -> list[bytes]:
    """Read ``after`` chunks of an endless stream (``request`` to ``path``: a completion stream by
    default), then leave: the server cancels the request (as Ray Serve does when the client
    disconnects), the client's disconnect arrives (uvicorn), or the next chunk cannot be sent. The
    chunks the client got."""
    body = json.dumps(request or {"model": "maze-tiny", "prompt": "x", "stream": True}).encode()
    requested, gone, chunks = [False], asyncio.Event(), []

    async def receive():
        if not requested[0]:
            requested[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await (gone.wait() if how == "disconnect" else asyncio.Event().wait())  # no disconnect but this one
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body" and message.get("body"):
            if how == "send fails" and len(chunks) == after:
                raise OSError("the client's connection is gone")
            chunks.append(message["body"])
            if len(chunks) == after:
                gone.set()

    task = asyncio.create_task(app(stream_scope(LIMITED, stand_in, path), receive, send))
    await asyncio.wait([task, asyncio.create_task(gone.wait())], timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert gone.is_set(), (task, chunks)
    if how == "cancelled":
        task.cancel()
    try:
        await asyncio.wait_for(task, 10)
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - how the request ended is the parameter
        pass
    return chunks


@pytest.mark.parametrize("how", ["cancelled", "disconnect", "send fails"])
@pytest.mark.parametrize(("stand_in", "prompt"), [("endless", 30), ("endless-plain", 0)])
async def test_a_stream_cut_off_early_is_charged_what_it_used(gateway, how, stand_in, prompt):
    """With usage in every chunk (what the gateway asks for) the cut-off stream is charged its prompt
    and completion tokens so far; without (the client asked for usage at the end), a completion
    token per chunk that carried output."""
    chunks = await cut_stream(gateway.app, stand_in, how, after=3)
    assert len(chunks) == 3 and b'"usage"' not in b"".join(chunks)  # the gateway's own request stays hidden
    used = 4 if how == "send fails" else 3  # the chunk that could not be sent was made all the same
    async with gateway(ADMIN) as admin:
        (row,) = (await admin.get("/v1/usage", params={"key": "limited"})).json()["data"]
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, prompt, used)
    async with gateway(LIMITED) as c:
        nxt = await c.post("/v1/chat/completions", json={})
    assert nxt.headers["x-ratelimit-remaining-tokens"] == str(120 - prompt - used)


# -- the shared store down ------------------------------------------------------------------------------
@pytest.fixture
def redis_server(tmp_path, monkeypatch):
    if not available():
        pytest.skip("redis-server is not installed (scripts/install_system_deps.sh installs Debian's)")
    server = RedisServer(tmp_path).start()
    monkeypatch.setenv("TEST_GATE_REDIS", server.url)
    yield server
    server.stop()


def redis_gateway(s3_server, monkeypatch, on_error: str):
    # A stopped Redis refuses connections at once; the long call timeout only keeps a busy CI machine's
    # slow reconnect from reading as another outage (what these tests check is the outage, not the timeout).
    store = {"kind": "redis", "url_env": "TEST_GATE_REDIS", "on_error": on_error, "retry_after_error_s": 3,
             "timeout_s": 15, "prefix": f"g{uuid.uuid4().hex[:6]}:"}
    return gateway_app(s3_server, monkeypatch, store=store)


async def test_redis_down_usage_is_503_with_retry_after_and_nothing_calls_it(redis_server, s3_server, monkeypatch):
    opened, closed = (redis_gateway(s3_server, monkeypatch, e) for e in ("open", "closed"))
    async with opened(ADMIN) as admin, opened(LIMITED) as limited, closed(LIMITED) as fails_closed:
        assert (await limited.post("/v1/chat/completions", json={})).status_code == 200
        assert (await admin.get("/v1/usage")).status_code == 200
        redis_server.stop()
        down = await admin.get("/v1/usage")
        assert openai_error(down, 503) == {
            "message": "usage is kept in the rate-limit store, which cannot be reached; try again shortly",
            "type": "service_unavailable", "code": "limit_store_unavailable"}
        assert down.headers["retry-after"] == "3"
        calls = count_calls(opened.app.state.gate.limiter)
        for _ in range(2):  # on_error open: admitted under this replica's counters, usage kept here
            assert (await limited.post("/v1/chat/completions", json={})).status_code == 200
            again = await admin.get("/v1/usage")
            assert again.status_code == 503 and 1 <= int(again.headers["retry-after"]) <= 3
        assert calls == []  # known down: neither the limits, the usage writes nor the reads called Redis
        refused = await fails_closed.post("/v1/chat/completions", json={})
        assert openai_error(refused, 503) == {
            "message": "the rate-limit store cannot be reached; try again shortly", "type": "service_unavailable",
            "code": "limit_store_unavailable"}
        assert refused.headers["retry-after"] == "3"
        redis_server.start()
        await asyncio.sleep(opened.app.state.gate.limiter.down_for_s() + 0.05)
        back = await admin.get("/v1/usage", params={"key": "limited"})
    assert back.status_code == 200 and len(calls) == 2  # back by itself: this read, then its usage write
    (row,) = back.json()["data"]
    assert (row["requests"], row["prompt_tokens"]) == (2, 60)  # kept in this replica while down (Redis restarted empty)


async def test_a_key_file_edit_that_is_not_utf8_is_never_a_500(s3_server, monkeypatch, tmp_path):
    """The bad edit (key `team-b` removed, a byte that is not UTF-8 left in a comment) on the
    gateway's app: the last keys answer within auth.keys_grace_s, then 503 for every key of the
    file; never a 500, and the mended file answers again."""
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(KEYS))
    # a grace of 3 s: the two requests inside it are kept there by a stall of this process up to 3 s
    gateway = gateway_app(s3_server, monkeypatch, keys_env=None, keys_file=str(path), reload_s=0, keys_grace_s=3)
    without_b = {"keys": [k for k in KEYS["keys"] if k["name"] != "team-b"]}
    async with gateway(A) as a, gateway(B) as b:
        assert (await b.post("/v1/chat/completions", json={})).status_code == 200
        path.write_bytes(yaml.safe_dump(without_b).encode() + b"# rotated by ops \xff\n")
        assert (await b.post("/v1/chat/completions", json={})).status_code == 200  # the grace: last keys kept
        assert (await a.post("/v1/chat/completions", json={})).status_code == 200
        await asyncio.sleep(3.1)
        for client in (b, a, b):
            err = openai_error(await client.post("/v1/chat/completions", json={}), 503)
            assert err == {"message": "the gateway cannot read its API keys; requests are refused until its "
                                      "operators restore them", "type": "service_unavailable",
                           "code": "api_keys_unavailable"}
        path.write_text(yaml.safe_dump(without_b))
        assert (await a.post("/v1/chat/completions", json={})).status_code == 200
        assert openai_error(await b.post("/v1/chat/completions", json={}), 401)["code"] == "invalid_api_key"
