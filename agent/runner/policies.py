"""Policies: what produces the model's reply from the messages of a turn.

:class:`OpenAIPolicy` talks to any OpenAI-compatible endpoint with the official ``AsyncOpenAI``
client; :class:`CallablePolicy` wraps a plain Python function (sync or async). Errors are
translated once, here, into :class:`~agent.errors.PolicyError` with a ``transient`` flag the
runner's retry loop reads.

The runner names each episode in :data:`EPISODE_SESSION`; :class:`OpenAIPolicy` sends it as the
``X-Session-Id`` header, so a gateway that splits a name between two versions (a canary) keeps
one episode on one version, and an OpenAI-compatible server that ignores the header is unaffected.
When such a gateway named the version that served an episode, the runner reports the episode's
outcome back under the same session (:meth:`OpenAIPolicy.report_outcome`), so the gateway can judge
its canary on live sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agent.errors import PolicyError
from agent.maze import AGENT_RGB, CELL_PX, GOAL_RGB, WALL_RGB, decode_data_url, shortest_path
from agent.protocol import Message, get_protocol
from agent.runner.config import EndpointConfig, SamplingParams

# 408/409/429 and 5xx may pass; other statuses are the request's fault and will not.
TRANSIENT_STATUSES = frozenset({408, 409, 429})
READY_POLL_S = 1.0  # how often a waiting run asks the endpoint's /ready
SESSION_HEADER = "X-Session-Id"  # Ray Serve's session header; the gateway's canary split keys on it
# The episode the current turn belongs to (set by the runner per episode; each episode runs in its own task).
EPISODE_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("maze_episode_session", default=None)


@dataclass
class PolicyReply:
    """A reply with the token usage the server reported (None when unknown)."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None  # the model the server reports it served (the gateway adds @version)


@runtime_checkable
class Policy(Protocol):
    """Anything that turns the messages of a turn into a reply."""

    label: str

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> PolicyReply: ...


class OpenAIPolicy:
    """Chat completions on an OpenAI-compatible endpoint (``model`` may be ``base:adapter``)."""

    def __init__(self, endpoint: EndpointConfig, client: Any | None = None):
        import httpx
        from openai import AsyncOpenAI

        self.endpoint = endpoint
        self.label = endpoint.model
        self._ready_poll: asyncio.Future | None = None
        # Retries are the runner's (counted and budgeted per episode), so the client makes none.
        self.client = client or AsyncOpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=endpoint.timeout_s, max_retries=0
        )
        # The /ready probe's client, built here rather than when a run starts waiting: building one
        # loads the CA bundle (CPU work that a loaded machine stretches to seconds) inside the event loop. A
        # plain-HTTP endpoint has no certificate to check, so it skips the bundle.
        self._probe = httpx.AsyncClient(timeout=READY_POLL_S * 5,
                                        verify=not endpoint.base_url.startswith("http://"))

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> PolicyReply:
        import openai
        from openai.types.chat import ChatCompletion

        body: dict[str, Any] = {"model": self.endpoint.model, "messages": messages,
                                "temperature": sampling.temperature, "max_tokens": sampling.max_tokens}
        if sampling.top_p is not None:
            body["top_p"] = sampling.top_p
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        try:
            # The client's generic post: same transport, auth, errors and response model as
            # chat.completions.create, without its recursive walk over the request params, whose
            # cost grows with every image the history holds.
            session = EPISODE_SESSION.get()
            options: Any = {"headers": {SESSION_HEADER: session}} if session else {}
            resp = await self.client.post("/chat/completions", cast_to=ChatCompletion, body=body, options=options)
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise PolicyError(f"{type(exc).__name__}: {exc}", transient=True) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            err = PolicyError(
                f"HTTP {status}: {_error_message(exc)}",
                transient=status in TRANSIENT_STATUSES or status >= 500,
                status_code=status,
            )
            err.retry_after_s = _retry_after(exc)
            raise err from exc
        if not resp.choices:
            raise PolicyError("the endpoint returned no choices", transient=True, status_code=200)
        usage = resp.usage
        return PolicyReply(
            text=resp.choices[0].message.content or "",
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            model=resp.model or None,
        )

    async def report_outcome(self, session: str, record: Any) -> None:
        """Send a finished episode's outcome to the gateway's ``/v1/outcomes`` (``record``: its
        :class:`~agent.runner.records.EpisodeRecord`, whose ``model`` names the version that served).
        Raises the client's errors: the caller decides what a lost report costs."""
        latencies = [t.latency_s for t in record.turns]
        body = {"session": session, "model": record.model, "solved": bool(record.success),
                "error": not record.scored, "latency_s": sum(latencies) / len(latencies) if latencies else None}
        await self.client.post("/outcomes", cast_to=object, body=body)

    async def wait_ready(self, timeout_s: float) -> bool | None:
        """Wait until the endpoint's readiness probe (``/ready`` beside ``/v1``) answers 200: True
        when it did within ``timeout_s``, False when not, None when the endpoint has no probe. The
        episodes of a run waiting at once share one poll."""
        if self._ready_poll is None or self._ready_poll.done():
            self._ready_poll = asyncio.ensure_future(self._poll_ready())
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready_poll), timeout_s)
        except TimeoutError:
            return False

    async def _poll_ready(self) -> bool | None:
        import httpx

        root = self.endpoint.base_url.rstrip("/").removesuffix("/v1")
        while True:
            try:
                status = (await self._probe.get(f"{root}/ready")).status_code
            except httpx.HTTPError:
                status = None
            if status == 200:
                return True
            if status in (404, 405):
                return None
            await asyncio.sleep(READY_POLL_S)

    async def aclose(self) -> None:
        try:
            if self._ready_poll is not None and not self._ready_poll.done():
                self._ready_poll.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._ready_poll  # off the probe's client before it closes
            await self._probe.aclose()
        finally:
            await self.client.close()


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("detail"):
            return str(body["detail"])
    return str(exc)


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return float(headers.get("retry-after")) if headers.get("retry-after") else None
    except ValueError:
        return None


