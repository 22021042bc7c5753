"""The gateway's own management routes, each checked against the caller's key (``serving.auth.keys``).

* ``GET /v1/usage?since=1h[&key=NAME]``: requests, errors and tokens per key and model from the
  gateway's counters (``serving.auth.usage``); an admin sees every key, any other key its own.
* ``GET /v1/adapters``, ``GET /v1/adapters/{name}/history``, ``.../parity`` (its versions' parity
  records), ``.../verify?version=`` (re-hash a version's stored files; 422 when they changed):
  published adapters the key may see.
* ``POST /v1/adapters/{name}/versions`` (a tar of the adapter folder;
  ``?base=&force=&canary=&candidate=&force_parity=``), ``.../canary`` (``{"version", "weight", "force_parity"}``),
  ``.../promote`` (``{"version", "force_parity"}`` or none: the canary), ``.../abort``,
  ``.../rollback`` (``{"force_parity"}`` or none): a publisher on names its models cover, an admin on
  any name; ``DELETE /v1/adapters/{name}``: admin only.
* ``GET /v1/adapters/{name}/policy`` (the gate's and the live guard's policy in force for the name:
  the config's with the name's own changes) and ``PUT`` (``{"kind": "gate"|"guard", "changes": {...}}``,
  a key that may promote the name; recorded in its history with the key): ``serving.adapters.policies``.
* ``GET /v1/adapters/{name}/gate?version=`` (whether that version may go through the offline gate:
  the version served now and the name's gate policy, ``adapters.gate``; 409 when its parity record
  is missing or does not pass) and ``POST /v1/adapters/{name}/gate`` (``{"version", "evidence"}``:
  the gate's decision, which promotes a candidate found better while the name still serves the
  version it was played against, else records the decision in the history): a key that may promote
  the name (``maze-eval gate`` calls them).

On the routes that write (and the gate's), another key gets 403, checked from its role and the name
before anything else of the request is validated or read (a key that may not act learns nothing
from a 400: not the bases served, not what the store holds).

A move that would start a version serving whose parity check did not pass (``serving.adapters.parity``:
failed, or not compared where ``adapters.parity_without_reference`` is off) is a 409
(``adapter_parity_failed``, ``adapter_parity_not_compared``) naming the version, its parity and
what to do; ``force_parity: true`` makes it anyway, and only an admin key may ask for it (403 for
any other, before the store is read). The forced move records the parity it was forced past and
the key's name in the name's history.

A name the key may not see answers exactly as a name that does not exist (404, ``adapter 'x' not
found``). A name with a control character is a 400 (the store's name pattern lets a trailing
newline through into an S3 key). An upload is read as a stream bounded in decompressed bytes
(``limits.max_upload_bytes``) and members (:data:`MAX_UPLOAD_MEMBERS`).

A move made here (push, canary, promote, abort, rollback, remove) is served from the next request
this gateway replica answers: its resolver takes the ref the move left instead of waiting for its
cached entry to expire (``AdapterResolver.remember``); other gateway replicas, and moves written to
S3 directly (``maze-serve adapters`` without ``--gateway``), within ``adapters.resolve_ttl_s``. Where
the engine runs in this replica (the colocated layout), the versions the name now serves are loaded
ahead of that request if the name is in use there (``serving.placement.follow``).

With auth off (the embedded default on 127.0.0.1) every route is open, as the store itself is to
whoever holds its credentials. ``maze-serve adapters --gateway URL ...`` and ``maze-serve usage``
call these routes.
"""

from __future__ import annotations

import asyncio
import bz2
import dataclasses
import gzip
import lzma
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from serving.adapters import CONFIG, WEIGHTS, AdapterRef, AdapterStore, ModelId
from serving.auth import current, visible
from serving.config import ServingConfig
from serving.errors import (
    AdapterInvalid,
    AdapterNotFound,
    BadRequest,
    Forbidden,
    RequestTooLarge,
)

router = APIRouter(tags=["management"])
_STORES: dict[str, AdapterStore] = {}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_UPLOAD_MEMBERS = 256  # files in an uploaded tar: an adapter folder holds a handful
MAX_TAR_HEADER_BYTES = 1 << 20  # a long name or pax record set: tarfile reads one whole into memory


