"""The ingress app's middlewares, pure ASGI so that streams pass through untouched, and the one
mapping of errors to what a client reads.

:class:`GatewayMiddleware` is the outermost: the request id (``x-request-id``, assigned when the
request has none), the body-size limit (``limits.max_body_bytes``, or ``limits.max_upload_bytes``
for adapter uploads), the route-level request count and latency, the ``Server-Timing`` header
(:mod:`serving.ingress.server_timing`) and the last answer to an error nothing inside answered;
the key gate (:mod:`serving.auth.middleware`) runs inside it. The time to the response's start
(``response_start``: a stream's first chunk) is measured here too, inside the header's ``total``.
:class:`ApplicationErrorMiddleware` takes the place of Ray Serve LLM's ``BaseHTTPMiddleware`` error
wrapper. :func:`public_error` is the OpenAI-shaped body of any error: a 4xx says what was wrong
(never where the adapter store lives), a 5xx the gateway did not word for clients says only
``internal error; request id X`` (Ray's own error body would carry the exception's text: SQL,
Redis or S3 messages, to any caller); the exception goes to the log under that id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware

from serving.compat import OpenAIHTTPException, error_status
from serving.errors import BadRequest, RequestTooLarge, ServingError
from serving.ingress.server_timing import HEADER as TIMING_HEADER
from serving.ingress.server_timing import TIMING, RequestTiming
from serving.metrics import metric, route_of

log = logging.getLogger(__name__)

_UPLOAD = re.compile(r"^/v1/adapters/[^/]+/versions$")  # adapter uploads: limits.max_upload_bytes
REQUEST_ID = b"x-request-id"  # Ray Serve's request-id header (its proxy and its direct ingress set it)
_ID_TEXT = re.compile(r"^[\x21-\x7e]{1,128}$")  # an id that every layer decodes and logs as it is
# No route takes a control character (the path is percent-decoded): Starlette's `{x:path}` would
# drop a trailing newline, and a name holding one would reach an S3 key.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Where the adapter store lives, as store errors name it ("... not found under s3://bucket/prefix").
_STORE_LOCATION = re.compile(r"(?: under| in| at)? s3://[^\s'\"]*")


# -- request ids and errors ---------------------------------------------------------------------
def ensure_request_id(scope) -> tuple[str, bool]:
    """The request's id and whether it was assigned here: its ``x-request-id`` when it is plain
    printable text, else a new id put in the request's headers, where Ray's request-id middleware
    (inside this one) and the canary's session key take it, so every layer names the same id."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != REQUEST_ID]
    given = next((v for k, v in scope["headers"] if k.lower() == REQUEST_ID), b"")
    text = given.decode("latin-1")
    if _ID_TEXT.match(text):
        return text, False
    request_id = uuid.uuid4().hex
    scope["headers"] = [*headers, (REQUEST_ID, request_id.encode())]
    return request_id, True


def request_id_of(scope) -> str | None:
    """The ``x-request-id`` :class:`GatewayMiddleware` made sure the request carries."""
    return next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == REQUEST_ID), None)


