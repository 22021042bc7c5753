"""Every keyed request is charged what it used, through the gateway's real app, key gate and ingress
(``GatewayIngress``) with a scripted engine behind the ingress's in-process handle
(``LocalServerHandle``, as the colocated layout calls its server). The engine answers in vLLM's own
response types and follows ``stream_options`` by vLLM's own rule (``should_include_usage``); its
tokenizer is one token a word plus three a message, the same count in its usage and its ``tokenize``.

A stream cut off after its first chunk, with or without the client's ``include_usage``, one cut off
before its first chunk, and a JSON request its client left before the answer are charged their
prompt and the completion tokens they had, in ``GET /v1/usage`` and in the key's token limit; the
client sees the usage it asked for and no other. tests/serving/stack/test_limits_hold.py runs the
cut stream and the abandoned request on the real engine."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from fastapi import Request
from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    ErrorInfo,
    ErrorResponse,
    ModelCard,
    TokenizeResponse,
)
from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
)
from vllm.entrypoints.serve.engine.protocol import UsageInfo
from vllm.entrypoints.serve.utils.api_utils import should_include_usage

from serving.ingress.colocated import LocalServerHandle
from serving.ingress.gateway import GatewayIngress
from serving.ingress.prompt_tokens import count_prompt_tokens
from tests.serving.auth.test_middleware import ADMIN, LIMITED, cut_stream, gateway_app, stream_scope

MESSAGES = [{"role": "system", "content": "You are in a maze: walls all around, one door somewhere."},
            {"role": "user", "content": "You see a corridor to the north and a wall to the east. Move?"}]
OPTIONS = [None, {"include_usage": True}, {"include_usage": True, "continuous_usage_stats": True},
           {"include_usage": False, "continuous_usage_stats": True}]
PACE_S = 0.2  # between two tokens: the client leaves well within it


class ScriptedEngine:
    """What the ingress calls of an LLM server: ``chat`` (a JSON answer, or a stream of one chunk a
    token, every ``PACE_S``, after the role chunk) and ``tokenize``. With ``hold`` set it has taken
    the request (prefill, a queue) and sends nothing until ``go`` is set. A JSON request cancelled
    meanwhile is answered as vLLM answers it: its full generator catches the ``CancelledError`` and
    returns an error, "Client disconnected" (400), which Ray's engine yields as an ``ErrorResponse``;
    a stream lets the cancellation through."""

    def __init__(self, hold: bool = False):
        self.hold, self.go, self.took = hold, asyncio.Event(), asyncio.Event()
        self.aborted: list[str] = []  # the calls cancelled in the engine (the client left)
        self.tokenized: list = []

    @staticmethod
    def count(text_or_messages) -> int:
        if isinstance(text_or_messages, str):
            return len(text_or_messages.split()) + 1
        return sum(len(str(m["content"]).split()) + 3 for m in text_or_messages)

    async def chat(self, request, raw_request_info=None):
        return self._stream(request) if request.stream else self._answer(request)

    async def _taken(self, kind: str) -> None:
        self.took.set()
        try:
            if self.hold:
                await self.go.wait()
        except asyncio.CancelledError:
            self.aborted.append(kind)
            raise

    async def _answer(self, request):
        try:
            await self._taken("json")
        except asyncio.CancelledError:  # vLLM's JSON answer swallows the cancellation (see the class)
            yield ErrorResponse(error=ErrorInfo(message="Client disconnected", type="BadRequestError", code=400))
            return
        prompt = self.count(request.messages)
        yield ChatCompletionResponse.model_validate({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": request.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "north"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1}})

    async def _stream(self, request):
        await self._taken("stream")
        for chunk in engine_chunks(request, self.count(request.messages)):
            yield chunk
            if '"delta"' in chunk:
                await asyncio.sleep(PACE_S)

    async def tokenize(self, request, raw_request_info=None):
        self.tokenized.append(request)

        async def answer():
            if getattr(request, "prompt", None) == "broken":
                yield ErrorResponse(error=ErrorInfo(message="no tokenizer", type="BadRequestError", code=400))
                return
            text = request.prompt if hasattr(request, "prompt") else request.messages
            yield TokenizeResponse(count=self.count(text), max_model_len=4096, tokens=[])
        return answer()


def engine_chunks(request, prompt: int) -> list[str]:
    """The stream vLLM's chat server sends for ``request`` (its own types and ``exclude_unset``
    dumps): the role chunk, one chunk a token, then the usage chunk when asked."""
    include_usage, continuous = should_include_usage(request.stream_options, False)

    def chunk(delta: DeltaMessage, done: int, finish: str | None = None) -> str:
        out = ChatCompletionStreamResponse(id="chatcmpl-1", object="chat.completion.chunk", created=0,
                                           model=request.model, choices=[ChatCompletionResponseStreamChoice(
                                               index=0, delta=delta, logprobs=None, finish_reason=finish)])
        if continuous:
            out.usage = UsageInfo(prompt_tokens=prompt, completion_tokens=done, total_tokens=prompt + done)
        return f"data: {out.model_dump_json(exclude_unset=True)}\n\n"

    n = request.max_tokens
    chunks = [chunk(DeltaMessage(role="assistant", content=""), 0)]
    chunks += [chunk(DeltaMessage(content=f" step{i}"), i, "length" if i == n else None) for i in range(1, n + 1)]
    if include_usage:
        final = ChatCompletionStreamResponse(id="chatcmpl-1", object="chat.completion.chunk", created=0,
                                             model=request.model, choices=[],
                                             usage=UsageInfo(prompt_tokens=prompt, completion_tokens=n,
                                                             total_tokens=prompt + n))
        chunks.append(f"data: {final.model_dump_json(exclude_unset=True)}\n\n")
    return [*chunks, "data: [DONE]\n\n"]


def gateway_on(engine: ScriptedEngine, s3_server, monkeypatch):
    """The gateway's app (key gate included) whose chat route is the real ingress's, on ``engine``."""
    ingress = []

    def routes(app):
        @app.post("/v1/chat/completions")
        async def chat(body: ChatCompletionRequest, request: Request):  # as Ray's ingress routes it
            return await ingress[0].chat(body, request)

    gateway = gateway_app(s3_server, monkeypatch, routes=routes)
    for key in ("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        # the ingress exports the store's S3 settings: restored as they are now after the test
        monkeypatch.setenv(key, os.environ[key]) if key in os.environ else monkeypatch.delenv(key, raising=False)
    cfg = gateway.app.state.gateway_config
    card = ModelCard(id="maze-tiny", object="model", owned_by="maze-gateway", permission=[], metadata={})
    ingress.append(GatewayIngress({"maze-tiny": LocalServerHandle(engine)}, {"maze-tiny": card},
                                  lora_paths={"maze-tiny": cfg.adapters.prefix}, config=cfg.model_dump(mode="json")))
    return gateway


async def charged(gateway) -> tuple[dict, int]:
    """The limited key's usage row and the tokens its limit has left (the next request's header)."""
    async with gateway(ADMIN) as admin:
        (row,) = (await admin.get("/v1/usage", params={"key": "limited"})).json()["data"]
    async with gateway(LIMITED) as c:
        nxt = await c.post("/v1/chat/completions", json={"model": "maze-tiny", "messages": MESSAGES, "max_tokens": 1})
    assert nxt.status_code == 200, nxt.text
    return row, int(nxt.headers["x-ratelimit-remaining-tokens"])


def chat(options: dict | None, max_tokens: int = 50, stream: bool = True) -> dict:
    body = {"model": "maze-tiny", "messages": MESSAGES, "max_tokens": max_tokens, "stream": stream}
    return {**body, "stream_options": options} if options is not None else body


@pytest.mark.parametrize("how", ["cancelled", "disconnect", "send fails"])
@pytest.mark.parametrize("options", OPTIONS)
async def test_a_stream_cut_after_its_first_chunk_is_charged_its_prompt(s3_server, monkeypatch, options, how):
    """Whatever the client asked of usage, the gateway asked the engine for it in every chunk: the
    first chunk already names the prompt's tokens. The client sees the chunk usage only if it asked."""
    engine = ScriptedEngine()
    gateway = gateway_on(engine, s3_server, monkeypatch)
    chunks = await cut_stream(gateway.app, "", how, after=1, path="/v1/chat/completions", request=chat(options))
    shown = b"".join(chunks)
    asked_chunk_usage = bool(options and options.get("include_usage") and options.get("continuous_usage_stats"))
    assert len(chunks) == 1 and b'"role":"assistant"' in shown and (b'"usage"' in shown) == asked_chunk_usage
    row, remaining = await charged(gateway)
    prompt = engine.count(MESSAGES)
    made = 1 if how == "send fails" else 0  # the chunk that could not be sent was made all the same
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, prompt, made)
    assert remaining == 120 - prompt - made


