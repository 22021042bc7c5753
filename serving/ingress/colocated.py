"""The colocated layout: one Serve deployment answers HTTP *and* runs the engine.

In the standard layout a request goes proxy -> ingress replica -> (DeploymentHandle) -> LLM-server
replica: two Serve hops, each a Ray actor call with its own serialisation, routing and event-loop
work. :class:`ColocatedGateway` is the same :class:`~serving.ingress.gateway.GatewayIngress` (same FastAPI
app, routes, auth, limits, errors, metrics, adapter resolution) but it constructs its
:class:`~serving.engine.llm_server.GatewayLLMServer` in its own process and reaches it through
:class:`LocalServerHandle`, an in-process stand-in for the ``DeploymentHandle`` that
``OpenAiIngress`` calls. A request then goes proxy -> one replica.

Ray Serve LLM internals this relies on (all in ``ray.llm._internal.serve``, the same in 2.58.1 and 2.60.0;
the names come through :mod:`serving.compat`):

* ``OpenAiIngress`` keeps per-model handles in ``_default_serve_handles``, configures them with
  ``.options(stream=True[, multiplexed_model_id=...][, session_id=...])`` and calls
  ``getattr(handle, method).remote(body, raw_request_info)``, iterating the result with
  ``async for``; ``GatewayIngress.ready`` awaits ``handle.check_health.remote()``;
* ``LLMServer`` reads the LoRA id from Serve's request context (``serve.get_multiplexed_model_id``),
  which the handle would set on the callee side; here it is set around the local call;
* ``LLMServer.sync_init`` + ``start()`` build a started server without a deployment, and
  ``LLMServer.get_deployment_options`` gives the replica's resources (placement group, runtime env).

Limits: one base model per application (the deployment *is* that model's server); with several
replicas Serve's proxy balances requests without LoRA affinity (each replica loads the adapters it
is asked for, ``adapters_per_replica`` at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from serving.compat import serve_request_model
from serving.ingress.gateway import GatewayIngress

log = logging.getLogger(__name__)


class LocalServerHandle:
    """The subset of ``DeploymentHandle`` that ``OpenAiIngress`` uses, calling a local server object.

    ``handle.options(stream=True, multiplexed_model_id=m).chat.remote(body, raw)`` returns an async
    iterator over what ``server.chat(body, raw)`` streams, with ``m`` as the request's multiplexed
    model id while the server resolves the adapter; without ``stream`` ``.remote`` returns an awaitable.
    A caller cancelled while the server runs sees ``CancelledError``, whatever the server made of
    the cancellation (:func:`_cancellation_kept`), as a ``DeploymentHandle`` caller would.
    """

    def __init__(self, server: Any, *, stream: bool = False, multiplexed_model_id: str = ""):
        self._server = server
        self._stream = stream
        self._model_id = multiplexed_model_id

    def options(self, *, stream: bool | None = None, multiplexed_model_id: str | None = None,
                **_ignored: Any) -> LocalServerHandle:
        # session_id and the other routing options have no meaning for the one local server.
        return LocalServerHandle(
            self._server,
            stream=self._stream if stream is None else stream,
            multiplexed_model_id=self._model_id if multiplexed_model_id is None else multiplexed_model_id,
        )

    def __getattr__(self, method: str) -> _LocalMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _LocalMethod(self, method)


class _LocalMethod:
    def __init__(self, handle: LocalServerHandle, method: str):
        self._handle, self._method = handle, method

    def remote(self, *args: Any, **kwargs: Any):
        if self._handle._stream:
            return self._stream(args, kwargs)
        return self._call(args, kwargs)

    async def _call(self, args: tuple, kwargs: dict) -> Any:
        h = self._handle
        # one task throughout: the context's token stays valid
        with _cancellation_kept(), serve_request_model(h._model_id):
            return await getattr(h._server, self._method)(*args, **kwargs)

    async def _stream(self, args: tuple, kwargs: dict) -> AsyncIterator[Any]:
        result = await self._call(args, kwargs)
        if not hasattr(result, "__aiter__"):
            yield result
            return
        items = aiter(result)
        while True:
            # Item by item: the task iterating may change (a streamed response is sent from its own).
            with _cancellation_kept():
                try:
                    item = await anext(items)
                except StopAsyncIteration:
                    return
            yield item


@contextlib.contextmanager
def _cancellation_kept():
    """Raise ``CancelledError`` when the task was cancelled while the server ran in it, whatever the
    server made of it (an answer, an exception, the end of its stream).

    Through a ``DeploymentHandle`` the server runs in another replica and a cancelled caller sees
    ``CancelledError`` at once. Called in-process, the server runs in the caller's own task, so the
    cancellation is raised inside the engine, and vLLM's JSON paths (the chat and completion full
    generators) catch it and answer an error instead ("Client disconnected", 400): the ingress would
    take a request its client left for a failed one and not count its prompt for the key gate
    (``serving.ingress.prompt_tokens``). ``Task.cancelling()`` counts the requests to cancel the task
    not withdrawn since (``asyncio.timeout`` withdraws its own as it turns them into ``TimeoutError``):
    a count above the one before the call is a cancellation the server did not let through."""
    task = asyncio.current_task()
    before = task.cancelling()
    try:
        yield
    except Exception as exc:
        if task.cancelling() > before:
            raise asyncio.CancelledError from exc
        raise
    if task.cancelling() > before:
        raise asyncio.CancelledError


def server_class(llm_config) -> type:
    """The LLM server class the replica runs: the config's ``server_cls``, else ``GatewayLLMServer``
    (one answer for both the deployment's resources and the server it builds)."""
    from serving.engine import GatewayLLMServer

    return llm_config.server_cls or GatewayLLMServer


class ColocatedGateway(GatewayIngress):
    """``GatewayIngress`` with its base model's ``GatewayLLMServer`` in the same replica."""

    async def __init__(self, llm_config, model_cards, *, lora_paths=None, config: dict, server_cls=None, **kwargs):
        server_cls = server_cls or server_class(llm_config)
        # Start the engine first: Serve marks the replica healthy once __init__ returns.
        self.server = server_cls.sync_init(llm_config)
        await self.server.start()
        super().__init__({llm_config.model_id: LocalServerHandle(self.server)}, model_cards,
                         lora_paths=lora_paths, config=config, **kwargs)

    async def check_health(self):
        """Serve's replica health check: the engine's (a dead engine gets the replica replaced)."""
        await self.server.check_health()

    async def __del__(self):
        server = getattr(self, "server", None)
        if server is not None and getattr(server, "engine", None) is not None:
            await server.engine.shutdown()
        parent = getattr(super(), "__del__", None)  # the ASGI wrapper's lifespan shutdown
        if parent is not None:
            await parent()
