"""No existence oracle, every error in OpenAI's shape: the gateway's real app (``create_app``, keys on)
with a real ingress (``ColocatedGateway`` over a stand-in engine, its routes bound as Ray binds them)
and a real local S3 server behind the adapter store, driven over ASGI.

What a key sees never depends on names outside its scope: ``/v1/models`` pages over what the key may
call (``has_more``, ``after``), an out-of-scope name answers as a missing one on every route, and the
management routes check the key before they validate the request. Bad input is a 4xx; a 5xx carries
only ``internal error; request id X``; no answer names the store's location; ``/ready`` gives its
details to admin keys only; an upload's extraction is bounded. The same over the real stack:
tests/serving/stack/test_no_oracle.py."""

from __future__ import annotations

import asyncio
import gzip
import io
import tarfile
import uuid

import httpx
import pytest
import yaml

from serving.adapters import AdapterStore
from serving.config import ServingConfig
from serving.errors import AdapterNotFound
from tests.serving.ingress.test_colocated import FakeServer
from tests.support.adapter_store import make_adapter
from tests.support.app_env import isolate_app

A, B, OPS = "sk-team-a-noo-000001", "sk-team-b-noo-000001", "sk-ops-noo-00000001"
KEYS = {"keys": [
    {"name": "team-a", "role": "inference", "models": ["maze-tiny", "maze-tiny:team-a-*"], "secrets": [A]},
    {"name": "team-b", "role": "publisher", "models": ["maze-tiny", "maze-tiny:team-b-*"], "secrets": [B]},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [OPS]},
]}
# An out-of-scope name sorts first and last; team-a may see the two team-a-* names only.
PUBLISHED = ("aaa-other", "team-a-x", "team-a-y", "team-b-z", "zzz-other")
SECRET = "SELECT password FROM users -- hunter2"
TEXT = [{"role": "user", "content": "hi"}]


@pytest.fixture
def env(s3_server, monkeypatch, tmp_path):
    """(config, store): keys on, a bucket of its own holding PUBLISHED, a 1 MiB upload limit."""
    isolate_app(monkeypatch)
    monkeypatch.setenv("TEST_NO_ORACLE_KEYS", yaml.safe_dump(KEYS))
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"s3://noo-{uuid.uuid4().hex[:8]}/lora", "endpoint_url": s3_server.url}
    data["auth"] = {"keys_env": "TEST_NO_ORACLE_KEYS"}
    data["limits"]["max_upload_bytes"] = 2**20
    data["extensions"] = []
    cfg = ServingConfig.model_validate(data)
    store = AdapterStore(cfg.adapters)
    store.ensure_bucket()
    folder = make_adapter(tmp_path / "adapter")
    for name in PUBLISHED:
        store.push(folder, name, base="maze-tiny")
    return cfg, store


async def serve(cfg: ServingConfig, *, healthy: bool = True):
    """The app with the ingress's engine and model routes bound to a ColocatedGateway (stand-in
    engine), plus routes that fail the ways a dependency can: (app, gateway)."""
    from ray.llm._internal.serve.core.configs.openai_api_models import OpenAIHTTPException, to_model_metadata
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs

    from serving.app import serving_args
    from serving.ingress import ENDPOINTS, ColocatedGateway, create_app

    class Gateway(ColocatedGateway):
        def __del__(self):  # Serve awaits the async __del__; a plain garbage collection would not
            pass

    (llm_config,) = LLMServingArgs.model_validate(serving_args(cfg)).llm_configs
    gw = Gateway.__new__(Gateway)
    await gw.__init__(llm_config, {"maze-tiny": to_model_metadata("maze-tiny", llm_config)},
                      lora_paths={"maze-tiny": cfg.adapters.prefix}, config=cfg.model_dump(mode="json"),
                      server_cls=FakeServer)
    gw.server.healthy = healthy
    app = create_app(cfg)
    for route in ("models", "model_data", "health", "ready", "chat", "completions"):
        ENDPOINTS[route](app)(getattr(gw, route))

    @app.get("/v1/boom")
    async def boom():
        raise RuntimeError(SECRET)

    @app.get("/v1/boom-engine")
    async def boom_engine():  # what Ray makes of an engine's 500: its message carries the exception
        raise OpenAIHTTPException(500, f"Message: Internal Server Error, original exception: {SECRET}",
                                  "InternalServerError")

    @app.get("/v1/boom-store")
    async def boom_store():
        raise AdapterNotFound("adapter 'x' has no version '0123456789ab' under s3://secret-bucket/lora")

    return app, gw


