"""Per-adapter request metrics: requests, errors, latency and tokens by adapter name and version.

Recorded in the ingress around each engine request, after the name was resolved: only adapters
published in the store (``base:name@version`` after resolution) become label values, so the
label set is bounded by the store's contents, never by what clients type. Base-model requests
and requests whose adapter did not resolve are left to the route-level metrics.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import AsyncIterator

from starlette.responses import Response, StreamingResponse

from serving.adapters import ModelId
from serving.auth import usage_of
from serving.metrics import metric

# The request's model once the gateway resolved it to ``base:name@version`` (set by the ingress);
# only a resolved model labels metrics, so label values are bounded by the store, never by client text.
RESOLVED_MODEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("maze_resolved_model", default=None)


def adapter_labels(model: str | None) -> dict[str, str] | None:
    """``base:name@version`` -> ``{"base", "adapter", "version"}``; None for anything else."""
    parsed = ModelId.parse(model)
    if not (parsed.name and parsed.version):
        return None
    return {"base": parsed.base, "adapter": parsed.name, "version": parsed.version}


def _status_of(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "499"  # the client went away
    code = getattr(getattr(exc, "cause", None), "status_code", None) or getattr(exc, "status_code", None)
    return str(code if isinstance(code, int) else 500)


def _record(labels: dict[str, str], status: str, start: float, usage: tuple[int, int] | None) -> None:
    metric("adapter_requests").inc(tags={**labels, "status": status})
    metric("adapter_latency").observe(time.perf_counter() - start, tags=labels)
    if usage is not None:
        metric("adapter_tokens").inc(usage[0], tags={**labels, "kind": "prompt"})
        metric("adapter_tokens").inc(usage[1], tags={**labels, "kind": "completion"})


async def _counted(chunks: AsyncIterator, labels: dict[str, str], start: float) -> AsyncIterator:
    usage, status = None, "200"
    try:
        async for chunk in chunks:
            text = chunk if isinstance(chunk, str) else bytes(chunk).decode("utf-8", "ignore")
            if '"usage"' in text:  # only the final chunk when the client asked for include_usage
                usage = usage_of(text) or usage
            yield chunk
    except (asyncio.CancelledError, GeneratorExit):
        status = "499"  # the client went away mid-stream
        raise
    except BaseException as exc:
        status = _status_of(exc)  # the stream broke after its 200 header: still an error
        raise
    finally:  # the request counts whatever happened, with its time so far
        _record(labels, status, start, usage)


def _track(response: Response, labels: dict[str, str], start: float) -> Response:
    if isinstance(response, StreamingResponse):
        response.body_iterator = _counted(response.body_iterator, labels, start)
        return response
    body = bytes(getattr(response, "body", b"") or b"")
    _record(labels, str(response.status_code), start, usage_of(body.decode("utf-8", "ignore")) if body else None)
    return response


def with_adapter_metrics(method):
    """Wrap the ingress's ``_process_llm_request(body, ...)``: it sets ``body.model`` to the resolved
    ``base:name@version``, which labels the request; the whole stream counts for latency."""

    @functools.wraps(method)
    async def wrapper(self, body, *args, **kwargs):
        start = time.perf_counter()
        RESOLVED_MODEL.set(None)  # a request that fails before resolution is labelled by nothing
        try:
            response = await method(self, body, *args, **kwargs)
        except BaseException as exc:
            labels = adapter_labels(RESOLVED_MODEL.get())
            if labels is not None:
                _record(labels, _status_of(exc), start, None)
            raise
        labels = adapter_labels(RESOLVED_MODEL.get())
        return _track(response, labels, start) if labels is not None else response

    return wrapper

