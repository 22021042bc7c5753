"""Pure parts of the gateway: request limits, the resolver cache, the config extensions and the
app's LLM configs (no Ray, no engine)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import pytest
from PIL import Image

from serving.adapters import AdapterStore
from serving.app import llm_config_dicts, serving_args
from serving.config import ServingConfig
from serving.errors import (
    AdapterNotFound,
    AdapterStoreUnavailable,
    BadAdapterName,
    BadRequest,
    ImageTooLarge,
    InvalidImage,
    RequestTooLarge,
)
from serving.limits import check_request, decoded_size, image_dimensions
from serving.resolver import AdapterResolver
from tests.serving.conftest import make_adapter
from tests.serving.stack import bomb_png_url


def _img(nbytes: int) -> str:
    return "data:image/png;base64," + base64.b64encode(b"x" * nbytes).decode()


def _png(side: int = 8, pad_to: int = 0) -> str:
    """A real PNG data URL, optionally padded (after IEND, which readers ignore) to ``pad_to`` bytes."""
    buf = io.BytesIO()
    Image.new("RGB", (side, side), (255, 0, 0)).save(buf, format="PNG")
    raw = buf.getvalue()
    return "data:image/png;base64," + base64.b64encode(raw + b"\0" * max(0, pad_to - len(raw))).decode()


def check_messages(messages: list[dict], limits) -> int:
    """The number of images in ``messages`` once every request check has passed."""
    return check_request({"messages": messages}, limits).images


def _msg(*urls: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                         *({"type": "image_url", "image_url": {"url": u}} for u in urls)]}]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100])
def test_decoded_size_is_exact(n):
    assert decoded_size(_img(n)) == n


def test_limits():
    limits = ServingConfig.shipped("embedded").limits.model_copy(update={"max_images_per_request": 2,
                                                                         "max_image_bytes": 1000})
    assert check_messages(_msg(_png(), _png(pad_to=1000)), limits) == 2
    assert check_messages([{"role": "user", "content": "text only"}], limits) == 0
    with pytest.raises(BadRequest, match="data: URL"):
        check_messages(_msg("https://example.com/a.png"), limits)
    with pytest.raises(BadRequest, match="'video_url' is not served"):
        check_messages([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "file:///etc/passwd"}}]}],
                       limits)
    with pytest.raises(BadRequest, match="more than 2 images"):
        check_messages(_msg(_png(), _png(), _png()), limits)
    with pytest.raises(RequestTooLarge, match="1001 bytes"):
        check_messages(_msg(_png(pad_to=1001)), limits)
    with pytest.raises(InvalidImage, match="not a readable image"):
        check_messages(_msg(_img(10)), limits)


def test_pixel_bomb_refused_from_its_header():
    """A ~17 KB PNG that decodes to 12000 x 12000 pixels: refused (413) without decoding it."""
    limits = ServingConfig.shipped("embedded").limits
    bomb = bomb_png_url(12000, 12000)
    assert decoded_size(bomb) < limits.max_image_bytes  # the byte limit alone lets it through
    t0 = time.perf_counter()
    with pytest.raises(ImageTooLarge, match="12000x12000 = 144000000 pixels") as info:
        check_messages(_msg(bomb), limits)
    assert time.perf_counter() - t0 < 0.5  # decoding it would take seconds and ~432 MB
    assert info.value.status_code == 413 and info.value.to_openai()["error"]["code"] == "image_too_large"
    assert image_dimensions(bomb_png_url(300, 200)) == (300, 200)


def test_pixels_per_request_bounded():
    limits = ServingConfig.shipped("embedded").limits.model_copy(update={"max_image_pixels": 64 * 64,
                                                                         "max_request_pixels": 3 * 64 * 64})
    assert check_request({"messages": _msg(_png(64), _png(64), _png(64))}, limits).pixels == 3 * 64 * 64
    with pytest.raises(ImageTooLarge, match="per request"):
        check_request({"messages": _msg(_png(64), _png(64), _png(64), _png(8))}, limits)
    with pytest.raises(ImageTooLarge, match="65x65"):
        check_request({"messages": _msg(_png(65))}, limits)


@pytest.mark.parametrize(("body", "match"), [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages\\[0\\].role: 'wizard'"),
    ({"messages": []}, "at least one message"),
    ({"messages": [{"role": "user", "content": [{"type": "image_embeds", "image_embeds": "AAAA"}]}]}, "image_embeds"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 17}, "n: 17 choices"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": 2.5}, "temperature: 2.5 is outside"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 21}, "top_logprobs: 21"),
    ({"text_1": "a", "text_2": {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}},
     "text_2.content\\[0\\]: image_url must be a data: URL"),
])
def test_openai_validation(body, match):
    with pytest.raises(BadRequest, match=match):
        check_request(body, ServingConfig.shipped("embedded").limits)


def test_roles_openai_accepts():
    messages = [{"role": r, "content": "x"} for r in ("system", "developer", "user", "assistant", "tool", "function")]
    assert check_request({"messages": messages}, ServingConfig.shipped("embedded").limits).images == 0


def test_extensions_validated():
    cfg = ServingConfig.shipped("embedded")
    assert cfg.extensions == ["evaluation.api:router"]
    assert ServingConfig.shipped("production").extensions == ["evaluation.api:router"]
    with pytest.raises(ValueError, match="import paths"):
        ServingConfig.model_validate({**cfg.model_dump(), "extensions": ["not a path"]})


def test_llm_configs_follow_the_config():
    cfg = ServingConfig.shipped("production")
    (llm,) = llm_config_dicts(cfg)
    eng = llm["engine_kwargs"]
    assert eng["enable_lora"] and eng["max_lora_rank"] == 32 and eng["max_loras"] == 1 and eng["max_model_len"] == 16000
    assert llm["lora_config"]["dynamic_lora_loading_path"] == "s3://maze-gateway-adapters/lora-adapters"
    assert llm["lora_config"]["max_num_adapters_per_replica"] == eng["max_loras"]
    assert llm["accelerator_type"] == "H100" and "accelerator_config" not in llm
    assert llm["server_cls"] == "serving.lora:GatewayLLMServer"
    assert llm["deployment_config"]["num_replicas"] == 1  # min == max: fixed size, no autoscaling
    assert eng["mm_processor_cache_gb"] == 4.0  # the field's default: vLLM's own
    (cpu,) = llm_config_dicts(ServingConfig.shipped("embedded"))
    assert cpu["accelerator_config"] == {"kind": "cpu"}
    # The embedded engine's memory bounds: a processed-image cache sized for the soak, and an allocator
    # that returns freed blocks (jemalloc here: the test set-up installs it; tests/serving/test_allocator.py).
    assert cpu["engine_kwargs"]["mm_processor_cache_gb"] == 0.5
    assert "libjemalloc.so.2" in cpu["runtime_env"]["env_vars"]["LD_PRELOAD"]
    assert cpu["runtime_env"]["env_vars"]["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"
    args = serving_args(cfg)
    assert args["ingress_cls_config"]["ingress_cls"] == "serving.ingress:GatewayIngress"
    assert args["ingress_deployment_config"]["ray_actor_options"]["num_cpus"] == 0


def test_llm_serving_args_validate():
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs

    from serving.ingress import GatewayIngress

    args = LLMServingArgs.model_validate(serving_args(ServingConfig.shipped("embedded")))
    assert args.ingress_cls_config.ingress_cls is GatewayIngress
    assert args.llm_configs[0].lora_config.max_num_adapters_per_replica == 8


def test_resolver_caches_only_successes(s3_server, tmp_path):
    spec = ServingConfig.shipped("embedded").adapters.model_copy(
        update={"endpoint_url": s3_server.url, "prefix": "s3://resolver-test/a"})
    store = AdapterStore(spec)
    store.ensure_bucket()
    resolver = AdapterResolver(store, ttl_s=60)

    async def scenario():
        with pytest.raises(AdapterNotFound):
            await resolver.resolve("later")
        store.push(make_adapter(tmp_path / "a"), "later")
        first = await resolver.resolve("later")  # the miss was not remembered
        store.push(make_adapter(tmp_path / "b", seed=1), "later", force=True)
        assert await resolver.resolve("later") == first  # cached for ttl_s
        resolver.forget("later")
        assert (await resolver.resolve("later")).version != first.version
        refs = await asyncio.gather(*(resolver.resolve("later") for _ in range(10)))
        assert len({r.version for r in refs}) == 1

    asyncio.run(scenario())


def test_resolver_store_down_is_503_not_missing():
    spec = ServingConfig.shipped("embedded").adapters.model_copy(update={"endpoint_url": "http://127.0.0.1:9"})
    resolver = AdapterResolver(AdapterStore(spec), ttl_s=60)
    with pytest.raises(AdapterStoreUnavailable):
        asyncio.run(resolver.resolve("x"))
    assert resolver._cache == {}


def test_page_names(s3_server, tmp_path):
    spec = ServingConfig.shipped("embedded").adapters.model_copy(
        update={"endpoint_url": s3_server.url, "prefix": "s3://page-test/p"})
    store = AdapterStore(spec)
    store.ensure_bucket()
    folder = make_adapter(tmp_path / "a")
    for name in ("a1", "a2", "a3"):
        store.push(folder, name)
    assert store.page_names(None, 2) == (["a1", "a2"], True)
    assert store.page_names("a2", 2) == (["a3"], False)
    assert store.page_names(None, 10) == (["a1", "a2", "a3"], False)
    # `after` becomes part of an S3 key: anything but an adapter name is refused before S3 sees it
    for bad in ("\x00", "../a1", "a" * 65, "é"):
        with pytest.raises(BadAdapterName):
            store.page_names(bad, 2)


def test_grafana_dashboard_uses_documented_metrics():
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    dash = json.loads((root / "k8s" / "grafana-dashboard.json").read_text())
    docs = (root / "docs" / "metrics.md").read_text()
    names = {m for p in dash["panels"] for t in p["targets"] for m in re.findall(r"ray_[a-z_]+", t["expr"])}
    assert names
    for name in names:
        assert re.sub(r"_(bucket|count|sum)$", "", name) in docs, name


def test_up_without_the_model_says_how_to_get_it(tmp_path, monkeypatch):
    import yaml
    from click.testing import CliRunner

    from serving.cli import main

    monkeypatch.setenv("MAZE_HOME", str(tmp_path / "home"))
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["base_models"][0]["source"] = str(tmp_path / "models" / "maze-tiny")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(d))
    result = CliRunner().invoke(main, ["-c", str(tmp_path / "cfg.yaml"), "up"])
    assert result.exit_code == 1
    assert "not found" in result.output and "training.tiny.model_builder" in result.output
    status = CliRunner().invoke(main, ["status", "--json"])
    assert status.exit_code == 1 and json.loads(status.output)["running"] is False


def test_application_error_middleware_replaces_ray_base_http_middleware():
    """create_app swaps Ray's BaseHTTPMiddleware error wrapper for the pure-ASGI one, which keeps
    its behaviour: an unhandled route error becomes Ray's JSON error before the response starts."""
    from fastapi.testclient import TestClient
    from starlette.middleware.base import BaseHTTPMiddleware

    from serving.ingress import ApplicationErrorMiddleware, create_app

    app = create_app(ServingConfig.shipped("embedded"))
    classes = [m.cls for m in app.user_middleware]
    assert ApplicationErrorMiddleware in classes and BaseHTTPMiddleware not in classes

    @app.get("/boom")
    async def boom():
        raise RuntimeError("kaput")

    @app.get("/fine")
    async def fine():
        return {"ok": True}

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/boom", headers={"x-request-id": "req-1"})
    assert r.status_code == 500 and "error" in r.json()
    assert client.get("/fine").json() == {"ok": True}