def call(cfg, requests, *, healthy: bool = True) -> list[httpx.Response]:
    """Each (key, method, path, kwargs) sent to a fresh app, in order, in one event loop."""
    async def go():
        app, _ = await serve(cfg, healthy=healthy)
        transport = httpx.ASGITransport(app=app)
        out = []
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            for key, method, path, kwargs in requests:
                headers = {**({"Authorization": f"Bearer {key}"} if key else {}), **kwargs.pop("headers", {})}
                out.append(await client.request(method, path, headers=headers, **kwargs))
        return out
    return asyncio.run(go())


def told(resp: httpx.Response) -> dict:
    """A listing less its cards' ``created`` (the time each test's gateway started)."""
    body = resp.json()
    return {**body, "data": [{k: v for k, v in card.items() if k != "created"} for card in body["data"]]}


def ids(resp: httpx.Response) -> list[str]:
    return [m["id"] for m in resp.json()["data"]]


# -- listing ---------------------------------------------------------------------------------------
def test_a_key_pages_through_exactly_what_it_may_see(env):
    cfg, _ = env
    first, second, whole, ops = call(cfg, [
        (A, "GET", "/v1/models", {"params": {"limit": 1}}),
        (A, "GET", "/v1/models", {"params": {"limit": 1, "after": "maze-tiny:team-a-x"}}),
        (A, "GET", "/v1/models", {}),
        (OPS, "GET", "/v1/models", {"params": {"limit": 1000}}),
    ])
    assert ids(first) == ["maze-tiny", "maze-tiny:team-a-x"] and first.json()["has_more"] is True
    # Out-of-scope names follow (team-b-z, zzz-other): has_more counts only what the key may see.
    assert ids(second) == ["maze-tiny:team-a-y"] and second.json()["has_more"] is False
    assert ids(whole) == ["maze-tiny", "maze-tiny:team-a-x", "maze-tiny:team-a-y"] and not whole.json()["has_more"]
    assert ids(ops) == ["maze-tiny", *(f"maze-tiny:{n}" for n in PUBLISHED)]


def test_after_a_name_the_key_cannot_see_is_after_a_name_that_does_not_exist(env, tmp_path):
    cfg, store = env
    # Each group: an existing out-of-scope name, then missing names that sort in the same place.
    groups = {"aaa-other": ("aaa-other0", "aab", "maze-tiny:aaa-other"), "team-b-z": ("team-b-zz", "team-c"),
              "zzz-other": ("zzzz",)}
    requests = [(A, "GET", "/v1/models", {"params": {"after": after, "limit": limit}})
                for first, rest in groups.items() for after in (first, *rest) for limit in (1, 5)]
    before = [told(r) for r in call(cfg, requests)]
    answers = iter(before)
    for first, rest in groups.items():
        seen = [(next(answers), next(answers)) for _ in (first, *rest)]
        assert all(pair == seen[0] for pair in seen), (first, seen)
    assert [m["id"] for m in before[0]["data"]] == ["maze-tiny:team-a-x"] and before[0]["has_more"] is True
    assert [m["id"] for m in before[1]["data"]] == ["maze-tiny:team-a-x", "maze-tiny:team-a-y"]
    assert before[1]["has_more"] is False
    assert before[8] == {"object": "list", "data": [], "has_more": False}  # after team-b-z nothing is team-a's
    # More names the key cannot see, before and among its own, change nothing it is told.
    for name in ("aaa-more", "team-a", "team-b-zy"):  # key order: team-a-x < team-a-y < team-a < team-b-*
        store.push(make_adapter(tmp_path / name, seed=7), name, base="maze-tiny")
    assert [told(r) for r in call(cfg, requests)] == before


