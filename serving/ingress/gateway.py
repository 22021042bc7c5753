"""The gateway's ingress: Ray Serve LLM's ``OpenAiIngress`` plus what its users expect.

:class:`GatewayIngress` keeps every OpenAI route and streaming of the parent class and adds:

* ``base:name`` -> ``base:name@version`` through the adapter store's refs (``serving.adapters``'
  resolver; an explicit ``base:name@version`` is served as asked, current or not; a name with a
  canary is split per session), so replicas load immutable, complete versions; an unknown base or
  adapter 404 (worded as OpenAI words a model outside the key's scope), bad name 400, S3 trouble 503;
* request checks (``serving.ingress.request_checks``: OpenAI's roles and a required ``model``,
  image URLs, bytes and pixels) on every engine route before the engine sees the request, and, in
  :class:`~serving.ingress.middleware.GatewayMiddleware`, the body size limit and request metrics;
* API keys (``serving.auth``'s gate, inside that middleware: key, limits, usage): a model outside
  the caller's scope is OpenAI's 404 before anything is looked up, and absent from ``/v1/models``;
  a keyed stream asks the engine for its usage in every chunk (the client sees only what it asked
  for), and a keyed request whose client left before its response started has its prompt counted
  by the engine's tokenizer (``serving.ingress.prompt_tokens``), so the gate charges what each used;
* ``/v1/models`` from the store (paginated over what the caller may see, ``?after=&limit=``,
  ``agent_profile`` on bases), ``/health``, ``/ready`` (its details for admin keys), and the
  management routes of ``serving.ingress.management``;
* one error handler: every error leaves as ``{"error": {"message", "type", "code"}}``, a 5xx
  without internal text (``serving.ingress.middleware.public_error``);
* a ``Server-Timing`` header on every response (``serving.ingress.server_timing``): the phases
  are marked here (resolve, checks, the Serve call) and around the key gate, and the replica's
  own parts come back with its first item, which ``_get_response`` unwraps.

:func:`create_app` builds the FastAPI app the ingress is served with (Ray's own app factory, so
Ray's HTTP metrics and request ids stay, plus the extension routers named in the config).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from serving.adapters import AdapterResolver, AdapterStore, ModelId, export_s3_env, serves_canary, session_key
from serving.auth import (
    CALLER,
    Gate,
    GateMiddleware,
    authorize_model,
    current,
    note_model,
    request_stream_usage,
    visible,
)
from serving.compat import DEFAULT_ENDPOINTS, OpenAIHTTPException, OpenAiIngress, get_request_id
from serving.compat import ingress_app as ray_ingress_app
from serving.config import ServingConfig
from serving.errors import (
    AdapterLoadFailed,
    AdapterNotFound,
    MissingParameter,
    ModelAccessDenied,
    ReplicaUnavailable,
    ServingError,
)
from serving.ingress import server_timing
from serving.ingress.adapter_metrics import RESOLVED_MODEL, with_adapter_metrics
from serving.ingress.management import router as admin_router
from serving.ingress.outcomes import router as guard_router
from serving.ingress.prompt_tokens import count_prompt_tokens
from serving.ingress.middleware import (
    GatewayMiddleware,
    cause_of,
    public_error,
    replace_application_error_middleware,
    request_id_of,
    retry_after,
)
from serving.ingress.replica_status import degraded, replica_status
from serving.ingress.request_checks import check_request
from serving.metrics import metric

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 5.0
TOKEN_METHODS = ("chat", "completions")  # the engine calls whose tokens the gate charges


# -- errors -------------------------------------------------------------------------------------
def _replica_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the replica (its actor, worker or node) is gone, not that the request failed."""
    from ray.exceptions import NodeDiedError, RayActorError, WorkerCrashedError

    return isinstance(exc, (RayActorError, WorkerCrashedError, NodeDiedError))


async def openai_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """The one mapping of gateway, Ray and FastAPI errors to the OpenAI error shape
    (:func:`~serving.ingress.middleware.public_error`: a 5xx carries no internal text)."""
    status, body = public_error(exc, request_id_of(request.scope))
    return JSONResponse(body, status_code=status, headers=retry_after(body))


