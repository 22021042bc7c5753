"""Evaluation routes a gateway mounts next to the OpenAI routes (same app, same auth).

* ``POST /v1/episodes`` plays one episode server-side against the gateway's own OpenAI routes
  and returns the trajectory (an :class:`~agent.runner.records.EpisodeRecord`). Those routes are called
  in-process, through the app that received the request (never over the network): nothing in
  the request (``Host`` header, body) decides where the gateway sends requests, and the caller's
  key goes nowhere but the same app's auth check.
* ``GET /v1/leaderboard`` returns the leaderboard as JSON.

With API keys on, both follow the caller's model scope (``model_visible`` in the request state,
left there by the gateway's key gate): an episode of a model outside it is OpenAI's 404, and the
leaderboard shows only the rows of models in it. The gate also holds one of the key's ``concurrent``
slots and an episode slot (``limits.episodes``) for the whole episode, refusing one over them with
429: the episode's own model calls, which reach the gate in the context of this request, run in
that slot one at a time (``concurrency=1``) and count against the key's request and token limits.

The gateway loads this router by import path (``ServingConfig.extensions``), so ``serving``
never imports ``evaluation``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import httpx
from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.env import DEFAULT_ENV_ID
from agent.runner import (
    EndpointConfig,
    EpisodeSpec,
    OpenAIPolicy,
    RetryPolicy,
    RunnerConfig,
    SamplingParams,
    run_episodes_async,
)
from evaluation.leaderboard import leaderboard
from evaluation.store import Store, resolve_db_url
from serving.errors import ModelAccessDenied

router = APIRouter(tags=["evaluation"])
MAX_SEED = 2**63 - 1
# A name for the in-process client's URLs only: its transport is the app itself, so nothing
# resolves or connects to this host.
INTERNAL_BASE_URL = "http://gateway.internal/v1"


class EpisodeRequest(BaseModel):
    """One episode to play on the server."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="'<base>' or '<base>:<adapter>'")
    env_id: str = Field(DEFAULT_ENV_ID, description="maze variant")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="maze seed")
    temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature")
    max_tokens: int = Field(32, ge=1, le=512, description="completion tokens per turn")
    max_turns: int | None = Field(None, ge=1, le=200, description="turn limit; None: the variant's")
    protocol: str = Field("tuple", description="prompt protocol")
    history: str = Field("full", description="'full' or 'window:K'")


def in_process_client(app: Any, api_key: str, timeout_s: float):
    """An OpenAI client whose transport is ``app`` itself (ASGI, same process, no socket).

    The episode's requests go through the same middleware (auth, limits, metrics) and routes as
    a client's, at a fixed internal URL: no part of the incoming request picks the destination.
    """
    from openai import AsyncOpenAI

    async def isolated(scope, receive, send):
        # Its own task, so context variables the app sets per request (Serve's request context, the
        # resolved model) stay with that request, as for a request that came over the network.
        await asyncio.create_task(app(scope, receive, send))

    transport = httpx.ASGITransport(app=isolated, raise_app_exceptions=False)
    http = httpx.AsyncClient(transport=transport, base_url=INTERNAL_BASE_URL, timeout=timeout_s)
    return AsyncOpenAI(base_url=INTERNAL_BASE_URL, api_key=api_key, http_client=http, max_retries=0)


def _visible(request: Request):
    """The caller's model scope: the gateway's key gate leaves ``model_visible(model) -> bool`` in
    the request state when keys are on (absent: every model is visible)."""
    return getattr(request.state, "model_visible", None) or (lambda model: True)


@router.post("/v1/episodes")
async def play_episode(body: EpisodeRequest, request: Request) -> dict[str, Any]:
    if not _visible(request)(body.model):  # the episode's own calls would be refused the same way
        raise ModelAccessDenied.of(body.model)
    try:
        cfg = RunnerConfig(env_id=body.env_id, max_turns=body.max_turns, protocol=body.protocol, history=body.history,
                           sampling=SamplingParams(temperature=body.temperature, max_tokens=body.max_tokens),
                           retry=RetryPolicy(max_attempts=2), concurrency=1)  # one call in the slot it holds
    except ValidationError as exc:
        raise HTTPException(400, "; ".join(e["msg"] for e in exc.errors())) from None
    auth = request.headers.get("authorization", "")
    api_key = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else "EMPTY"
    endpoint = EndpointConfig(base_url=INTERNAL_BASE_URL, api_key=api_key, model=body.model)
    policy = OpenAIPolicy(endpoint, client=in_process_client(request.app, api_key, endpoint.timeout_s))
    try:
        (record,) = await run_episodes_async(policy, [EpisodeSpec(seed=body.seed)], cfg)
    finally:
        await policy.aclose()
    if not record.scored and record.num_turns == 0 and "HTTP 404" in (record.error or ""):
        raise HTTPException(404, f"model {body.model!r} not found: {record.error}")
    return record.model_dump(mode="json")


@functools.cache
def _store(url: str) -> Store:
    """The results store at ``url``, built once per process (its engine pools connections for
    every request after the first)."""
    return Store(url)


@router.get("/v1/leaderboard")
async def get_leaderboard(request: Request, env: str | None = None) -> dict[str, Any]:
    visible = _visible(request)  # a key sees the rows of the models it may call

    def read() -> list[dict[str, Any]]:
        # The URL is read per request (MAZE_DB or the default file), the store behind it kept.
        store = _store(resolve_db_url(None))
        return [{"model": r.model, **r.model_dump(mode="json")} for r in leaderboard(store, env) if visible(r.model)]

    return {"object": "list", "data": await asyncio.to_thread(read)}
