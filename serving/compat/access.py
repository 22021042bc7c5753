"""The private attributes of Ray Serve LLM's and vLLM's objects that the serving code reads, each
through one function, and the behaviours in which the two stacks differ, each given one answer."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from serving.compat.places import resolve

#: Where ``serve.multiplexed`` keeps a method's model LRU (``ray/serve/api.py``), which the replica replaces.
MULTIPLEX_ATTR = "__serve_multiplex_wrapper"


def engine_client(engine: Any) -> Any:
    """vLLM's engine client (``AsyncLLM``) inside Ray Serve LLM's ``VLLMEngine``; None before it starts."""
    return getattr(engine, "_engine_client", None)


def served_models(engine: Any) -> Any:
    """vLLM's ``OpenAIServingModels`` of a ``VLLMEngine`` (the names it serves, LoRA adapters among
    them); None before the engine starts."""
    return getattr(engine, "_oai_models", None)


def connect_tokenization(engine: Any) -> bool:
    """Give a started ``VLLMEngine`` vLLM's tokenization server where Ray did not find it; whether it
    has one now.

    Ray's engine reads it from vLLM's app state as ``openai_serving_tokenization``, which vLLM 0.32
    names ``serving_tokenization``: on the CPU stack Ray's ``tokenize`` answers every request "This
    model does not support the 'tokenization' task", and the gateway could not count the prompt of
    a request its client left (``serving.ingress.prompt_tokens``). Where Ray found it (its own vLLM's
    name) this changes nothing."""
    if getattr(engine, "_oai_serving_tokenization", None) is None:
        found = getattr(getattr(engine, "_app_state", None), "serving_tokenization", None)
        if found is not None:
            engine._oai_serving_tokenization = found
    return getattr(engine, "_oai_serving_tokenization", None) is not None


def worker_lora_manager(worker: Any) -> Any:
    """The ``LoRAModelManager`` inside a vLLM worker (the one whose LoRA layers the model runs)."""
    return worker.model_runner.lora_manager._adapter_manager


def registered_lora(manager: Any, lora_id: int) -> Any:
    """The ``LoRAModel`` registered in a ``LoRAModelManager`` as ``lora_id``, or None."""
    return manager._registered_adapters.get(lora_id)


@contextmanager
def serve_request_model(model_id: str) -> Iterator[None]:
    """Serve's request context with ``model_id`` as the multiplexed model id inside the block (what a
    ``DeploymentHandle`` call sets on the callee's side). The block must stay in one task: the
    context variable is reset with the token its set returned."""
    context = resolve("serve_context")
    var = context._serve_request_context
    token = var.set(dataclasses.replace(context._get_serve_request_context(), multiplexed_model_id=model_id))
    try:
        yield
    finally:
        var.reset(token)


def serve_controller_client() -> Any:
    """Serve's controller client in this process (its details hold each deployment's target replicas,
    which Serve's public ``status()`` leaves out)."""
    return resolve("serve_context")._get_global_client()


def skip_eager_cpu_warmup() -> bool:
    """Make vLLM's CPU model runner skip its warm-up in eager mode, as vLLM 0.32's does; True when the
    installed runner was changed (a CPU build, the first call in this process).

    vLLM 0.26's CPU runner warms up with a profile run whatever the compilation mode, and that run
    passes a dummy video through the vision tower before any tower LoRA mapping is set: with tower
    LoRA on, the CPU LoRA ops read the tower wrapper's never-written slot indices (an IndexError at
    engine start, or another slot's weights added). vLLM 0.32 returns at once for
    ``CompilationMode.NONE``, where there is no compiled graph to warm. Wrapping 0.32's runner too
    changes nothing it does. Called in the engine's worker process (serving.engine.lora_worker)."""
    from serving.compat.places import engine_build

    if engine_build() != "cpu":
        return False
    runner = resolve("CPUModelRunner")
    stock = runner.warming_up_model
    if getattr(stock, "skips_eager", False):
        return False
    eager = resolve("CompilationMode").NONE

    @functools.wraps(stock)
    def warming_up_model(self) -> None:
        if self.vllm_config.compilation_config.mode == eager:
            return
        stock(self)

    warming_up_model.skips_eager = True
    runner.warming_up_model = warming_up_model
    return True


def vllm_client_errors() -> tuple[type[BaseException], ...]:
    """vLLM's exception types for errors in a request itself, where the installed vLLM has them
    (``VLLMClientError`` in vLLM 0.32; vLLM 0.26 raises ``ValueError``)."""
    error = resolve("VLLMClientError")
    return (error,) if error is not None else ()


def error_status(exc: BaseException, request_id: str | None) -> int:
    """The HTTP status for ``exc`` as Ray Serve LLM words errors. Ray 2.60 answers vLLM's client errors
    with a 400 and Ray 2.58.1 has no such rule, so it is applied here for both."""
    if isinstance(exc, vllm_client_errors()):
        return 400
    return resolve("get_response_for_error")(exc, request_id).error.code


__all__ = ["MULTIPLEX_ATTR", "connect_tokenization", "engine_client", "error_status", "registered_lora",
           "serve_controller_client", "serve_request_model", "served_models", "skip_eager_cpu_warmup",
           "vllm_client_errors", "worker_lora_manager"]