# -- out of scope = missing ------------------------------------------------------------------------
def test_out_of_scope_and_missing_names_answer_alike(env):
    cfg, _ = env
    names = ("team-b-z", "team-b-nope")  # the first exists, the second does not; neither is team-a's
    requests = []
    for name in names:
        requests += [(A, "GET", f"/v1/models/maze-tiny:{name}", {}),
                     (A, "POST", "/v1/chat/completions", {"json": {"model": f"maze-tiny:{name}", "messages": TEXT}}),
                     (A, "GET", f"/v1/adapters/{name}/history", {}),
                     (A, "GET", f"/v1/adapters/{name}/parity", {}),
                     (A, "GET", f"/v1/adapters/{name}/verify", {})]
    got = call(cfg, requests)
    for name, answers in zip(names, (got[:5], got[5:])):
        model_404 = {"error": {"message": f"The model `maze-tiny:{name}` does not exist or you do not have access "
                                          "to it.", "type": "invalid_request_error", "code": "model_not_found"}}
        adapter_404 = {"error": {"message": f"adapter {name!r} not found", "type": "invalid_request_error",
                                 "code": "adapter_not_found"}}
        assert [r.status_code for r in answers] == [404] * 5
        assert [r.json() for r in answers] == [model_404, model_404, adapter_404, adapter_404, adapter_404]

    own_missing, unknown_base, store_text = call(cfg, [
        (A, "POST", "/v1/chat/completions", {"json": {"model": "maze-tiny:team-a-nope", "messages": TEXT}}),
        (OPS, "GET", "/v1/models/other-base:team-a-x", {}),
        (OPS, "GET", "/v1/adapters/ghost/parity", {}),
    ])
    assert own_missing.status_code == 404 and own_missing.json()["error"] == {
        "message": "The model `maze-tiny:team-a-nope` does not exist or you do not have access to it.",
        "type": "invalid_request_error", "code": "adapter_not_found"}
    # An unknown base is answered as a model out of scope: no list of the bases served.
    assert unknown_base.json()["error"]["code"] == "model_not_found" and "served" not in unknown_base.text
    # The store's own words for a missing name, less its location.
    assert store_text.json()["error"]["message"] == "adapter 'ghost' not found" and "s3://" not in store_text.text


def test_management_routes_check_the_key_before_the_request(env, tmp_path):
    cfg, _ = env
    tar = adapter_tar(make_adapter(tmp_path / "new"))
    inference_push, inference_canary, other_canary, publisher_push, admin_push = call(cfg, [
        (A, "POST", "/v1/adapters/team-a-new/versions", {"params": {"base": "nope"}, "content": tar}),
        (A, "POST", "/v1/adapters/team-a-x/canary", {"json": {"version": 5, "weight": "most"}}),
        (B, "POST", "/v1/adapters/team-a-x/canary", {"json": {"version": 5}}),
        (B, "POST", "/v1/adapters/team-b-new/versions", {"params": {"base": "nope"}, "content": tar}),
        (OPS, "POST", "/v1/adapters/team-b-new/versions", {"params": {"base": "nope"}, "content": tar}),
    ])
    # team-b's patterns cover maze-tiny:team-b-*, not nope:team-b-new: refused as any name outside them.
    for refused in (inference_push, inference_canary, other_canary, publisher_push):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_permissions"
        assert "served" not in refused.text and "unknown base" not in refused.text
    # A key that may push there learns that the base is unknown, and only the bases it may call.
    assert admin_push.status_code == 400
    assert admin_push.json()["error"]["message"] == "unknown base 'nope'; served: ['maze-tiny']"


