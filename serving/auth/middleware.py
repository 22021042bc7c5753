"""The key gate: every request's key, limits and usage (pure ASGI, inside ``GatewayMiddleware``).

For each HTTP request but the probes (``/health``, ``/ready``: no key needed; a valid one runs as
its caller, so ``/ready`` shows its details to an admin key, without limits or usage), with auth on:

1. the bearer token is looked up (``serving.auth.keys``): missing or unknown is 401;
2. the key's limits are applied (``serving.auth.key_limits``): over one is 429 with ``Retry-After``;
   every response of a limited key carries OpenAI's ``x-ratelimit-*`` headers; a shared limit store
   that is down answers 503 ``limit_store_unavailable`` with ``Retry-After`` (the back-off left);
3. the request runs with the key as :data:`serving.auth.caller.CALLER`: the ingress answers a model
   outside the key's scope with OpenAI's 404 and lists only the models in it, the management
   routes check the key's role (403);
4. when it has ended, its tokens (read from the response's usage) are charged to the key's token
   limit and its usage recorded (``serving.auth.usage``); a stream that ends early (the client went
   away, the request was cancelled) is charged what it had used by then, and a request left before
   its response started is charged its prompt (counted by the ingress, ``Caller.prompt_count``).

``POST /v1/episodes`` holds a ``concurrent`` slot and an episode slot of its key for the episode's
whole life (``key_limits.episode_cap``; over either, 429): a key cannot park more server-side
episodes than its limits allow. The episode's model calls come back through this gate with the same
key (``evaluation.api``, in-process) and run within it: each counts against the request and token
limits and is recorded, but takes no slot of its own. They are known by :data:`IN_EPISODE`, a context
variable the in-process calls inherit from the request that plays the episode, which no request
from outside can set (a header could be forged).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import uuid

from serving.auth.caller import CALLER, Caller
from serving.auth.key_limits import Decision, make_limiter, meters_episodes
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
EPISODES = ("/v1/episodes",)  # holds a slot for its life; its model calls pass the gate themselves
TOKEN_ROUTES = ("/v1/chat/completions", "/v1/completions")
STORE_DOWN_CODE = b'"limit_store_unavailable"'
# (key name, episode id) of the episode whose model calls run in this context.
IN_EPISODE: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("maze_in_episode", default=None)


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
        if scope["type"] != "http" or not self.gate.spec.enabled:
            return await self.app(scope, receive, send)
        if path in OPEN_PATHS:
            return await self._probe(scope, receive, send)
        principal = self.gate.keys.lookup(bearer(scope["headers"]))
        if principal is None:
            refused = Unauthorized("missing or invalid API key (send 'Authorization: Bearer <key>')")
            return await send_openai_error(send, refused)
        # Extension routes (evaluation.api) read the caller's scope from the request state.
        scope.setdefault("state", {})["model_visible"] = principal.may_call
        if path.startswith(EPISODES):
            return await self._episode(principal, scope, receive, send)
        await self._metered(principal, path, scope, receive, send)

    async def _probe(self, scope, receive, send) -> None:
        """A probe: answered with or without a key; a valid key runs as its caller (no limits, no
        usage). A missing, unknown or unreadable key is no caller, never an error: probes answer."""
        try:
            principal = self.gate.keys.lookup(bearer(scope["headers"]))
        except ServingError:  # the key source is refused (KeysUnavailable): answer as to no key
            principal = None
        if principal is None:
            return await self.app(scope, receive, send)
        token = CALLER.set(Caller(principal))
        try:
            return await self.app(scope, receive, send)
        finally:
            CALLER.reset(token)

    async def _admit(self, principal: Principal, request_id: str, send, *, episode: bool = False,
                     within: str | None = None) -> tuple[Decision | None, int | None]:
        """The limiter's decision (None: the key has nothing to meter here) and, when the request
        is refused, the status it was answered with here (429 over a limit, 503 store down)."""
        limits = principal.limits
        if not (meters_episodes(limits) if episode else principal.limited):
            return None, None
        try:
            decision = await self.gate.limiter.admit(principal.name, limits, request_id, episode=episode,
                                                     within=within)
        except LimitStoreUnavailable as exc:  # the store is down and the config fails closed
            await send_openai_error(send, exc, [self._store_retry_after()])
            return None, exc.status_code
        if not decision.admitted:
            cls = TokenRateLimited if decision.refused == "tokens" else RateLimited
            window_s = limits.window_s or self.gate.spec.limit_window_s
            await send_openai_error(send, cls(decision.message(principal.name, window_s)), decision.headers())
            return decision, 429
        return decision, None

    def _store_retry_after(self) -> tuple[bytes, bytes]:
        """``Retry-After`` for a store outage: when this replica tries the store again."""
        return b"retry-after", str(max(1, math.ceil(self.gate.limiter.down_for_s()))).encode()

    async def _episode(self, principal: Principal, scope, receive, send) -> None:
        """A server-side episode: a slot of its key for its whole life, its model calls within it."""
        episode_id = uuid.uuid4().hex
        decision, refused = await self._admit(principal, episode_id, send, episode=True)
        if refused is not None:
            return await self.gate.record(principal, NO_MODEL, refused, None)
        extra = decision.headers() if decision is not None else []

        async def episode_send(message):
            if extra and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        caller_token = CALLER.set(Caller(principal))
        episode_token = IN_EPISODE.set((principal.name, episode_id))
        try:
            await self.app(scope, receive, episode_send)
        finally:
            IN_EPISODE.reset(episode_token)
            CALLER.reset(caller_token)
            if decision is not None:  # the episode's own usage is its calls': nothing to charge here
                await self.gate.limiter.finish(principal.name, principal.limits, episode_id, 0, decision)

    @staticmethod
    def _within(principal: Principal) -> str | None:
        """The episode this request is a model call of (an in-process call of the same key), else None."""
        held = IN_EPISODE.get()
        return held[1] if held is not None and held[0] == principal.name else None

    def _sender(self, send, state: dict, extra: list, scanner: UsageScanner | None, caller: Caller):
        """``send`` with the key's headers added, the stream's usage read (and taken out where the
        gateway asked for it), and ``Retry-After`` on a route's 503 for the limit store."""
        # The start is held until the first body message: its usage is read before anything is sent,
        # so an answer whose client has gone (the send fails) is still charged; and a 503's body says
        # whether the limit store is why.
        held = []

        async def gated_send(message):
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
                if extra:
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
                held.append(message)
                return
            if message["type"] == "http.response.body":
                body = message.get("body", b"")
                if scanner is not None:
                    kept = scanner.feed(body, caller.hide_chunk_usage, caller.hide_final_usage)
                    if kept is not body:
                        message = {**message, "body": kept}
                if held:
                    start = held.pop()
                    await send(self._store_down_start(start, body) if start["status"] == 503 else start)
            await send(message)

        return gated_send

    def _store_down_start(self, start: dict, body: bytes) -> dict:
        # The route's own 503 (GET /v1/usage with the store down) leaves the app's error handler
        # without headers: the gate, which knows the back-off, adds Retry-After.
        headers = list(start.get("headers", ()))
        if STORE_DOWN_CODE in body and not any(k.lower() == b"retry-after" for k, _ in headers):
            return {**start, "headers": [*headers, self._store_retry_after()]}
        return start

    @staticmethod
    async def _prompt_counted(caller: Caller) -> int | None:
        """The prompt tokens the ingress counted for a request left before its response started
        (None: nothing counted)."""
        if caller.prompt_count is None:
            return None
        try:
            return await caller.prompt_count
        except asyncio.CancelledError:
            if caller.prompt_count.cancelled():  # the count was stopped, not this request's end
                return None
            raise

    async def _metered(self, principal: Principal, path: str, scope, receive, send) -> None:
        request_id = uuid.uuid4().hex
        decision, refused = await self._admit(principal, request_id, send, within=self._within(principal))
        if refused is not None:
            return await self.gate.record(principal, NO_MODEL, refused, None)
        caller, scanner = Caller(principal), UsageScanner()
        extra = decision.headers() if decision is not None else []
        state = {"status": 500, "started": False}
        gated_send = self._sender(send, state, extra, scanner if path in TOKEN_ROUTES else None, caller)
        token = CALLER.set(caller)
        try:
            await self.app(scope, receive, gated_send)
        except ServingError as exc:
            if state["started"]:
                raise
            state["status"] = exc.status_code
            store_down = [self._store_retry_after()] if isinstance(exc, LimitStoreUnavailable) else []
            await send_openai_error(send, exc, [*extra, *store_down])
        except asyncio.CancelledError:
            if not state["started"]:
                state["status"] = 499  # the client went away
            raise
        finally:
            CALLER.reset(token)
            # A request cut off early: what it had used by then (its prompt, counted, when nothing came).
            usage = scanner.used(await self._prompt_counted(caller))
            if decision is not None:
                await self.gate.limiter.finish(principal.name, principal.limits, request_id,
                                               sum(usage) if usage else 0, decision)
            await self.gate.record(principal, caller.model or NO_MODEL, state["status"], usage)


__all__ = ["IN_EPISODE", "OPEN_PATHS", "Gate", "GateMiddleware", "bearer"]
