"""The gateway's management routes (``serving.ingress.management``) from the command line.

:class:`GatewayAdapters` has the adapter store's methods (``push``, ``canary``, ``promote``,
``abort_canary``, ``rollback``, ``remove``, ``list``, ``history``, ``parity``, ``verify``), so
``maze-serve adapters --gateway URL`` runs every adapter command through the gateway, where the
caller's API key and role decide (403 otherwise), instead of writing S3 with the caller's own
credentials.
:func:`usage` reads ``GET /v1/usage`` for ``maze-serve usage``. HTTP errors come back as the
serving errors they stand for, so the CLI's exit codes are the same on both paths.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import Any

import httpx

from serving.adapters import (
    CONFIG,
    WEIGHTS,
    AdapterRef,
    AliasMove,
    Canary,
    ParityRecord,
    VerifyReport,
    move_of,
    parity_of,
)
from serving.errors import (
    AdapterExists,
    AdapterIntegrityError,
    AdapterNotFound,
    AdapterRefConflict,
    AdapterStoreUnavailable,
    BadRequest,
    Forbidden,
    NoCanary,
    NoRollbackTarget,
    ParityFailed,
    ParityNotCompared,
    ParityNotMeasured,
    ParityNotPassed,
    RateLimited,
    ServingError,
    Unauthorized,
)

TIMEOUT_S = 600.0  # an upload of a large adapter takes a while
_BY_CODE = {"adapter_not_found": AdapterNotFound, "model_not_found": AdapterNotFound, "adapter_exists": AdapterExists,
            "no_rollback_target": NoRollbackTarget, "no_canary": NoCanary, "adapter_ref_conflict": AdapterRefConflict,
            "adapter_store_unavailable": AdapterStoreUnavailable, "adapter_parity_failed": ParityFailed,
            "adapter_parity_not_compared": ParityNotCompared, "adapter_parity_not_passed": ParityNotPassed,
            "adapter_parity_not_measured": ParityNotMeasured,
            "adapter_integrity_failed": AdapterIntegrityError}
_BY_STATUS = {401: Unauthorized, 403: Forbidden, 404: AdapterNotFound, 409: AdapterExists, 429: RateLimited}


class GatewayUnreachable(AdapterStoreUnavailable):
    """The gateway did not answer (or answered with a server error)."""

    code = "gateway_unreachable"


def error_of(resp: httpx.Response) -> ServingError:
    """The serving error an error response stands for (its OpenAI-shaped body's code, else its status)."""
    try:
        err = resp.json()["error"]
        message, code = str(err["message"]), err.get("code")
    except (ValueError, KeyError, TypeError):
        message, code = resp.text[:300] or resp.reason_phrase, None
    cls = _BY_CODE.get(code) or _BY_STATUS.get(resp.status_code)
    if cls is None:
        cls = GatewayUnreachable if resp.status_code >= 500 else BadRequest
    return cls(f"gateway answered {resp.status_code}: {message}")


def _ref(doc: dict[str, Any]) -> AdapterRef:
    canary, parity = doc.get("canary"), doc.get("parity")
    return AdapterRef(**{**doc, "canary": Canary(**canary) if canary else None,
                         "parity": parity_of({"parity": parity}) or None})


class GatewayAdapters:
    """Adapter management through a gateway (``base_url`` with or without ``/v1``)."""

    def __init__(self, base_url: str, api_key: str | None, http: httpx.Client | None = None):
        root = base_url.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = http or httpx.Client(base_url=root, headers=headers, timeout=TIMEOUT_S)

    def _call(self, method: str, path: str, **kwargs) -> Any:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise GatewayUnreachable(f"gateway {self.http.base_url} unreachable: {type(exc).__name__}: {exc}") from None
        if resp.status_code >= 400:
            raise error_of(resp)
        return resp.json()

    def list(self) -> list[AdapterRef]:
        return [_ref(d) for d in self._call("GET", "/v1/adapters")["data"]]

    def history(self, name: str) -> list[AliasMove]:
        return [move_of(m) for m in self._call("GET", f"/v1/adapters/{name}/history")["data"]]

    def policy_view(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/adapters/{name}/policy")

    def set_policy(self, name: str, kind: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._call("PUT", f"/v1/adapters/{name}/policy", json={"kind": kind, "changes": changes})

    def guard(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/adapters/{name}/guard")

    def parity(self, name: str) -> dict[str, ParityRecord]:
        return parity_of({"parity": self._call("GET", f"/v1/adapters/{name}/parity")["data"]})

    def verify(self, name: str, version: str | None = None) -> VerifyReport:
        """The gateway re-hashes the version's stored files (a mismatch comes back as AdapterIntegrityError)."""
        report = self._call("GET", f"/v1/adapters/{name}/verify", params={"version": version} if version else {})
        return VerifyReport(**{k: v for k, v in report.items() if k != "ok"})

    def push(self, folder: str | Path, name: str, *, base: str | None = None, force: bool = False,
             canary: float | str | None = None, candidate: bool = False, force_parity: bool = False,
             **_store_only: Any) -> AdapterRef:
        """Upload FOLDER's adapter files as a tar; the gateway validates and publishes them."""
        params: dict[str, Any] = {"force": str(force).lower()}
        if force_parity:
            params["force_parity"] = "true"
        if base:
            params["base"] = base
        if canary is not None:
            params["canary"] = canary
        if candidate:
            params["candidate"] = "true"
        with tempfile.SpooledTemporaryFile(max_size=64 * 2**20) as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for fname in (CONFIG, WEIGHTS):
                    if (Path(folder) / fname).is_file():
                        tar.add(Path(folder) / fname, arcname=fname)
            buf.seek(0)
            return _ref(self._call("POST", f"/v1/adapters/{name}/versions", params=params, content=buf.read(),
                                   headers={"Content-Type": "application/x-tar"}))

    def promote(self, name: str, version: str | None = None, *, force_parity: bool = False) -> AdapterRef:
        body = {"version": version, **({"force_parity": True} if force_parity else {})}
        return _ref(self._call("POST", f"/v1/adapters/{name}/promote", json=body))

    def canary(self, name: str, version: str, weight: float | str, *, force_parity: bool = False) -> AdapterRef:
        try:
            weight = float(weight)
        except ValueError:
            raise BadRequest(f"canary weight {weight!r} is not a number") from None
        body = {"version": version, "weight": weight, **({"force_parity": True} if force_parity else {})}
        return _ref(self._call("POST", f"/v1/adapters/{name}/canary", json=body))

    def abort_canary(self, name: str) -> AdapterRef:
        return _ref(self._call("POST", f"/v1/adapters/{name}/abort"))

    def rollback(self, name: str, *, force_parity: bool = False) -> AdapterRef:
        body = {"force_parity": True} if force_parity else None
        return _ref(self._call("POST", f"/v1/adapters/{name}/rollback", json=body))

    def remove(self, name: str) -> AdapterRef:
        return _ref(self._call("DELETE", f"/v1/adapters/{name}"))

    def usage(self, since: str, key: str | None = None) -> dict[str, Any]:
        params = {"since": since, **({"key": key} if key else {})}
        return self._call("GET", "/v1/usage", params=params)


__all__ = ["GatewayAdapters", "GatewayUnreachable", "error_of"]