# -- bad input: 4xx in OpenAI's shape --------------------------------------------------------------
BAD = [
    ("POST", "/v1/adapters/beta-nl%0A/versions", {"content": b"not a tar"}, 400),
    ("GET", "/v1/adapters/team-a-x%0A/history", {}, 400),
    ("GET", "/v1/adapters/team-a-x/verify", {"params": {"version": "0123456789ab\n"}}, 400),
    ("GET", "/v1/models/maze-tiny:team-a-x%0A", {}, 400),  # Starlette's {model:path} would drop the \n
    ("GET", "/v1/adapters/team-a-x%00/parity", {}, 400),
    ("GET", "/v1/models", {"params": {"after": "team-a-x\n", "limit": 1}}, 400),
    ("GET", "/v1/models", {"params": {"limit": "many"}}, 400),
    ("GET", "/v1/models", {"params": {"limit": 0}}, 400),
    ("POST", "/v1/adapters/team-a-x/canary", {"content": b"{", "headers": {"content-type": "application/json"}}, 400),
    ("POST", "/v1/adapters/team-a-x/canary", {"json": {"version": 1, "weight": "heavy"}}, 400),
    ("POST", "/v1/adapters/team-a-x/canary", {"content": b'{"version": "0123456789ab", "weight": NaN}',
                                              "headers": {"content-type": "application/json"}}, None),
    ("POST", "/v1/adapters/team-a-x/promote", {"json": {"force_parity": "very"}}, 400),
    ("POST", "/v1/adapters/team-a-x/promote", {"json": [1, 2]}, 400),
    ("POST", "/v1/adapters/team-a-x/versions", {"content": b"hello"}, 400),
    ("POST", "/v1/chat/completions", {"content": b"{", "headers": {"content-type": "application/json"}}, 400),
    ("POST", "/v1/chat/completions", {"json": {"model": 5, "messages": "x"}}, 400),
    ("POST", "/v1/chat/completions", {"json": {"model": ["maze-tiny"], "messages": TEXT}}, 400),
    ("POST", "/v1/chat/completions", {"json": {"model": "maze-tiny:team-a-x\n", "messages": TEXT}}, 400),
    ("POST", "/v1/chat/completions", {"json": {"model": "maze-tiny:team-a-x@latest", "messages": TEXT}}, 400),
    ("POST", "/v1/completions", {"json": {"model": "maze-tiny:a/b", "prompt": "x"}}, 400),
]


def test_bad_input_is_a_4xx_in_openai_shape_with_a_request_id(env):
    cfg, _ = env
    answers = call(cfg, [(OPS, method, path, dict(kwargs)) for method, path, kwargs, _ in BAD])
    for (method, path, kwargs, status), r in zip(BAD, answers):
        assert 400 <= r.status_code < 500 and (status is None or r.status_code == status), (path, kwargs, r.text)
        assert set(r.json()["error"]) == {"message", "type", "code"}, r.text
        assert r.headers["x-request-id"] and "s3://" not in r.text


# -- 5xx -------------------------------------------------------------------------------------------
def test_a_500_says_only_internal_error_and_its_request_id(env):
    cfg, _ = env
    assigned, given, engine, store_404 = call(cfg, [
        (OPS, "GET", "/v1/boom", {}),
        (OPS, "GET", "/v1/boom", {"headers": {"x-request-id": "req-from-client-1"}}),
        (OPS, "GET", "/v1/boom-engine", {}),
        (OPS, "GET", "/v1/boom-store", {}),
    ])
    rid = assigned.headers["x-request-id"]
    assert assigned.status_code == 500 and assigned.json() == {"error": {
        "message": f"internal error; request id {rid}", "type": "internal_error", "code": "internal_error"}}
    assert given.json()["error"]["message"] == "internal error; request id req-from-client-1"
    assert engine.status_code == 500 and engine.json()["error"]["message"].startswith("internal error; request id ")
    assert all("hunter2" not in r.text for r in (assigned, given, engine))
    assert store_404.status_code == 404 and store_404.json()["error"]["message"] == (
        "adapter 'x' has no version '0123456789ab'")