def test_ray_auth_token_is_made_on_a_fresh_machine(tmp_path, monkeypatch):
    """`ray start --head` with token auth needs a token it never creates: the embedded stack makes
    one in a fresh home, keeps an existing one, and leaves a token given by the environment alone."""
    import sys
    from pathlib import Path

    from serving.embedded import ensure_auth_token

    ray_exe = Path(sys.executable).with_name("ray")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    made = ensure_auth_token(ray_exe)
    assert made == tmp_path / ".ray" / "auth_token"
    token = made.read_text()
    assert len(token) >= 16
    assert ensure_auth_token(ray_exe) is None and made.read_text() == token
    monkeypatch.setenv("HOME", str(tmp_path / "other"))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(made))
    assert ensure_auth_token(ray_exe) is None and not (tmp_path / "other" / ".ray").exists()


def test_port_check_sees_lingering_connections_as_the_replica_bind_does():
    """A server without SO_REUSEADDR (Serve's direct-ingress replica) that closed its side of a
    connection leaves the port unbindable (TIME_WAIT) though nothing listens: `down` waits for it and
    `up` tells it apart from a port another server holds."""
    import socket

    from serving.embedded import _listening, _port_free

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    assert _listening(port) and not _port_free(port, reuse=False)
    accepted.close()  # the server closes first, as a stopped replica does
    listener.close()
    client.recv(1)
    client.close()
    assert not _port_free(port, reuse=False) and not _listening(port)
