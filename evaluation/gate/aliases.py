"""Where the gate asks about a name and records its decision: the adapter store's gate methods
(``serving.adapters``: ``gate_target``, ``decide``), reached through a gateway's management routes
(:class:`GatewayAliases`, what ``maze-eval gate`` uses: the caller's key must be one that may promote
the name) or, in a library or a test holding the store itself, directly (:class:`StoreAliases`).

Both answer the same: :meth:`target` a :class:`~serving.adapters.GateTarget` (or the store's refusal:
a version whose parity record is missing or does not pass is refused before anything is played), and
:meth:`decide` the history entry the decision made, as a dict (an ``AliasMove``'s fields).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol

import httpx

from evaluation.errors import EndpointUnavailable
from serving.adapters import AdapterStore, GateEvidence, GatePolicy, GateTarget
from serving.errors import (
    AdapterNotFound,
    AdapterRefConflict,
    BadRequest,
    Forbidden,
    InvalidCanary,
    ParityFailed,
    ParityNotCompared,
    ParityNotMeasured,
    ParityNotPassed,
    ServingError,
    Unauthorized,
)

# The gateway's error codes and statuses -> the serving errors they stand for (exit codes follow).
_BY_CODE: dict[str, type[ServingError]] = {
    "adapter_parity_failed": ParityFailed, "adapter_parity_not_compared": ParityNotCompared,
    "adapter_parity_not_measured": ParityNotMeasured, "adapter_parity_not_passed": ParityNotPassed,
    "adapter_ref_conflict": AdapterRefConflict, "invalid_canary": InvalidCanary}
_BY_STATUS: dict[int, type[ServingError]] = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: AdapterNotFound,
                                             409: AdapterRefConflict, 422: BadRequest}


class GateAliases(Protocol):
    """The two questions the gate puts to the adapter store."""

    async def target(self, name: str, version: str) -> GateTarget: ...

    async def decide(self, name: str, version: str, evidence: GateEvidence) -> dict[str, Any]: ...


class StoreAliases:
    """The adapter store itself (its S3 or folder), for callers that hold it."""

    def __init__(self, store: AdapterStore):
        self.store = store

    async def target(self, name: str, version: str) -> GateTarget:
        return await asyncio.to_thread(self.store.gate_target, name, version)

    async def decide(self, name: str, version: str, evidence: GateEvidence) -> dict[str, Any]:
        _, move = await asyncio.to_thread(self.store.decide, name, version, evidence)
        return dataclasses.asdict(move)


class GatewayAliases:
    """A gateway's management routes (``GET``/``POST /v1/adapters/{name}/gate``), with the run's key."""

    def __init__(self, endpoint: str, api_key: str, *, timeout_s: float = 60.0,
                 client: httpx.AsyncClient | None = None):
        self.root = endpoint.rstrip("/").removesuffix("/v1")
        self.api_key, self.timeout_s, self.client = api_key, timeout_s, client

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            if self.client is not None:
                resp = await self.client.request(method, self.root + path, headers=headers, **kwargs)
            else:
                async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                    resp = await client.request(method, self.root + path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise EndpointUnavailable(f"cannot reach {self.root}: {type(exc).__name__}: {exc}") from None
        if resp.status_code >= 400:
            raise _error_of(resp)
        return resp.json()

    async def target(self, name: str, version: str) -> GateTarget:
        doc = await self._call("GET", f"/v1/adapters/{name}/gate", params={"version": version})
        return GateTarget(name=doc["name"], version=doc["version"], current=doc["current"], base=doc.get("base"),
                          parity=doc.get("parity", "-"), policy=GatePolicy.model_validate(doc["policy"]))

    async def decide(self, name: str, version: str, evidence: GateEvidence) -> dict[str, Any]:
        body = {"version": version, "evidence": dataclasses.asdict(evidence)}
        return (await self._call("POST", f"/v1/adapters/{name}/gate", json=body))["move"]


def _error_of(resp: httpx.Response) -> Exception:
    """The error an answer of the management routes stands for: the gateway's own (by its code, else
    its status), or the endpoint unavailable (a 5xx, or a server without the routes' error shape)."""
    try:
        err = resp.json()["error"]
        message, code = str(err["message"]), err.get("code")
    except (ValueError, KeyError, TypeError):
        message, code = resp.text[:300] or resp.reason_phrase, None
    if resp.status_code >= 500:
        return EndpointUnavailable(f"the gateway answered {resp.status_code}: {message}")
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(resp.status_code, BadRequest)
    if resp.status_code == 404 and code is None:  # no route: a server other than the gateway
        return EndpointUnavailable(f"{resp.url} answered 404: the endpoint has no adapter management routes "
                                   "(the offline gate needs a maze-gateway)")
    return cls(f"the gateway answered {resp.status_code}: {message}")


__all__ = ["GateAliases", "GatewayAliases", "StoreAliases"]