@pytest.mark.parametrize("options", OPTIONS[:2])
async def test_a_stream_cut_before_its_first_chunk_is_charged_its_prompt(s3_server, monkeypatch, options):
    """The engine had the request (prefill, a queue) and sent nothing yet: no usage came, the prompt
    is counted by the engine's tokenizer."""
    engine = ScriptedEngine(hold=True)
    gateway = gateway_on(engine, s3_server, monkeypatch)
    answered = await leave_once_taken(gateway.app, engine, chat(options))
    assert answered == [] and engine.aborted == ["stream"]
    engine.go.set()  # the next request is answered
    row, remaining = await charged(gateway)
    prompt = engine.count(MESSAGES)
    assert (row["requests"], row["errors"], row["prompt_tokens"], row["completion_tokens"]) == (1, 1, prompt, 0)
    assert remaining == 120 - prompt
    (counted,) = engine.tokenized  # the request's own messages, the chat template's generation prompt
    assert counted.messages == MESSAGES and counted.add_generation_prompt


async def test_a_json_request_left_before_its_answer_is_charged_its_prompt(s3_server, monkeypatch):
    engine = ScriptedEngine(hold=True)
    gateway = gateway_on(engine, s3_server, monkeypatch)
    answered = await leave_once_taken(gateway.app, engine, chat(None, stream=False))
    assert answered == [] and engine.aborted == ["json"]  # Serve's cancel reached the engine: it stopped
    engine.go.set()  # the next request is answered
    row, remaining = await charged(gateway)
    prompt = engine.count(MESSAGES)
    assert (row["requests"], row["errors"], row["prompt_tokens"], row["completion_tokens"]) == (1, 1, prompt, 0)
    assert remaining == 120 - prompt
    assert [r.messages for r in engine.tokenized] == [MESSAGES]


