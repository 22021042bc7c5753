"""The live guard's routes (``serving.guard``), beside the management routes.

* ``POST /v1/outcomes`` (``{"session", "model", "solved", "duration_s", "error", "latency_s"}``): one session's
  outcome, from any key that may call ``model``. ``session`` is the key the canary split used (the
  ``X-Session-Id`` header the agent's runner sends once per episode), ``model`` the versioned id the
  gateway answered with (``base:name@version``). The answer says whether it counted, and why not
  (no canary runs, the split sends that session elsewhere, the session reported already), and the
  decision it led to. The agent's runner sends one per episode when the gateway named the version
  that served it; a server-side episode (``POST /v1/episodes``) reports through the same route.
* ``GET /v1/adapters/{name}/guard``: the name's guard policy (``adapters.guard``) and the ledger
  of its current or last canary run (pairs, e-values, per-arm counts, the verdict), for a key
  that may see the name.

A report is trusted as far as its key is: any key that may call a model can speak for its
sessions, as it can already shape them by what it sends.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serving.auth import visible
from serving.config import ServingConfig
from serving.errors import ModelAccessDenied
from serving.guard import CanaryGuard, Outcome
from serving.ingress.management import config_of, store_of, visible_name

router = APIRouter(tags=["guard"])
_GUARDS: dict[str, CanaryGuard] = {}


class OutcomeBody(BaseModel):
    """One session's outcome."""

    model_config = ConfigDict(extra="forbid")

    session: str = Field(min_length=1, max_length=256, description="the session key the canary split used "
                                                                   "(X-Session-Id)")
    model: str = Field(min_length=1, max_length=512, description="the model the gateway answered with: "
                                                                 "base:name@version")
    solved: bool = Field(description="whether the session's maze was solved")
    duration_s: float = Field(ge=0, le=86400, description="how long the session ran, in seconds: it is paired with "
                                                         "sessions that started when it did")
    error: bool = Field(False, description="the session ended on an endpoint error (then `solved` is not judged)")
    latency_s: float | None = Field(None, ge=0, le=3600, description="the session's mean turn latency in seconds")

    @field_validator("latency_s", "duration_s")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number of seconds")
        return v


def _guard(cfg: ServingConfig) -> CanaryGuard:
    key = cfg.adapters.model_dump_json()
    if key not in _GUARDS:
        _GUARDS[key] = CanaryGuard(store_of(cfg), cfg.adapters.guard)
    return _GUARDS[key]


@router.post("/v1/outcomes")
async def report_outcome(request: Request, body: OutcomeBody) -> dict[str, Any]:
    if not visible(body.model):  # a model outside the key's scope answers as one that does not exist
        raise ModelAccessDenied.of(body.model)
    guard = _guard(config_of(request))
    outcome = Outcome(solved=body.solved, duration_s=body.duration_s, error=body.error, latency_s=body.latency_s)
    counted = await asyncio.to_thread(guard.report, body.model, body.session, outcome)
    return {"object": "outcome", "counted": counted.counted, "reason": counted.reason, "arm": counted.arm,
            "decision": counted.decision}


@router.get("/v1/adapters/{name}/guard")
async def guard_state(request: Request, name: str) -> dict[str, Any]:
    cfg = config_of(request)
    return await asyncio.to_thread(_guard(cfg).state, visible_name(cfg, name))


__all__ = ["router"]