# -- /ready ----------------------------------------------------------------------------------------
def test_ready_shows_its_details_to_admin_keys_only(env):
    cfg, _ = env
    none, team, wrong, ops = call(cfg, [(key, "GET", "/ready", {}) for key in (None, A, "sk-unknown-00000001", OPS)])
    for r in (none, team, wrong):
        assert r.status_code == 200 and r.json() == {"status": "ready"}
    assert ops.json() == {"status": "ready", "models": {"maze-tiny": "ok"}}
    down_none, down_ops = call(cfg, [(None, "GET", "/ready", {}), (OPS, "GET", "/ready", {})], healthy=False)
    assert down_none.status_code == 503 and down_none.json() == {"status": "not_ready"}
    assert down_ops.status_code == 503 and down_ops.json()["models"]["maze-tiny"] == "RuntimeError: engine dead"


# -- uploads -----------------------------------------------------------------------------------------
def adapter_tar(folder, *, compress: bool = False, extra: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if compress else "w") as tar:
        for fname in ("adapter_config.json", "adapter_model.safetensors"):
            tar.add(folder / fname, arcname=f"ckpt/{fname}")
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_upload_extraction_is_bounded(env, tmp_path):
    cfg, store = env
    folder = make_adapter(tmp_path / "up", seed=3)
    bomb = adapter_tar(folder, compress=True, extra={"zeros.bin": bytes(8 * 2**20)})  # ~8 KB, 8 MiB inside
    many = adapter_tar(folder, compress=True, extra={f"f{i}.txt": b"" for i in range(300)})  # ~150 KiB inside
    ok, expanded, members, gz_ok = call(cfg, [
        (OPS, "POST", "/v1/adapters/team-b-up/versions", {"content": adapter_tar(folder)}),
        (OPS, "POST", "/v1/adapters/team-b-bomb/versions", {"content": bomb}),
        (OPS, "POST", "/v1/adapters/team-b-many/versions", {"content": many}),
        (OPS, "POST", "/v1/adapters/team-b-gz/versions", {"content": adapter_tar(folder, compress=True)}),
    ])
    assert len(bomb) < 64 * 1024 and ok.status_code == 200 and gz_ok.status_code == 200, (ok.text, gz_ok.text)
    assert expanded.status_code == 413 and expanded.json()["error"] == {
        "message": "the upload expands past 1048576 bytes once decompressed (limits.max_upload_bytes)",
        "type": "invalid_request_error", "code": "request_too_large"}
    assert members.status_code == 400 and members.json()["error"]["message"] == (
        "the upload holds more than 256 tar members; send a tar of the adapter folder "
        "(adapter_config.json, adapter_model.safetensors)")
    assert store.resolve("team-b-gz").version == store.resolve("team-b-up").version
    with pytest.raises(AdapterNotFound):
        store.resolve("team-b-bomb")


def test_a_huge_tar_header_is_refused_before_it_is_read(tmp_path):
    from serving.errors import AdapterInvalid
    from serving.ingress.management import MAX_TAR_HEADER_BYTES, _extract

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("adapter_config.json")
        info.pax_headers = {"comment": "x" * (MAX_TAR_HEADER_BYTES + 1)}
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    archive = tmp_path / "upload.tar"
    archive.write_bytes(gzip.compress(buf.getvalue()))
    (tmp_path / "out").mkdir()
    with pytest.raises(AdapterInvalid, match="a tar header of .* bytes"):
        _extract(archive, tmp_path / "out", 64 * 2**20)
    assert not any((tmp_path / "out").iterdir())