def parse_since(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds."""
    match = _DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise BadRequest(f"since: {text!r} is not a duration like 30m, 2h or 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def config_of(request: Request) -> ServingConfig:
    return request.app.state.gateway_config


def store_of(cfg: ServingConfig) -> AdapterStore:
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


def name_visible(cfg: ServingConfig, name: str) -> bool:
    principal = current()
    return principal is None or any(principal.may_call(str(ModelId(b, name))) for b in _bases(cfg))


def _missing(name: str) -> AdapterNotFound:
    """What a name the key may not see answers: the words the store uses for one that does not exist."""
    return AdapterNotFound(f"adapter {name!r} not found")


def _may(action: str):
    """A route dependency: the caller may ``action`` the adapter named in the path (403 otherwise).
    FastAPI runs dependencies before it validates the query and body, so this check comes first."""
    def check(request: Request, name: str) -> None:
        _check(config_of(request), action, name)
    return Depends(check)


def _may_push(request: Request, name: str) -> None:
    """The push route's dependency: ``push`` on the name for the base the query names (an unknown
    base is a 400 only for a key that may push there; another key gets its 403 first)."""
    cfg = config_of(request)
    _check(cfg, "push", name, [request.query_params.get("base") or cfg.base_models[0].id])


def _ref(ref) -> dict[str, Any]:
    return dataclasses.asdict(ref)


def _ingress() -> Any | None:
    """The ingress object of the Serve replica answering (its resolver; in the colocated layout its
    engine's server too), as Ray binds the ingress's own routes; None outside a replica."""
    try:
        from ray import serve

        return serve.get_replica_context().servable_object
    except Exception:  # noqa: BLE001 - RayServeException: the app runs outside a Serve replica
        return None


def _served(ref: AdapterRef) -> dict[str, Any]:
    """A move's answer, once this replica serves it (see the module docstring)."""
    ingress = _ingress()
    resolver = getattr(ingress, "resolver", None)
    if resolver is not None:
        resolver.remember(ref)
    server = getattr(ingress, "server", None)  # the colocated layout's engine
    if server is not None:
        from serving.placement import preload_moved

        preload_moved(server, ref)
    return _ref(ref)


def _removed(ref: AdapterRef) -> dict[str, Any]:
    resolver = getattr(_ingress(), "resolver", None)
    if resolver is not None:
        resolver.forget(ref.name)
    return _ref(ref)


# -- usage ----------------------------------------------------------------------------------------
@router.get("/v1/usage")
async def usage(request: Request, since: str = Query("1h", description="how far back: 90s, 30m, 2h, 1d"),
                key: str | None = Query(None, description="one key's name (default: every key an admin may see)")):
    cfg = config_of(request)
    since_s = min(parse_since(since), cfg.auth.usage_retention_s)
    principal = current()
    if principal is not None and principal.role != "admin":
        if key not in (None, principal.name):
            raise Forbidden(f"key {principal.name!r} may read only its own usage")
        key = principal.name
    rows = await request.app.state.gate.usage.totals(since_s, key) if cfg.auth.enabled else []
    return {"object": "list", "since_s": since_s, "auth": cfg.auth.enabled, "data": rows}


# -- adapters -------------------------------------------------------------------------------------
FORCE_PARITY = ("serve the version even though its recorded parity check failed or was not compared (an admin "
                "key only; recorded in the name's history)")


class CanaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(description="the version to serve as the canary (12 hex digits)")
    weight: float = Field(description="percent of the name's sessions it serves (0-100)")
    force_parity: bool = Field(False, description=FORCE_PARITY)


class PromoteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str | None = Field(None, description="the version to serve; none: the running canary")
    force_parity: bool = Field(False, description=FORCE_PARITY)


class RollbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    force_parity: bool = Field(False, description=FORCE_PARITY)


def _forced_by(cfg: ServingConfig, name: str, force_parity: bool) -> str | None:
    """The key forcing a move past parity (None without auth), once checked: only an admin may (403)."""
    if not force_parity:
        return None
    _check(cfg, "force-parity", name)
    principal = current()
    return principal.name if principal is not None else None


@router.get("/v1/adapters")
async def list_adapters(request: Request):
    cfg = config_of(request)
    refs = await asyncio.to_thread(store_of(cfg).list)
    return {"object": "list", "data": [_ref(r) for r in refs if name_visible(cfg, r.name)]}


def visible_name(cfg: ServingConfig, name: str) -> str:
    """``name``, checked as a plain adapter name, when the key may see it; else the 404 a missing
    name gets (scope first: a name outside it is never validated, so never told apart)."""
    if not name_visible(cfg, name):
        raise _missing(name)
    return ModelId.plain(name)


@router.get("/v1/adapters/{name}/history")
async def adapter_history(request: Request, name: str):
    cfg = config_of(request)
    moves = await asyncio.to_thread(store_of(cfg).history, visible_name(cfg, name))
    return {"object": "list", "data": [dataclasses.asdict(m) for m in moves]}


@router.get("/v1/adapters/{name}/parity")
async def adapter_parity(request: Request, name: str):
    cfg = config_of(request)
    records = await asyncio.to_thread(store_of(cfg).parity, visible_name(cfg, name))
    return {"object": "parity", "data": {v: dataclasses.asdict(r) for v, r in records.items()}}


@router.get("/v1/adapters/{name}/verify")
async def verify_adapter(request: Request, name: str,
                         version: str | None = Query(None, description="the version (default: the one served)")):
    cfg = config_of(request)
    plain = visible_name(cfg, name)
    if version:
        ModelId(None, plain, version).checked()  # a bad version is a 400
    report = await asyncio.to_thread(store_of(cfg).verify, name, version)
    return {**dataclasses.asdict(report), "ok": report.ok}


# -- upload extraction --------------------------------------------------------------------------
_COMPRESSED = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


class _Expanded(Exception):
    """The decompressed upload went past its bound."""


class _Bounded:
    """A read-only stream of at most ``limit`` bytes of ``raw``: one more raises :class:`_Expanded`.
    It sits between the decompressor and tarfile, so every byte tarfile reads (headers, skipped
    members, extracted files) counts, and no read asks the decompressor for more than the rest."""

    def __init__(self, raw, limit: int):
        self.raw, self.left = raw, limit

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(self.left + 1 if size is None or size < 0 else min(size, self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise _Expanded
        return data


class _BoundedTarInfo(tarfile.TarInfo):
    """A member whose extended header (a GNU long name, pax records) is read only when it is small:
    tarfile reads such a header whole into memory before the member is seen."""

    def _proc_member(self, tarfile_):
        extended = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                    tarfile.SOLARIS_XHDTYPE)
        if self.type in extended and self.size > MAX_TAR_HEADER_BYTES:
            raise tarfile.ReadError(f"a tar header of {self.size} bytes (at most {MAX_TAR_HEADER_BYTES})")
        return super()._proc_member(tarfile_)


def _decompressed(archive: Path):
    """``archive`` opened as its decompressed bytes (gzip, bzip2, xz by their magic; else as it is)."""
    with open(archive, "rb") as fh:
        magic = fh.read(6)
    opener = next((fn for prefix, fn in _COMPRESSED if magic.startswith(prefix)), open)
    return opener(archive, "rb")


def _extract(archive: Path, out: Path, max_bytes: int) -> None:
    """The adapter's two files from a tar, plain or compressed (any folder inside it); nothing else
    is written. Read as one stream that stops past ``max_bytes`` decompressed bytes or
    :data:`MAX_UPLOAD_MEMBERS` members, so a small upload cannot expand into unbounded disk,
    memory or time.

    Raises:
        RequestTooLarge (413): more than ``max_bytes`` once decompressed.
        AdapterInvalid (400): not a tar (or not one that decompresses), too many members, a huge header.
    """
    try:
        with _decompressed(archive) as raw, tarfile.open(fileobj=_Bounded(raw, max_bytes), mode="r|",
                                                          tarinfo=_BoundedTarInfo) as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_UPLOAD_MEMBERS:
                    raise AdapterInvalid(f"the upload holds more than {MAX_UPLOAD_MEMBERS} tar members; send a "
                                         f"tar of the adapter folder ({CONFIG}, {WEIGHTS})")
                fname = Path(member.name).name
                if member.isreg() and fname in (CONFIG, WEIGHTS):
                    with tar.extractfile(member) as src, open(out / fname, "wb") as dst:
                        shutil.copyfileobj(src, dst)
    except _Expanded:
        raise RequestTooLarge(f"the upload expands past {max_bytes} bytes once decompressed "
                              "(limits.max_upload_bytes)") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        # An OSError's strerror leaves out the file name (the gateway's temporary folder).
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AdapterInvalid(f"the upload is not a tar of an adapter folder: {detail}") from None


@router.post("/v1/adapters/{name}/versions", dependencies=[Depends(_may_push)])
async def push_adapter(request: Request, name: str,
                       base: str | None = Query(None, description="base model id (default: the first served)"),
                       force: bool = Query(False, description="replace the version a published name serves"),
                       canary: float | None = Query(None, description="publish as the name's canary at this percent"),
                       candidate: bool = Query(False, description="publish without serving it: a candidate for the "
                                                                  "offline gate"),
                       force_parity: bool = Query(False, description=FORCE_PARITY)):
    cfg = config_of(request)
    forced_by = _forced_by(cfg, name, force_parity)  # before the upload is read
    ModelId.plain(name)
    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:  # named to a key that may push there, and only the bases it may call
        raise BadRequest(f"unknown base {base!r}; served: {[b for b in _bases(cfg) if visible(b)]}")
    with tempfile.TemporaryDirectory(prefix="maze-upload-") as tmp:
        archive, folder = Path(tmp) / "upload.tar", Path(tmp) / "adapter"
        folder.mkdir()
        fh = await asyncio.to_thread(open, archive, "wb")
        try:
            async for chunk in request.stream():  # the body limit is GatewayMiddleware's max_upload_bytes
                await asyncio.to_thread(fh.write, chunk)
        finally:
            fh.close()
        await asyncio.to_thread(_extract, archive, folder, cfg.limits.max_upload_bytes)
        ref = await asyncio.to_thread(store_of(cfg).push, folder, name, base=spec.id, base_source=spec.source,
                                      max_rank=cfg.lora.max_rank, force=force, canary=canary, candidate=candidate,
                                      vision_tower=cfg.lora.vision_tower, force_parity=force_parity,
                                      forced_by=forced_by)
    return _ref(ref) if candidate else _served(ref)  # a candidate serves nothing: the resolver keeps the alias


@router.post("/v1/adapters/{name}/canary", dependencies=[_may("canary")])
async def canary_adapter(request: Request, name: str, body: CanaryBody):
    cfg = config_of(request)
    forced_by = _forced_by(cfg, name, body.force_parity)
    ModelId(None, ModelId.plain(name), body.version).checked()
    return _served(await asyncio.to_thread(store_of(cfg).canary, name, body.version, body.weight,
                                           force_parity=body.force_parity, forced_by=forced_by))


@router.post("/v1/adapters/{name}/promote", dependencies=[_may("promote")])
async def promote_adapter(request: Request, name: str, body: PromoteBody | None = None):
    cfg = config_of(request)
    body = body or PromoteBody()
    forced_by = _forced_by(cfg, name, body.force_parity)
    ModelId(None, ModelId.plain(name), body.version).checked()
    return _served(await asyncio.to_thread(store_of(cfg).promote, name, body.version, force_parity=body.force_parity,
                                           forced_by=forced_by))


class GateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(description="the candidate version the gate played (12 hex digits)")
    evidence: dict[str, Any] = Field(description="what the gate found (serving.adapters.GateEvidence's fields)")


@router.get("/v1/adapters/{name}/gate", dependencies=[_may("promote")])
async def gate_target(request: Request, name: str,
                      version: str = Query(description="the candidate version (12 hex digits)")):
    cfg = config_of(request)
    ModelId(None, ModelId.plain(name), version).checked()
    target = await asyncio.to_thread(store_of(cfg).gate_target, name, version)
    return {"object": "gate_target", **target.as_dict()}


@router.post("/v1/adapters/{name}/gate", dependencies=[_may("promote")])
async def gate_decision(request: Request, name: str, body: GateBody):
    cfg = config_of(request)
    ModelId(None, ModelId.plain(name), body.version).checked()
    ref, move = await asyncio.to_thread(store_of(cfg).decide, name, body.version, body.evidence)
    return {"object": "gate_decision", "ref": _served(ref), "move": dataclasses.asdict(move)}


class PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(description="which policy: gate (the offline gate's) or guard (the live guard's)")
    changes: dict[str, Any] = Field(description="the fields of the policy this name changes ({}: the config's again)")


@router.get("/v1/adapters/{name}/policy")
async def adapter_policy(request: Request, name: str):
    cfg = config_of(request)
    name = visible_name(cfg, name)
    store = store_of(cfg)
    doc = await asyncio.to_thread(store.refs.require, name)
    return store.policy_view(name, doc)


@router.put("/v1/adapters/{name}/policy", dependencies=[_may("promote")])
async def set_adapter_policy(request: Request, name: str, body: PolicyBody):
    cfg = config_of(request)
    ModelId.plain(name)
    principal = current()
    store = store_of(cfg)
    await asyncio.to_thread(store.set_policy, name, body.kind, body.changes,
                            by=principal.name if principal is not None else None)
    return store.policy_view(name, await asyncio.to_thread(store.refs.require, name))


async def _move(request: Request, name: str, method: str) -> dict[str, Any]:
    """A move that takes only the adapter's name (its right checked by the route's dependency):
    ``AdapterStore.<method>``."""
    cfg = config_of(request)
    ref = await asyncio.to_thread(getattr(store_of(cfg), method), ModelId.plain(name))
    return _removed(ref) if method == "remove" else _served(ref)


@router.post("/v1/adapters/{name}/abort", dependencies=[_may("abort")])
async def abort_adapter(request: Request, name: str):
    return await _move(request, name, "abort_canary")


@router.post("/v1/adapters/{name}/rollback", dependencies=[_may("rollback")])
async def rollback_adapter(request: Request, name: str, body: RollbackBody | None = None):
    cfg = config_of(request)
    body = body or RollbackBody()
    forced_by = _forced_by(cfg, name, body.force_parity)
    return _served(await asyncio.to_thread(store_of(cfg).rollback, ModelId.plain(name), force_parity=body.force_parity,
                                           forced_by=forced_by))


@router.delete("/v1/adapters/{name}", dependencies=[_may("remove")])
async def remove_adapter(request: Request, name: str):
    return await _move(request, name, "remove")


__all__ = ["MAX_UPLOAD_MEMBERS", "config_of", "name_visible", "parse_since", "router", "store_of", "visible_name"]