# -- the app ------------------------------------------------------------------------------------
def load_router(path: str) -> APIRouter:
    """Import ``module:attr`` and check it is an APIRouter (extensions are imported dynamically,
    so serving never depends on the packages that provide them)."""
    module, _, attr = path.partition(":")
    router = getattr(importlib.import_module(module), attr)
    if not isinstance(router, APIRouter):
        raise TypeError(f"extension {path} is a {type(router).__name__}, not a FastAPI APIRouter")
    return router


def create_app(cfg: ServingConfig) -> FastAPI:
    """Ray's ingress FastAPI app plus the gateway's error handler, middleware and extensions."""
    app = ray_ingress_app()
    replace_application_error_middleware(app)
    # Exception: the last-resort handler, in place of Ray's (whose body carries the exception's text).
    for exc_cls in (ServingError, OpenAIHTTPException, HTTPException, RequestValidationError, Exception):
        app.add_exception_handler(exc_cls, openai_error_handler)
    app.include_router(admin_router)
    app.include_router(guard_router)
    for path in cfg.extensions:
        app.include_router(load_router(path))
    app.state.gateway_config, app.state.gate = cfg, Gate(cfg.auth)
    # Added last = outermost: keys and limits (the gate) stop a request before any other work. The
    # two Phase marks bracket the gate: its time is the Server-Timing header's `auth`.
    app.add_middleware(server_timing.Phase, phase="gateway")
    app.add_middleware(GateMiddleware, gate=app.state.gate)
    app.add_middleware(server_timing.Phase, phase="auth")
    app.add_middleware(GatewayMiddleware, max_body_bytes=cfg.limits.max_body_bytes,
                       max_upload_bytes=cfg.limits.max_upload_bytes)
    return app


ENDPOINTS = {
    **DEFAULT_ENDPOINTS,
    # No response_model: the cards carry agent_profile and the list has_more.
    "models": lambda app: app.get("/v1/models"),
    "model_data": lambda app: app.get("/v1/models/{model:path}"),
    "health": lambda app: app.get("/health"),
    "ready": lambda app: app.get("/ready"),
}


