"""The gateway's own management routes, each checked against the caller's key (``serving.auth.keys``).

* ``GET /v1/usage?since=1h[&key=NAME]``: requests, errors and tokens per key and model from the
  gateway's counters (``serving.auth.usage``); an admin sees every key, any other key its own.
* ``GET /v1/adapters``, ``GET /v1/adapters/{name}/history``, ``.../parity`` (its versions' parity
  records), ``.../verify?version=`` (re-hash a version's stored files; 422 when they changed):
  published adapters the key may see.
* ``POST /v1/adapters/{name}/versions`` (a tar of the adapter folder; ``?base=&force=&canary=``),
  ``.../canary`` (``{"version", "weight"}``), ``.../promote`` (``{"version", "force"}`` or none: the
  canary; ``force`` promotes a version whose parity check failed, else 409),
  ``.../abort``, ``.../rollback``: a publisher on names its models cover, an admin on any name;
  ``DELETE /v1/adapters/{name}``: admin only. Another key gets 403.

With auth off (the embedded default on 127.0.0.1) every route is open, as the store itself is to
whoever holds its credentials. ``maze-serve adapters --gateway URL ...`` and ``maze-serve usage``
call these routes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from serving.adapters import CONFIG, WEIGHTS, AdapterStore, split_model_name
from serving.auth import current
from serving.config import ServingConfig
from serving.errors import AdapterInvalid, AdapterNotFound, BadAdapterName, BadRequest, Forbidden

router = APIRouter(tags=["management"])
_STORES: dict[str, AdapterStore] = {}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds."""
    match = _DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise BadRequest(f"since: {text!r} is not a duration like 30m, 2h or 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def _config(request: Request) -> ServingConfig:
    return request.app.state.gateway_config


def _store(cfg: ServingConfig) -> AdapterStore:
    key = cfg.adapters.model_dump_json()
    if key not in _STORES:
        _STORES[key] = AdapterStore(cfg.adapters)
    return _STORES[key]


def _bases(cfg: ServingConfig) -> list[str]:
    return [m.id for m in cfg.base_models]


def _check(cfg: ServingConfig, action: str, name: str, bases: list[str] | None = None) -> None:
    principal = current()
    if principal is not None:
        principal.check_manage(action, name, bases or _bases(cfg))


def _visible_name(cfg: ServingConfig, name: str) -> bool:
    principal = current()
    return principal is None or any(principal.may_call(f"{b}:{name}") for b in _bases(cfg))


def _plain(name: str) -> str:
    """``name`` checked as an adapter name without a version."""
    if split_model_name(name)[1] is not None:
        raise BadAdapterName(f"{name!r}: name the adapter without a version here")
    return name


def _ref(ref) -> dict[str, Any]:
    return dataclasses.asdict(ref)


# -- usage ----------------------------------------------------------------------------------------
@router.get("/v1/usage")
async def usage(request: Request, since: str = Query("1h", description="how far back: 90s, 30m, 2h, 1d"),
                key: str | None = Query(None, description="one key's name (default: every key an admin may see)")):
    cfg = _config(request)
    since_s = min(parse_since(since), cfg.auth.usage_retention_s)
    principal = current()
    if principal is not None and principal.role != "admin":
        if key not in (None, principal.name):
            raise Forbidden(f"key {principal.name!r} may read only its own usage")
        key = principal.name
    rows = await request.app.state.gate.usage.totals(since_s, key) if cfg.auth.enabled else []
    return {"object": "list", "since_s": since_s, "auth": cfg.auth.enabled, "data": rows}


# -- adapters -------------------------------------------------------------------------------------
class CanaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(description="the version to serve as the canary (12 hex digits)")
    weight: float = Field(description="percent of the name's sessions it serves (0-100)")


class PromoteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str | None = Field(None, description="the version to serve; none: the running canary")
    force: bool = Field(False, description="promote it even though its recorded parity check failed")


@router.get("/v1/adapters")
async def list_adapters(request: Request):
    cfg = _config(request)
    refs = await asyncio.to_thread(_store(cfg).list)
    return {"object": "list", "data": [_ref(r) for r in refs if _visible_name(cfg, r.name)]}


@router.get("/v1/adapters/{name}/history")
async def adapter_history(request: Request, name: str):
    cfg = _config(request)
    _plain(name)
    if not _visible_name(cfg, name):
        raise AdapterNotFound(f"adapter {name!r} does not exist or you do not have access to it")
    moves = await asyncio.to_thread(_store(cfg).history, name)
    return {"object": "list", "data": [dataclasses.asdict(m) for m in moves]}


def _visible(cfg: ServingConfig, name: str) -> str:
    """``name`` (plain) when the key may see it, else the 404 a missing name gets."""
    if not _visible_name(cfg, _plain(name)):
        raise AdapterNotFound(f"adapter {name!r} does not exist or you do not have access to it")
    return name


@router.get("/v1/adapters/{name}/parity")
async def adapter_parity(request: Request, name: str):
    cfg = _config(request)
    records = await asyncio.to_thread(_store(cfg).parity, _visible(cfg, name))
    return {"object": "parity", "data": {v: dataclasses.asdict(r) for v, r in records.items()}}


@router.get("/v1/adapters/{name}/verify")
async def verify_adapter(request: Request, name: str,
                         version: str | None = Query(None, description="the version (default: the one served)")):
    cfg = _config(request)
    split_model_name(f"{_visible(cfg, name)}@{version}" if version else name)  # a bad version is a 400
    report = await asyncio.to_thread(_store(cfg).verify, name, version)
    return {**dataclasses.asdict(report), "ok": report.ok}


def _extract(archive: Path, out: Path) -> None:
    """The adapter's two files from a tar (any folder inside it); nothing else is written."""
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            for member in tar.getmembers():
                fname = Path(member.name).name
                if member.isreg() and fname in (CONFIG, WEIGHTS):
                    with tar.extractfile(member) as src, open(out / fname, "wb") as dst:
                        shutil.copyfileobj(src, dst)
    except tarfile.TarError as exc:
        raise AdapterInvalid(f"the upload is not a tar of an adapter folder: {exc}") from None


@router.post("/v1/adapters/{name}/versions")
async def push_adapter(request: Request, name: str,
                       base: str | None = Query(None, description="base model id (default: the first served)"),
                       force: bool = Query(False, description="replace the version a published name serves"),
                       canary: float | None = Query(None, description="publish as the name's canary at this percent")):
    cfg = _config(request)
    _plain(name)
    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:
        raise BadRequest(f"unknown base {base!r}; served: {_bases(cfg)}")
    _check(cfg, "push", name, [spec.id])
    with tempfile.TemporaryDirectory(prefix="maze-upload-") as tmp:
        archive, folder = Path(tmp) / "upload.tar", Path(tmp) / "adapter"
        folder.mkdir()
        fh = await asyncio.to_thread(open, archive, "wb")
        try:
            async for chunk in request.stream():  # the body limit is GatewayMiddleware's max_upload_bytes
                await asyncio.to_thread(fh.write, chunk)
        finally:
            fh.close()
        await asyncio.to_thread(_extract, archive, folder)
        ref = await asyncio.to_thread(_store(cfg).push, folder, name, base=spec.id, base_source=spec.source,
                                      max_rank=cfg.lora.max_rank, force=force, canary=canary,
                                      vision_tower=cfg.lora.vision_tower)
    return _ref(ref)


@router.post("/v1/adapters/{name}/canary")
async def canary_adapter(request: Request, name: str, body: CanaryBody):
    cfg = _config(request)
    _plain(name)
    split_model_name(f"{name}@{body.version}")
    _check(cfg, "canary", name)
    return _ref(await asyncio.to_thread(_store(cfg).canary, name, body.version, body.weight))


@router.post("/v1/adapters/{name}/promote")
async def promote_adapter(request: Request, name: str, body: PromoteBody | None = None):
    cfg = _config(request)
    version, force = (body.version, body.force) if body is not None else (None, False)
    split_model_name(_plain(name) if version is None else f"{_plain(name)}@{version}")
    _check(cfg, "promote", name)
    return _ref(await asyncio.to_thread(_store(cfg).promote, name, version, force=force))


async def _move(request: Request, name: str, action: str, method: str) -> dict[str, Any]:
    """A move that takes only the adapter's name: checked for ``action``, then ``AdapterStore.<method>``."""
    cfg = _config(request)
    _check(cfg, action, _plain(name))
    return _ref(await asyncio.to_thread(getattr(_store(cfg), method), name))


@router.post("/v1/adapters/{name}/abort")
async def abort_adapter(request: Request, name: str):
    return await _move(request, name, "abort", "abort_canary")


@router.post("/v1/adapters/{name}/rollback")
async def rollback_adapter(request: Request, name: str):
    return await _move(request, name, "rollback", "rollback")


@router.delete("/v1/adapters/{name}")
async def remove_adapter(request: Request, name: str):
    return await _move(request, name, "remove", "remove")


__all__ = ["parse_since", "router"]