def cause_of(exc: BaseException) -> BaseException:
    """The replica's own exception when Ray re-raised it as ``RayTaskError(<cause class>)``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    return f"invalid request: {first.get('msg', 'validation error')} at {'.'.join(map(str, first.get('loc', ())))}"


def _classify(exc: BaseException, request_id: str | None) -> tuple[int, str, Any, str, bool]:
    """(status, type, code, message, worded): ``worded`` when the message was written for clients."""
    if isinstance(exc, ServingError):  # the gateway's own: every status but a bare 500 is worded
        return exc.status_code, exc.error_type, exc.code, str(exc), exc.status_code != 500
    if isinstance(exc, OpenAIHTTPException):
        return exc.status_code, exc.type, exc.status_code, exc.message, exc.status_code < 500
    if isinstance(exc, RequestValidationError):
        return 400, "invalid_request_error", "invalid_parameter", _validation_message(exc), True
    if isinstance(exc, HTTPException):
        return exc.status_code, "invalid_request_error", exc.status_code, str(exc.detail), exc.status_code < 500
    # Anything else: the status Ray gives it (vLLM's client errors and pydantic's are 400s).
    status = error_status(exc, request_id)
    return status, "invalid_request_error", status, str(exc)[:500], status < 500


def public_error(exc: BaseException, request_id: str | None) -> tuple[int, dict]:
    """The status and ``{"error": {"message", "type", "code"}}`` a client gets for ``exc``.

    A message written for clients keeps its words, less any ``s3://`` location; any other 5xx is
    ``internal error; request id X`` (the exception is logged under that id)."""
    exc = cause_of(exc)
    status, type_, code, message, worded = _classify(exc, request_id)
    if worded:
        message = _STORE_LOCATION.sub("", message)
    else:
        log.error("request %s failed (%s): %s: %s", request_id, status, type(exc).__name__, message,
                  exc_info=exc if not isinstance(exc, (OpenAIHTTPException, HTTPException)) else None)
        message, type_, code = f"internal error; request id {request_id}", "internal_error", "internal_error"
    return status, {"error": {"message": message, "type": type_, "code": code}}


# Seconds a client should wait before retrying an outage's 503 (the adapter store, a lost replica: both
# recover by themselves within seconds; the limit store's 503 carries its own back-off).
RETRY_AFTER_S = {"adapter_store_unavailable": 5, "replica_unavailable": 2}


def retry_after(body: dict) -> dict[str, str]:
    """The ``Retry-After`` header an error body calls for, if any."""
    seconds = RETRY_AFTER_S.get(body["error"].get("code"))
    return {"Retry-After": str(seconds)} if seconds else {}


async def send_error(send, exc: BaseException, request_id: str | None) -> None:
    """Answer an ASGI request with :func:`public_error` of ``exc``."""
    status, body = public_error(exc, request_id)
    data = json.dumps(body).encode()
    extra = [(k.lower().encode(), v.encode()) for k, v in retry_after(body).items()]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *extra]})
    await send({"type": "http.response.body", "body": data})


# Engine routes whose JSON vLLM's request models read before they check its types (a number where
# they iterate is a TypeError, which would be a 500): the raw body is checked first.
_ENGINE_BODIES = frozenset({"/v1/chat/completions", "/v1/completions"})


async def _checked_body(receive):
    """Read the whole body (already bounded by ``receive``), refuse JSON of the wrong types with a
    400 naming the field (``request_checks.check_json_types``), and replay the body to the app."""
    from serving.ingress.request_checks import check_json_types

    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return _replay([message], receive)
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None  # not JSON: the route's own parser answers it
    check_json_types(parsed)
    return _replay([{"type": "http.request", "body": body, "more_body": False}], receive)


def _replay(messages, then):
    """A receive that gives ``messages`` first, then the connection's own (a stream listens there for
    the client going away)."""
    pending = list(messages)

    async def receive():
        return pending.pop(0) if pending else await then()
    return receive


class GatewayMiddleware:
    """Outermost middleware: request id, body-size limit, request count and latency, the
    ``Server-Timing`` header (the request's :class:`~serving.ingress.server_timing.RequestTiming`,
    made here), and the OpenAI-shaped answer to any error raised before the response started
    (keys: ``serving.auth.middleware``, inside it)."""

    def __init__(self, app, *, max_body_bytes: int, max_upload_bytes: int | None = None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes or max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # The header's clock starts first and the response start is read before the header is made,
        # so the header's `total` always spans the `response_start` metric's interval: two readings of
        # one interval on one clock, which tests compare to catch a header that leaves time out.
        timing = RequestTiming()
        start, state = time.perf_counter(), {"status": 500, "started": False}
        timing_token = TIMING.set(timing)
        limit = self.max_upload_bytes if _UPLOAD.match(scope["path"]) else self.max_body_bytes
        request_id, assigned = ensure_request_id(scope)

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                state["response_start"] = time.perf_counter()
                state["status"], state["started"] = message["status"], True
                extra = [(TIMING_HEADER, timing.header())]
                if assigned:  # a request-id header that came in is echoed by Ray's server around the app
                    extra.append((REQUEST_ID, request_id.encode()))
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
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
            if _CONTROL.search(scope["path"]):
                raise BadRequest(f"invalid request path {scope['path']!r}: control characters are not allowed")
            if scope["method"] == "POST" and scope["path"] in _ENGINE_BODIES:
                await self.app(scope, await _checked_body(limited_receive), tracked_send)
            else:
                await self.app(scope, limited_receive, tracked_send)
        except Exception as exc:  # noqa: BLE001 - the last layer that can still answer in OpenAI's shape
            if state["started"]:
                raise
            await send_error(tracked_send, exc, request_id)
        finally:
            TIMING.reset(timing_token)
            route = route_of(scope["path"])
            metric("requests").inc(tags={"route": route, "status": str(state["status"])})
            metric("latency").observe(time.perf_counter() - start, tags={"route": route})
            if "response_start" in state:  # a client that left before the response started has none
                metric("response_start").observe(state["response_start"] - start, tags={"route": route})


class ApplicationErrorMiddleware:
    """Pure-ASGI stand-in for Ray Serve LLM's ``BaseHTTPMiddleware(_handle_application_exceptions)``.

    An exception the handlers did not turn into a response becomes :func:`public_error`'s answer
    (not Ray's JSON error, whose message carries the exception's text); cancellation propagates.
    Pure ASGI, without ``BaseHTTPMiddleware``'s per-request cost: an anyio task group, a memory
    stream the response body is copied through and a second response object. The profile of the embedded replica showed that as its largest
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
            await send_error(send, exc, request_id_of(scope))


def replace_application_error_middleware(app: FastAPI) -> None:
    """Swap Ray's ``BaseHTTPMiddleware`` error wrapper for :class:`ApplicationErrorMiddleware`
    (same place in the stack). If a Ray version adds none, the app is left as it is."""
    for i, m in enumerate(app.user_middleware):
        dispatch = getattr(m.kwargs.get("dispatch"), "__name__", "")
        if m.cls is BaseHTTPMiddleware and dispatch == "_handle_application_exceptions":
            app.user_middleware[i] = type(m)(ApplicationErrorMiddleware)
            return
    log.warning("Ray's application error middleware not found; the ingress app keeps its middleware as is")


__all__ = ["ApplicationErrorMiddleware", "GatewayMiddleware", "cause_of", "ensure_request_id", "public_error",
           "replace_application_error_middleware", "request_id_of", "send_error"]