async def test_a_json_answer_whose_client_has_gone_is_charged_what_it_used(s3_server, monkeypatch):
    """The answer is ready but the client's connection is gone: sending the response's start fails.
    The gate reads the answer's usage before anything is sent, so it is charged all the same (before,
    the start was sent first, its failure ended the request and the answer's usage was never read)."""
    engine = ScriptedEngine()
    gateway = gateway_on(engine, s3_server, monkeypatch)
    body = json.dumps(chat(None, stream=False)).encode()
    requested = [False]

    async def receive():
        if not requested[0]:
            requested[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()

    async def send(message):
        raise OSError("the client's connection is gone")

    with pytest.raises(OSError):
        await asyncio.wait_for(gateway.app(stream_scope(LIMITED, "", "/v1/chat/completions"), receive, send), 10)
    row, remaining = await charged(gateway)
    prompt = engine.count(MESSAGES)
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, prompt, 1)  # its answer's
    assert remaining == 120 - prompt - 1


async def test_an_answered_json_request_costs_no_tokenize_call(s3_server, monkeypatch):
    engine = ScriptedEngine()
    gateway = gateway_on(engine, s3_server, monkeypatch)
    async with gateway(LIMITED) as c:
        assert (await c.post("/v1/chat/completions", json=chat(None, stream=False))).status_code == 200
    row, remaining = await charged(gateway)
    prompt = engine.count(MESSAGES)
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, prompt, 1)
    assert remaining == 120 - prompt - 1 and engine.tokenized == []


@pytest.mark.parametrize("options", OPTIONS)
async def test_a_whole_stream_shows_the_client_what_it_asked_for(s3_server, monkeypatch, options):
    """The bytes the client gets are the engine's stream for the client's own ``stream_options``,
    though the engine was asked for usage in every chunk; the whole stream is charged its usage."""
    engine = ScriptedEngine()
    gateway = gateway_on(engine, s3_server, monkeypatch)
    async with gateway(LIMITED) as c:
        resp = await c.post("/v1/chat/completions", json=chat(options, max_tokens=3))
    assert resp.status_code == 200, resp.text
    as_asked = ChatCompletionRequest.model_validate(chat(options, max_tokens=3))
    assert resp.text == "".join(engine_chunks(as_asked, engine.count(MESSAGES)))
    row, remaining = await charged(gateway)
    prompt = engine.count(MESSAGES)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, 3) and remaining == 120 - prompt - 3


async def leave_once_taken(app, engine: ScriptedEngine, request: dict) -> list[dict]:
    """Send ``request`` as the limited key and leave once the engine has it: Serve cancels the
    request (what it does when the client disconnects). What was sent to the client."""
    body, sent = json.dumps(request).encode(), []

    async def receive():
        if not sent:
            sent.append("requested")
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client's leaving is Serve's cancel, below

    async def send(message):
        sent.append(message)

    task = asyncio.create_task(app(stream_scope(LIMITED, "", "/v1/chat/completions"), receive, send))
    await asyncio.wait_for(engine.took.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    return sent[1:]


async def test_prompt_counts_of_every_completion_prompt_form():
    engine = ScriptedEngine()
    handle = LocalServerHandle(engine).options(stream=True)
    forms = {"one two three": 4, ("a b", "c"): 3 + 2, (5, 6, 7): 3, ((1, 2), (3,)): 3}
    for prompt, tokens in forms.items():
        body = CompletionRequest(model="maze-tiny", prompt=json.loads(json.dumps(prompt)))
        assert await count_prompt_tokens(handle, body) == tokens, prompt
    assert await count_prompt_tokens(handle, CompletionRequest(model="maze-tiny", prompt="broken")) is None
