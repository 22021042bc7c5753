"""Per-adapter metric labels and token counts (the pure parts of serving.ingress.adapter_metrics)."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.responses import JSONResponse, StreamingResponse

from serving.errors import AdapterLoadFailed, AdapterNotFound
from serving.ingress import adapter_metrics
from serving.ingress.adapter_metrics import adapter_labels, usage_of, with_adapter_metrics


@pytest.mark.parametrize(("model", "labels"), [
    ("maze-tiny:agent@3f2a9c1e0b7d", {"base": "maze-tiny", "adapter": "agent", "version": "3f2a9c1e0b7d"}),
    ("maze-tiny:agent", None),  # not resolved: never a label value
    ("maze-tiny", None),
    (None, None),
    ("maze-tiny:@abc", None),
])
def test_labels_only_for_resolved_adapters(model, labels):
    assert adapter_labels(model) == labels


def test_usage_from_a_body_and_a_stream_chunk():
    body = json.dumps({"usage": {"prompt_tokens": 812, "completion_tokens": 7, "total_tokens": 819}})
    assert usage_of(body) == (812, 7)
    chunk = 'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
    assert usage_of(chunk) == (5, 2)
    assert usage_of('data: {"choices":[{"delta":{"content":"up"}}]}\n\n') is None


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, labels, status, start, usage):
        self.calls.append((labels["adapter"], labels["version"], status, usage))


class _Body:
    def __init__(self, model):
        self.model = model


class _Ingress:
    """Resolves like the gateway (body.model -> base:name@version), then answers or fails."""

    def __init__(self, answer):
        self.answer = answer

    @with_adapter_metrics
    async def _process_llm_request(self, body, call_method, raw_request=None):
        if "unknown" in body.model:  # resolution fails: the client's text is all there is
            raise AdapterNotFound(f"no adapter {body.model!r}")
        if ":" in body.model:
            body.model += "@3f2a9c1e0b7d"
            adapter_metrics.RESOLVED_MODEL.set(body.model)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_wrapper_records_per_version(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(adapter_metrics, "_record", rec)
    usage = {"prompt_tokens": 10, "completion_tokens": 3}
    asyncio.run(_Ingress(JSONResponse({"usage": usage}))._process_llm_request(_Body("maze-tiny:agent"), "chat"))
    asyncio.run(_Ingress(JSONResponse({}))._process_llm_request(_Body("maze-tiny"), "chat"))  # base: not labelled
    with pytest.raises(AdapterLoadFailed):
        asyncio.run(_Ingress(AdapterLoadFailed("bad"))._process_llm_request(_Body("maze-tiny:agent"), "chat"))

    async def chunks():
        yield 'data: {"choices":[]}\n\n'
        yield 'data: {"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n'

    async def stream():
        resp = await _Ingress(StreamingResponse(chunks()))._process_llm_request(_Body("maze-tiny:agent"), "chat")
        return [c async for c in resp.body_iterator]

    assert len(asyncio.run(stream())) == 2
    # a client-chosen id that never resolved creates no series, whatever it looks like
    with pytest.raises(AdapterNotFound):
        asyncio.run(_Ingress(JSONResponse({}))._process_llm_request(_Body("maze-tiny:unknown@000000000000"), "chat"))

    async def broken_chunks():
        yield 'data: {"choices":[]}\n\n'
        raise RuntimeError("engine died mid-stream")

    async def broken_stream():
        resp = await _Ingress(StreamingResponse(broken_chunks()))._process_llm_request(_Body("maze-tiny:agent"), "chat")
        return [c async for c in resp.body_iterator]

    with pytest.raises(RuntimeError):
        asyncio.run(broken_stream())
    assert rec.calls == [("agent", "3f2a9c1e0b7d", "200", (10, 3)), ("agent", "3f2a9c1e0b7d", "422", None),
                         ("agent", "3f2a9c1e0b7d", "200", (4, 2)), ("agent", "3f2a9c1e0b7d", "500", None)]
