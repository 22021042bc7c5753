"""The key gate: every request's key, limits and usage (pure ASGI, inside ``GatewayMiddleware``).

For each HTTP request but the probes (``/health``, ``/ready``), with auth on:

1. the bearer token is looked up (``serving.auth.keys``): missing or unknown is 401;
2. the key's limits are applied (``serving.auth.key_limits``): over one is 429 with ``Retry-After``;
   every response of a limited key carries OpenAI's ``x-ratelimit-*`` headers;
3. the request runs with the key as :data:`serving.auth.caller.CALLER`: the ingress answers a model
   outside the key's scope with OpenAI's 404 and lists only the models in it, the management
   routes check the key's role (403);
4. when it has ended, its tokens (read from the response's usage) are charged to the key's token
   limit and its usage recorded (``serving.auth.usage``).

``POST /v1/episodes`` takes no request slot and records no usage of its own: the episode's model
calls come back through this gate with the same key (``evaluation.api``), and each of those counts.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from serving.auth.caller import CALLER, Caller
from serving.auth.key_limits import Decision, make_limiter
from serving.auth.keys import KeyRing, Principal
from serving.auth.usage import NO_MODEL, UsageScanner, increments, make_usage, record_metrics
from serving.config import AuthSpec
from serving.errors import (
    LimitStoreUnavailable,
    RateLimited,
    ServingError,
    TokenRateLimited,
    Unauthorized,
    send_openai_error,
)

log = logging.getLogger(__name__)

OPEN_PATHS = ("/health", "/ready")  # probes need no key
UNMETERED = ("/v1/episodes",)  # its model calls pass the gate themselves
TOKEN_ROUTES = ("/v1/chat/completions", "/v1/completions")


class Gate:
    """A replica's keys, limiter and usage counters for one :class:`AuthSpec`.

    The FastAPI app (and this object with it) is pickled to every replica; the parts that hold
    locks and connections are built there on first use."""

    def __init__(self, spec: AuthSpec):
        self.spec = spec
        self._parts: tuple | None = None

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "_parts": None}

    def _built(self) -> tuple:
        if self._parts is None:
            limiter = make_limiter(self.spec)
            self._parts = (KeyRing(self.spec), limiter, make_usage(self.spec, limiter))
        return self._parts

    @property
    def keys(self) -> KeyRing:
        return self._built()[0]

    @property
    def limiter(self):
        return self._built()[1]

    @property
    def usage(self):
        return self._built()[2]

    async def record(self, principal: Principal, model: str, status: int, usage: tuple[int, int] | None) -> None:
        record_metrics(principal.name, model, status, usage)
        await self.usage.add(principal.name, model, increments(status, usage))


def route_path(scope) -> str:
    """The request's path within the app (an app mounted under a prefix sees the prefix in ``root_path``)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] or "/" if root and path.startswith(root) else path


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class GateMiddleware:
    """Pure-ASGI middleware running :class:`Gate` around every request (streams pass through)."""

    def __init__(self, app, *, gate: Gate):
        self.app, self.gate = app, gate

    async def __call__(self, scope, receive, send):
        path = route_path(scope)
        if scope["type"] != "http" or not self.gate.spec.enabled or path in OPEN_PATHS:
            return await self.app(scope, receive, send)
        principal = self.gate.keys.lookup(bearer(scope["headers"]))
        if principal is None:
            refused = Unauthorized("missing or invalid API key (send 'Authorization: Bearer <key>')")
            return await send_openai_error(send, refused)
        # Extension routes (evaluation.api) read the caller's scope from the request state.
        scope.setdefault("state", {})["model_visible"] = principal.may_call
        if path.startswith(UNMETERED):
            token = CALLER.set(Caller(principal))
            try:
                return await self.app(scope, receive, send)
            finally:
                CALLER.reset(token)
        await self._metered(principal, path, scope, receive, send)

    async def _admit(self, principal: Principal, request_id: str, send) -> Decision | None:
        """The limiter's decision, or None when the key has no limits; a refusal is answered here."""
        if not principal.limited:
            return None
        decision = await self.gate.limiter.admit(principal.name, principal.limits, request_id)
        if not decision.admitted:
            cls = TokenRateLimited if decision.refused == "tokens" else RateLimited
            window_s = principal.limits.window_s or self.gate.spec.limit_window_s
            await send_openai_error(send, cls(decision.message(principal.name, window_s)), decision.headers())
        return decision

    async def _metered(self, principal: Principal, path: str, scope, receive, send) -> None:
        request_id = uuid.uuid4().hex
        try:
            decision = await self._admit(principal, request_id, send)
        except LimitStoreUnavailable as exc:  # the store is down and the config fails closed
            await send_openai_error(send, exc)
            return await self.gate.record(principal, NO_MODEL, exc.status_code, None)
        if decision is not None and not decision.admitted:
            return await self.gate.record(principal, NO_MODEL, 429, None)
        caller, scanner = Caller(principal), UsageScanner()
        extra = decision.headers() if decision is not None else []
        scan = path in TOKEN_ROUTES
        state = {"status": 500, "started": False}

        async def gated_send(message):
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
                if extra:
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
            elif scan and message["type"] == "http.response.body":
                body = message.get("body", b"")
                kept = scanner.feed(body, caller.strip_usage)
                if kept is not body:
                    message = {**message, "body": kept}
            await send(message)

        token = CALLER.set(caller)
        try:
            await self.app(scope, receive, gated_send)
        except ServingError as exc:
            if state["started"]:
                raise
            state["status"] = exc.status_code
            await send_openai_error(send, exc, extra)
        except asyncio.CancelledError:
            if not state["started"]:
                state["status"] = 499  # the client went away
            raise
        finally:
            CALLER.reset(token)
            usage = scanner.usage
            if decision is not None:
                await self.gate.limiter.finish(principal.name, principal.limits, request_id,
                                               sum(usage) if usage else 0, decision)
            await self.gate.record(principal, caller.model or NO_MODEL, state["status"], usage)


__all__ = ["OPEN_PATHS", "Gate", "GateMiddleware", "bearer"]