class GatewayIngress(OpenAiIngress):
    """OpenAI routes over the LLM deployments, with versioned adapters from the S3 store."""

    def __init__(self, llm_deployments, model_cards, *, lora_paths=None, config: dict, **kwargs):
        super().__init__(llm_deployments, model_cards, lora_paths=lora_paths, **kwargs)
        self.cfg = ServingConfig.model_validate(config)
        export_s3_env(self.cfg)
        self.resolver = AdapterResolver(AdapterStore(self.cfg.adapters), self.cfg.adapters.resolve_ttl_s)
        self._created = int(time.time())

    # -- model resolution (every engine route goes through here) --------------------------------
    async def _get_model_id(self, model: str | None) -> str:
        return await self._resolve_model(model)

    async def _resolve_model(self, model: str | None, key: str | None = None) -> str:
        """``base`` or ``base:name@version`` for a request's model; a canary's version when the
        name runs one and the session ``key`` falls in its share."""
        if not model:  # OpenAI requires it; Ray would pick the only base and hide a forgotten adapter
            raise MissingParameter("you must provide a model parameter ('<base>' or '<base>:<adapter>')")
        if model == RESOLVED_MODEL.get():  # already resolved for this request: the parent's own lookup
            return await super()._get_model_id(model)
        requested = self._scoped(model)
        if not requested.is_adapter:
            note_model(requested.base)
            return requested.base
        # base:name follows the alias; base:name@version pins one version, current or not.
        requested = requested.checked()
        ref = await self._ref(model, requested)
        alias = requested.unversioned
        if ref.base and ref.base != requested.base:
            if not visible(str(alias.on(ref.base))):  # the base it serves is no business of this key
                raise AdapterNotFound(str(ModelAccessDenied.of(model)))
            raise AdapterNotFound(f"adapter {requested.adapter_part!r} is published for base {ref.base!r}, "
                                  f"not {requested.base!r}")
        note_model(str(alias))
        if requested.version is None and ref.canary is not None:
            # The split is a pure function of the ref and the key: a cached ref splits as a fresh one.
            arm = "canary" if serves_canary(requested.name, ref.canary, key) else "stable"
            served = ref.canary.version if arm == "canary" else ref.version
            metric("canary_routes").inc(tags={"adapter": requested.name, "version": served, "arm": arm})
            return str(alias.at(served))
        return str(alias.at(ref.version))

    def _scoped(self, model: str) -> ModelId:
        """``model`` parsed (unchecked) once the caller may call it and its base is served; either
        failure is the same OpenAI 404, before anything is looked up, so an answer never depends on
        what lies outside the key's scope (nor lists the bases served)."""
        authorize_model(model)
        requested = ModelId.parse(model)
        if requested.base not in self._model_cards:
            raise ModelAccessDenied.of(model)
        return requested

    async def _ref(self, model: str, requested: ModelId):
        """The adapter's ref (pinned: that version); a missing name or version is answered in the
        words of a model outside the key's scope (code ``adapter_not_found``)."""
        try:
            return await self.resolver.resolve(requested.name, requested.version)
        except AdapterNotFound:
            raise AdapterNotFound(str(ModelAccessDenied.of(model))) from None

    async def _get_response(self, *, body, call_method: str, raw_request=None):
        # Every engine route (chat, completions, embeddings, score, tokenize, ...) passes here before
        # the engine is called: nothing that fails the checks is parsed or decoded by vLLM.
        server_timing.enter("checks")
        check_request(body, self.cfg.limits)
        server_timing.enter("queue")
        async for item in super()._get_response(body=body, call_method=call_method, raw_request=raw_request):
            yield server_timing.unstamp(item)  # the replica's first item carries its Server-Timing parts

    @with_adapter_metrics
    async def _process_llm_request(self, body, call_method: str, raw_request=None):
        requested = body.model
        key = session_key(raw_request.headers if raw_request is not None else None, getattr(body, "user", None),
                          get_request_id(raw_request) if raw_request is not None else None)
        # The engine looks the LoRA up by the request's model name: it must carry the version too.
        server_timing.enter("resolve")
        body.model = await self._resolve_model(body.model, key)
        server_timing.enter("gateway")
        # A keyed request's tokens are charged to its key (the gate): a stream's usage is asked for.
        caller = CALLER.get() if call_method in TOKEN_METHODS else None
        hidden = request_stream_usage(body) if caller is not None else None
        if hidden is not None:
            caller.hide_chunk_usage, caller.hide_final_usage = hidden
        RESOLVED_MODEL.set(body.model)
        try:
            return await super()._process_llm_request(body, call_method, raw_request=raw_request)
        except (ServingError, HTTPException, OpenAIHTTPException, RequestValidationError,
                asyncio.CancelledError) as exc:
            server_timing.unstamp_error(exc)  # the replica's parts, when it failed there (in-process)
            if isinstance(exc, asyncio.CancelledError) and caller is not None:
                # The client left before the response started: the engine aborts and reports no usage.
                handle = self._get_configured_serve_handle(ModelId.parse(body.model).base)
                caller.prompt_count = asyncio.ensure_future(count_prompt_tokens(handle, body))
            raise
        except Exception as exc:
            cause = cause_of(exc)
            server_timing.unstamp_error(cause)  # ... or behind Ray's RayTaskError
            if isinstance(cause, ServingError):
                raise cause from None
            if _replica_lost(cause):  # not the adapter's fault: another replica can answer a retry
                log.warning("replica lost while serving %s: %s", requested, cause)
                raise ReplicaUnavailable(f"the replica serving {requested!r} was lost ({type(cause).__name__}); "
                                         "retry the request") from None
            if ":" not in (requested or ""):
                raise
            log.warning("adapter %s (%s) failed: %s", requested, body.model, cause)
            raise AdapterLoadFailed(f"adapter {requested!r} could not be loaded: {type(cause).__name__}: "
                                    f"{str(cause).splitlines()[0][:300] if str(cause) else ''}") from None

    # -- listing ---------------------------------------------------------------------------------
    def _base_card(self, base: str) -> dict[str, Any]:
        spec = self.cfg.base(base)
        card = self._model_cards[base].model_dump(mode="json")
        card.update(object="model", created=self._created, owned_by="maze-gateway")
        if spec is not None:
            card["agent_profile"] = spec.agent_profile.model_dump()
        return card

    def _adapter_card(self, model: ModelId) -> dict[str, Any]:
        return {"id": str(model), "object": "model", "created": self._created, "owned_by": "maze-gateway",
                "parent": model.base, "root": model.base, "agent_profile": self._base_card(model.base).get("agent_profile")}

    async def models(self, after: str | None = Query(None, description="adapter id or name to start after"),
                     limit: int | None = Query(None, ge=1, le=1000, description="adapters per page; none: all")):
        """Base models (first page) and the published adapters under each base, in the store's key
        order, of what the caller may call only: a page holds ``limit`` adapter names the caller may
        see, ``has_more`` is true only when another follows, and ``after`` (an id or name) starts
        the page where that name sorts, whether or not it exists or the caller may see it."""
        after_name = ModelId.plain(ModelId.parse(after).adapter_part or after) if after else None
        bases = list(self._model_cards)

        def keep(name: str) -> bool:  # run in the listing thread, which has the request's context
            return any(visible(str(ModelId(b, name))) for b in bases)

        names, has_more = await asyncio.to_thread(self.resolver.store.page_names, after_name, limit, keep)
        data = [self._base_card(b) for b in bases if visible(b)] if after_name is None else []
        data += [self._adapter_card(ModelId(b, n)) for n in names for b in bases if visible(str(ModelId(b, n)))]
        return {"object": "list", "data": data, "has_more": has_more}

    async def model_data(self, model: str):
        requested = self._scoped(model)
        if not requested.is_adapter:
            return self._base_card(requested.base)
        # The card names the version the alias serves now: clients pin it as base:name@version.
        ref = await self._ref(model, requested.checked())
        alias = requested.unversioned
        card = {**self._adapter_card(requested), "version": ref.version,
                "versioned_id": str(alias.at(ref.version))}
        if ref.canary is not None and requested.version is None:
            card["canary"] = {"version": ref.canary.version, "weight": ref.canary.weight,
                              "versioned_id": str(alias.at(ref.canary.version))}
        return card

    # -- probes ----------------------------------------------------------------------------------
    async def health(self):
        return {"status": "ok"}

    async def _probe(self, base: str) -> str:
        """``ok``, or why ``base``'s LLM deployment failed its health check."""
        try:
            await asyncio.wait_for(self._default_serve_handles[base].check_health.remote(), READY_TIMEOUT_S)
            return "ok"
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            return f"{type(exc).__name__}: {exc}"[:200]

    def _shows_details(self) -> bool:
        """Whether ``/ready`` may name bases, replicas, nodes and failures: to an admin key, or to
        anyone with auth off (the gateway is then open to whoever reaches it)."""
        principal = current()
        return not self.cfg.auth.enabled or (principal is not None and principal.role == "admin")

    async def ready(self):
        """200 when every base model's LLM deployment answers its health check, else 503. To a
        probe (no key, or a key that is not an admin's) the body says only ``ready`` or
        ``not_ready``; to an admin, or with auth off, it adds each base's result and, with several
        replicas, each deployment's running replicas, target and nodes, and status ``degraded``
        while fewer run than the target (a lost node, until its replica is back)."""
        bases = list(self._default_serve_handles)
        results = dict(zip(bases, await asyncio.gather(*(self._probe(b) for b in bases))))
        ok = all(v == "ok" for v in results.values())
        if not self._shows_details():
            return JSONResponse({"status": "ready" if ok else "not_ready"}, status_code=200 if ok else 503)
        body: dict[str, Any] = {"status": "ready" if ok else "not_ready", "models": results}
        if self.cfg.replicas.max_replicas > 1:  # one replica: the health check already says it all
            replicas = await asyncio.to_thread(replica_status, self.cfg.name)
            if replicas is not None:
                body["replicas"] = replicas
                if ok and degraded(replicas):
                    body["status"] = "degraded"  # serving, below the target replica count
        return JSONResponse(body, status_code=200 if ok else 503)
