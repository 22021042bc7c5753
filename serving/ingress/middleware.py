"""The ingress app's middlewares, pure ASGI so that streams pass through untouched.

:class:`GatewayMiddleware` is the outermost: the body-size limit (``limits.max_body_bytes``, or
``limits.max_upload_bytes`` for adapter uploads) and the route-level request count and latency;
the key gate (:mod:`serving.auth.middleware`) runs inside it. :class:`ApplicationErrorMiddleware`
takes the place of Ray Serve LLM's ``BaseHTTPMiddleware`` error wrapper.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from ray.llm._internal.serve.core.ingress.middleware import _handle_validation_error, get_request_id
from ray.llm._internal.serve.utils.server_utils import get_response_for_error
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from serving.errors import RequestTooLarge, ServingError, send_openai_error
from serving.metrics import metric, route_of

log = logging.getLogger(__name__)

_UPLOAD = re.compile(r"^/v1/adapters/[^/]+/versions$")  # adapter uploads: limits.max_upload_bytes


class GatewayMiddleware:
    """Outermost middleware: body-size limit, request count and latency (keys: ``serving.auth.middleware``, inside it)."""

    def __init__(self, app, *, max_body_bytes: int, max_upload_bytes: int | None = None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes or max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, state = time.perf_counter(), {"status": 500, "started": False}
        limit = self.max_upload_bytes if _UPLOAD.match(scope["path"]) else self.max_body_bytes

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
            await send(message)

        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
            return message

        try:
            length = dict(scope["headers"]).get(b"content-length")
            if length is not None and length.isdigit() and int(length) > limit:
                raise RequestTooLarge(f"request body of {int(length)} bytes exceeds the limit of {limit}")
            await self.app(scope, limited_receive, tracked_send)
        except ServingError as exc:
            if state["started"]:
                raise
            await send_openai_error(tracked_send, exc)
        finally:
            route = route_of(scope["path"])
            metric("requests").inc(tags={"route": route, "status": str(state["status"])})
            metric("latency").observe(time.perf_counter() - start, tags={"route": route})


class ApplicationErrorMiddleware:
    """Pure-ASGI stand-in for Ray Serve LLM's ``BaseHTTPMiddleware(_handle_application_exceptions)``.

    Same behaviour (an exception the handlers did not turn into a response becomes Ray's JSON
    error, a validation error its 400, cancellation propagates), without ``BaseHTTPMiddleware``'s
    per-request cost: an anyio task group, a memory stream the response body is copied through and
    a second response object. The profile of the embedded replica showed that as its largest
    middleware cost (docs/benchmarks.md).
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if started:  # too late for an error response: let the server close the connection
                raise
            request = Request(scope, receive)
            if isinstance(exc, RequestValidationError):
                response = await _handle_validation_error(request, exc)
            else:
                error = get_response_for_error(exc, get_request_id(request))
                response = JSONResponse(content=error.model_dump(), status_code=error.error.code)
            await response(scope, receive, send)


def replace_application_error_middleware(app: FastAPI) -> None:
    """Swap Ray's ``BaseHTTPMiddleware`` error wrapper for :class:`ApplicationErrorMiddleware`
    (same place in the stack). If a Ray version adds none, the app is left as it is."""
    for i, m in enumerate(app.user_middleware):
        dispatch = getattr(m.kwargs.get("dispatch"), "__name__", "")
        if m.cls is BaseHTTPMiddleware and dispatch == "_handle_application_exceptions":
            app.user_middleware[i] = type(m)(ApplicationErrorMiddleware)
            return
    log.warning("Ray's application error middleware not found; the ingress app keeps its middleware as is")


__all__ = ["ApplicationErrorMiddleware", "GatewayMiddleware", "replace_application_error_middleware"]
