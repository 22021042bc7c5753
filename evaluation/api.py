"""Evaluation routes a gateway mounts next to the OpenAI routes (same app, same auth).

* ``POST /v1/episodes`` plays one episode server-side against the gateway's own OpenAI routes
  and returns the trajectory (an :class:`~agent.records.EpisodeRecord`).
* ``GET /v1/leaderboard`` returns the leaderboard as JSON.

The gateway loads this router by import path (``ServingConfig.extensions``), so ``serving``
never imports ``evaluation``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.config import EndpointConfig, RetryPolicy, RunnerConfig, SamplingParams
from agent.registration import DEFAULT_ENV_ID
from agent.runner import EpisodeSpec, run_endpoint_async
from evaluation.leaderboard import leaderboard
from evaluation.store import Store

router = APIRouter(tags=["evaluation"])
MAX_SEED = 2**63 - 1


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


def _self_url(request: Request) -> str:
    # The gateway calls its own OpenAI routes on the address the client reached it at.
    return str(request.base_url).rstrip("/") + "/v1"


@router.post("/v1/episodes")
async def play_episode(body: EpisodeRequest, request: Request) -> dict[str, Any]:
    try:
        cfg = RunnerConfig(env_id=body.env_id, max_turns=body.max_turns, protocol=body.protocol, history=body.history,
                           sampling=SamplingParams(temperature=body.temperature, max_tokens=body.max_tokens),
                           retry=RetryPolicy(max_attempts=2), concurrency=1)
    except ValidationError as exc:
        raise HTTPException(400, "; ".join(e["msg"] for e in exc.errors())) from None
    auth = request.headers.get("authorization", "")
    api_key = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else "EMPTY"
    endpoint = EndpointConfig(base_url=_self_url(request), api_key=api_key, model=body.model)
    (record,) = await run_endpoint_async(endpoint, [EpisodeSpec(seed=body.seed)], cfg)
    if record.stop_reason.value == "error" and record.num_turns == 0 and "HTTP 404" in (record.error or ""):
        raise HTTPException(404, f"model {body.model!r} not found: {record.error}")
    return record.model_dump(mode="json")


@router.get("/v1/leaderboard")
async def get_leaderboard(env: str | None = None) -> dict[str, Any]:
    def read() -> list[dict[str, Any]]:
        store = Store()
        try:
            return [{"model": r.model, **r.model_dump(mode="json")} for r in leaderboard(store, env)]
        finally:
            store.close()

    return {"object": "list", "data": await asyncio.to_thread(read)}