class CallablePolicy:
    """A plain function ``f(messages) -> str`` (or async) used as a policy."""

    def __init__(self, fn: Callable[[list[Message]], str | Awaitable[str]], label: str | None = None):
        self.fn = fn
        self.label = label or getattr(fn, "__name__", "callable")

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> PolicyReply:
        out = self.fn(messages)
        if inspect.isawaitable(out):
            out = await out
        return out if isinstance(out, PolicyReply) else PolicyReply(text=str(out))


def as_policy(policy: Policy | Callable[..., Any]) -> Policy:
    """Accept a :class:`Policy` or a plain callable."""
    if isinstance(policy, (OpenAIPolicy, CallablePolicy, Policy)):
        return policy  # type: ignore[return-value]
    return CallablePolicy(policy)


# -- a policy that reads the image: for examples, scripted servers and tests -----------------
def read_frame(frame: np.ndarray) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """Recover ``(grid, agent, goal)`` from a rendered frame by sampling cell pixels."""
    centre = frame[CELL_PX // 2 :: CELL_PX, CELL_PX // 2 :: CELL_PX]
    corner = frame[1::CELL_PX, 1::CELL_PX]
    grid = (centre == WALL_RGB).all(-1).astype(np.int8)
    agent = tuple(int(v) for v in np.argwhere((centre == AGENT_RGB).all(-1))[0])
    goal = tuple(int(v) for v in np.argwhere((corner == GOAL_RGB).all(-1))[0])
    return grid, agent, goal  # type: ignore[return-value]


def last_image(messages: list[Message]) -> np.ndarray:
    """The most recent image sent in ``messages``."""
    for msg in reversed(messages):
        content = msg.get("content")
        if isinstance(content, list):
            for part in reversed(content):
                if part.get("type") == "image_url":
                    return decode_data_url(part["image_url"]["url"])
    raise ValueError("no image in the messages")


def solver_reply(messages: list[Message], protocol: str = "tuple") -> str:
    """The optimal next action for the maze in the last image, as the protocol's reply text."""
    proto = get_protocol(protocol)
    grid, agent, goal = read_frame(last_image(messages))
    path = shortest_path(grid, agent, goal) or []
    return proto.format_action(("move", path[0]) if path else ("stop", "stop"))


def bfs_policy(protocol: str = "tuple") -> CallablePolicy:
    """A perfect policy that reads each image and follows a shortest path."""
    return CallablePolicy(lambda messages: solver_reply(messages, protocol), label=f"bfs-{protocol}")
