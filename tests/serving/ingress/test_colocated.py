"""The colocated layout (``serving.ingress.colocated``) without Ray or an engine: the app is one deployment
with the LLM server's resources, and the in-process handle gives ``OpenAiIngress`` what a
``DeploymentHandle`` would (streams, the LoRA id in Serve's request context, health checks).
The layout serving for real is covered by ``test_gateway_stack.py`` (both layouts)."""

from __future__ import annotations

import asyncio
import json
import types

import pytest
from ray import serve

from serving.config import ServingConfig


def _cfg(layout: str = "colocated") -> ServingConfig:
    return ServingConfig.shipped("embedded").model_copy(update={"layout": layout})


@pytest.fixture
def no_ray(monkeypatch):
    """Building an app reads the driver's runtime env (``ray.get_runtime_context``), which would
    start a local Ray; a stub keeps these tests pure. The ingress also exports the S3 env."""
    import ray

    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(runtime_env={}))
    for key in ("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)  # restored (or removed again) after the test


def test_layout_default_and_validation():
    assert ServingConfig.shipped("production").layout == "standard"
    d = _cfg().model_dump(mode="json")
    d["base_models"].append({**d["base_models"][0], "id": "other"})
    with pytest.raises(ValueError, match="exactly one base model"):
        ServingConfig.model_validate(d)
    d["layout"], d["ingress"] = "standard", "proxy"  # direct ingress needs the colocated layout
    assert ServingConfig.model_validate(d).layout == "standard"
    with pytest.raises(ValueError):
        ServingConfig.model_validate({**d, "layout": "direct"})


def test_colocated_app_is_one_deployment(no_ray):
    from ray.serve._private.http_util import ASGIAppReplicaWrapper
    from ray.serve.deployment import Application

    from serving.app import COLOCATED_DEPLOYMENT, build_app
    from serving.ingress import ColocatedGateway

    dep = build_app(_cfg())._bound_deployment
    assert dep.name == COLOCATED_DEPLOYMENT
    assert issubclass(dep.func_or_class, ColocatedGateway) and issubclass(dep.func_or_class, ASGIAppReplicaWrapper)
    kw = dep.init_kwargs
    assert not any(isinstance(v, Application) for v in kw.values())  # no second deployment behind it
    llm = kw["llm_config"]
    assert llm.model_id == "maze-tiny" and set(kw["model_cards"]) == {"maze-tiny"}
    assert llm.engine_kwargs["enable_lora"] and llm.engine_kwargs["max_loras"] == 8
    assert kw["lora_paths"] == {"maze-tiny": "s3://maze-adapters/lora-adapters"}
    assert kw["config"]["layout"] == "colocated"
    # The LLM server's resources and admission limit, its runtime env (S3 and engine variables).
    assert dep._deployment_config.max_ongoing_requests == 64
    assert dep._replica_config.placement_group_bundles == [{"CPU": 2, "GPU": 0}]
    env = dep.ray_actor_options["runtime_env"]["env_vars"]
    assert env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # The standard layout is unchanged: an ingress bound to one LLM deployment per base model.
    std = build_app(_cfg("standard"))._bound_deployment
    assert std.name == "GatewayIngress"
    assert all(isinstance(v, Application) for v in std.init_kwargs["llm_deployments"].values())


def _chat_response(model: str, content: str):
    from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionResponse

    return ChatCompletionResponse.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def _last_text(request) -> str:
    messages = getattr(request, "messages", None) or [{"content": ""}]
    last = messages[-1]
    return last["content"] if isinstance(last, dict) else last.content


class FakeServer:
    """What ColocatedGateway uses of GatewayLLMServer (the engine cannot run in a unit test);
    records the model and LoRA id each call saw, and answers with the request's own text, so a
    reply proves which request reached it."""

    healthy = True

    @classmethod
    def sync_init(cls, llm_config):
        server = cls()
        server.llm_config, server.started, server.seen = llm_config, False, []
        return server

    async def start(self):
        self.started = True

    async def chat(self, request, raw_request_info=None):
        self.seen.append((request.model, serve.get_multiplexed_model_id()))

        async def stream():
            yield _chat_response(request.model, f"echo {_last_text(request)}")
        return stream()

    async def check_health(self):
        if not self.healthy:
            raise RuntimeError("engine dead")


def test_local_handle_streams_and_sets_the_lora_id():
    from serving.ingress.colocated import LocalServerHandle

    server = FakeServer.sync_init(None)
    handle = LocalServerHandle(server)
    body = types.SimpleNamespace(model="maze-tiny:a@v1")

    async def scenario():
        configured = handle.options(stream=True, multiplexed_model_id="maze-tiny:a@v1").options(session_id="s")
        items = [x async for x in configured.chat.remote(body, None)]
        assert [x.model for x in items] == ["maze-tiny:a@v1"]
        assert server.seen == [("maze-tiny:a@v1", "maze-tiny:a@v1")]
        assert serve.get_multiplexed_model_id() == ""  # reset after the call
        base = [x async for x in handle.options(stream=True).chat.remote(types.SimpleNamespace(model="maze-tiny"))]
        assert len(base) == 1 and server.seen[-1] == ("maze-tiny", "")
        assert await handle.check_health.remote() is None
        with pytest.raises(AttributeError):
            handle._private  # noqa: B018 - private names are not server methods

    asyncio.run(scenario())


class SwallowingServer:
    """A server that does what vLLM's JSON answers do when the request they run is cancelled: they
    catch the ``CancelledError`` and answer (an error, "Client disconnected"), or, in ``raises``,
    fail; ``timed`` answers once a timeout of its own has expired (a cancellation it withdrew)."""

    def __init__(self, raises: bool = False):
        self.raises, self.took = raises, asyncio.Event()

    async def _wait(self) -> str:
        self.took.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.raises:
                raise RuntimeError("the engine failed as it stopped") from None
            return "Client disconnected"

    async def chat(self, request, raw_request_info=None):
        async def answer():
            yield await self._wait()
        return answer()

    async def check_health(self):
        return await self._wait()

    async def timed(self):
        async def answer():
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.Event().wait()
            except TimeoutError:
                yield "timed out"
        return answer()


@pytest.mark.parametrize("raises", [False, True])
@pytest.mark.parametrize("streamed", [True, False])
def test_a_cancelled_caller_is_cancelled_whatever_the_server_made_of_it(streamed, raises):
    """Called in-process, the server runs in the caller's task and vLLM swallows the cancellation:
    the caller sees ``CancelledError`` all the same, as through a ``DeploymentHandle`` (the ingress
    then counts the prompt of a request its client left), not the server's answer or failure."""
    from serving.ingress.colocated import LocalServerHandle

    server = SwallowingServer(raises=raises)
    handle = LocalServerHandle(server)
    got = []

    async def call():
        if streamed:
            async for item in handle.options(stream=True).chat.remote(types.SimpleNamespace(model="maze-tiny"), None):
                got.append(item)
        else:
            got.append(await handle.check_health.remote())

    async def scenario():
        task = asyncio.create_task(call())
        await asyncio.wait_for(server.took.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert got == []

    asyncio.run(scenario())


def test_a_server_timeout_of_its_own_is_no_cancellation_of_the_caller():
    from serving.ingress.colocated import LocalServerHandle

    async def scenario():
        return [x async for x in LocalServerHandle(SwallowingServer()).options(stream=True).timed.remote()]

    assert asyncio.run(scenario()) == ["timed out"]


def test_colocated_gateway_serves_through_the_local_server(no_ray):
    from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest, to_model_metadata
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs

    from serving.app import serving_args
    from serving.errors import ModelNotFound
    from serving.ingress import ColocatedGateway

    cfg = _cfg()
    (llm_config,) = LLMServingArgs.model_validate(serving_args(cfg)).llm_configs

    class Gateway(ColocatedGateway):
        def __del__(self):  # Serve awaits the async __del__; a plain garbage collection would not
            pass

    async def scenario():
        gw = Gateway.__new__(Gateway)
        await gw.__init__(llm_config, {"maze-tiny": to_model_metadata("maze-tiny", llm_config)},
                          lora_paths={"maze-tiny": cfg.adapters.prefix}, config=cfg.model_dump(mode="json"),
                          server_cls=FakeServer)
        assert gw.server.started and gw.server.llm_config is llm_config
        body = ChatCompletionRequest(model="maze-tiny", messages=[{"role": "user", "content": "turn 7"}], max_tokens=1)
        resp = await gw._process_llm_request(body, "chat")
        # The ingress handed the local server this request (a base model: no LoRA id set) and
        # returned the server's reply to it as the response.
        assert gw.server.seen == [("maze-tiny", "")]
        reply = json.loads(resp.body)
        assert resp.status_code == 200 and reply["choices"][0]["message"]["content"] == "echo turn 7"
        assert reply["model"] == "maze-tiny"
        with pytest.raises(ModelNotFound):
            await gw._process_llm_request(body.model_copy(update={"model": "nope"}), "chat")
        assert (await gw.ready()).status_code == 200
        gw.server.healthy = False
        assert (await gw.ready()).status_code == 503
        with pytest.raises(RuntimeError, match="engine dead"):
            await gw.check_health()

    asyncio.run(scenario())
