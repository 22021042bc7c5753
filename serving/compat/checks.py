"""What the gateway relies on in Ray Serve LLM and vLLM, checked against the installed versions.

A name at a new place fails at import with :class:`~serving.compat.places.InternalsMissing`; a
method that lost a parameter the gateway passes, or an attribute the gateway reads that the class no
longer sets, would fail only when a request reaches it. :func:`problems` reads all of them from the
installed code (signatures, and the ``self.<name> =`` assignments in each class's source), so a
stack is checked without starting an engine.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import typing
from typing import Any

from serving.compat.access import MULTIPLEX_ATTR
from serving.compat.places import PLACES, InternalsMissing, resolve

#: name -> the methods the gateway overrides or calls, each with the parameters it names.
METHODS: dict[str, dict[str, tuple[str, ...]]] = {
    "LLMServer": {"_init_multiplex_loader": ("model_downloader_cls",),
                  "_run_request": ("request", "engine_method", "batch_output_stream", "raw_request_info"),
                  "_maybe_resolve_lora_from_multiplex": (), "start": (), "sync_init": ("llm_config",),
                  "get_deployment_options": ("llm_config",), "check_health": (), "chat": (), "completions": (),
                  "tokenize": ()},
    "LoraModelLoader": {"load_model_from_config": ("lora_model_id", "llm_config"),
                        "load_model": ("lora_model_id", "lora_mirror_config"), "_model_dir_path": ("model_id",),
                        "_download_lora": ("lora_mirror_config",)},
    "ModelMultiplexWrapper": {"__init__": ("model_load_func", "self_arg", "max_num_models_per_replica"),
                              "load_model": ("model_id",), "unload_model_lru": ()},
    "OpenAiIngress": {"__init__": ("llm_deployments", "model_cards", "lora_paths"), "_get_model_id": ("model",),
                      "_get_response": ("body", "call_method", "raw_request"),
                      "_process_llm_request": ("body", "call_method", "raw_request"),
                      "get_deployment_options": ("llm_configs",), "check_health": ()},
    "PowerOfTwoChoicesRequestRouter": {"initialize_state": (),
                                       "choose_replicas": ("candidate_replicas", "pending_request")},
    "VLLMEngine": {"resolve_lora": ("disk_lora_model",), "shutdown": ()},
    "AsyncLLM": {"generate": (), "collective_rpc": ("method", "args"), "remove_lora": ("lora_id",)},
    "OpenAIServingModels": {"unload_lora_adapter": ("request",)},
    "WorkerBase": {"add_lora": ("lora_request",)},
    "LoRAModelManager": {"activate_adapter": ("lora_id",)},
    "BaseLinearLayerWithLoRA": {"_apply_sync": ("x", "bias")},
    "CPUModelRunner": {"warming_up_model": ()},
    "PunicaWrapperCPU": {"update_metadata": ("mapping", "lora_index_to_id", "max_loras", "vocab_size"),
                         "add_shrink": ("y", "x", "lora_a_stacked", "scale"),
                         "add_expand": ("y", "x", "lora_b_stacked", "output_slices", "offset_start", "add_inputs"),
                         "add_lora_embedding": ("y", "x", "lora_b_stacked", "add_inputs"),
                         "add_lora_linear": ("y", "x", "lora_a_stacked", "lora_b_stacked", "scale", "output_slices",
                                             "buffer"),
                         "add_lora_logits": ("y", "x", "lora_a_stacked", "lora_b_stacked", "scale", "buffer")},
}
#: name -> the parameters the gateway passes a function by name.
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "make_fastapi_ingress": ("cls", "endpoint_map", "app"), "build_llm_deployment": ("llm_config",),
    "to_model_metadata": ("model_id", "model_config"),
    "apply_deployment_defaults": ("defaults", "user_deployment_config"),
    "get_response_for_error": ("e", "request_id"), "get_request_id": ("request",), "ingress_app": (),
    "sync_files_with_lock": ("bucket_uri", "local_path", "timeout"), "multiplexed": ("max_num_models_per_replica",),
    "sanitize_chat_request": ("request",),
}
#: name -> attributes of its instances that the gateway reads.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "LLMServer": ("_llm_config", "engine"),
    "LoraModelLoader": ("download_timeout_s", "lora_root"),
    "ModelMultiplexWrapper": ("models",),
    "OpenAiIngress": ("_model_cards", "_default_serve_handles"),
    "PowerOfTwoChoicesRequestRouter": ("replica_queue_len_cache",),
    "VLLMEngine": ("_engine_client", "_oai_models"),
    "OpenAIServingModels": ("lora_requests",),
    "LoRAModelRunnerMixin": ("lora_manager",),
    "WorkerLoRAManager": ("_adapter_manager",),
    "LoRAModelManager": ("_registered_adapters", "modules", "mm_mapping", "supports_mm",
                         "supports_tower_connector_lora", "lora_index_to_id"),
    "LoRAModel": ("loras",),
    "LoRALayerWeights": ("lora_a", "lora_b"),
    "BaseLinearLayerWithLoRA": ("base_layer", "punica_wrapper"),
}
#: name -> fields of a config or record type that the gateway sets or reads.
FIELDS: dict[str, tuple[str, ...]] = {
    "LLMConfig": ("model_loading_config", "engine_kwargs", "lora_config", "deployment_config", "runtime_env",
                  "server_cls", "experimental_configs", "accelerator_config", "accelerator_type"),
    "LoraConfig": ("dynamic_lora_loading_path", "max_num_adapters_per_replica", "download_timeout_s",
                   "max_download_tries"),
    "LoraMirrorConfig": ("lora_model_id", "bucket_uri", "max_total_tokens", "sync_args"),
    "LLMServingArgs": ("llm_configs", "ingress_cls_config", "ingress_deployment_config"),
    "EngineArgs": ("max_model_len", "mm_processor_cache_gb", "enable_lora", "max_lora_rank", "max_loras",
                   "worker_extension_cls", "enable_tower_connector_lora"),
    "LoRARequest": ("lora_int_id", "lora_path"),
    "RequestStateStats": ("arrival_time", "first_token_latency"),
    "StreamOptions": ("include_usage", "continuous_usage_stats"),
    "UnloadLoRAAdapterRequest": ("lora_name",),
    "TokenizeChatRequest": ("messages",),
    "TokenizeCompletionRequest": ("prompt", "add_special_tokens"),
    "TokenizeResponse": ("count",),
}
#: The routes the gateway's ingress keeps from Ray's (serving.ingress.gateway.ENDPOINTS builds on them).
ENDPOINTS = ("chat", "completions", "models", "model_data")


def _parameters(func: Any) -> set[str]:
    try:
        return set(inspect.signature(func).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return set()


@functools.cache
def _assigned(cls: type) -> frozenset[str]:
    """Attributes ``cls`` (or a base in its MRO) sets on ``self`` in its source, or declares in its body."""
    names: set[str] = set()
    for klass in cls.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):  # builtins and C types have no source
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
        names.update(n.target.id for n in tree.body[0].body
                     if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
    return frozenset(names)


def _fields(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    found = set(getattr(cls, "model_fields", {})) | set(getattr(cls, "__struct_fields__", ()))
    return found or _parameters(cls)


def _method_problems(name: str, cls: type, methods: dict[str, tuple[str, ...]]) -> list[str]:
    out = []
    for method, params in methods.items():
        func = getattr(cls, method, None)
        if func is None:
            out.append(f"{name}.{method}: no such method")
        elif missing := [p for p in params if p not in _parameters(func)]:
            out.append(f"{name}.{method}: no parameter {', '.join(missing)}")
    return out


def _table_problems() -> list[str]:
    out = []
    for name, methods in METHODS.items():
        out += _method_problems(name, resolve(name), methods)
    for name, params in FUNCTIONS.items():
        if missing := [p for p in params if p not in _parameters(resolve(name))]:
            out.append(f"{name}: no parameter {', '.join(missing)}")
    for name, attrs in ATTRIBUTES.items():
        cls = resolve(name)
        out += [f"{name}.{a}: not set by the class" for a in attrs if not hasattr(cls, a) and a not in _assigned(cls)]
    for name, fields in FIELDS.items():
        known = _fields(resolve(name))
        out += [f"{name}.{f}: no such field" for f in fields if f not in known]
    return out


def _other_problems() -> list[str]:
    """The few reliances that are not a name, parameter, attribute or field."""
    from serving.config import VLLM_LORA_RANKS

    out = []
    if MULTIPLEX_ATTR not in inspect.getsource(resolve("multiplexed")):
        out.append(f"serve.multiplexed no longer keeps its LRU in {MULTIPLEX_ATTR}")
    context = resolve("serve_context")
    out += [f"ray.serve.context.{a}: missing" for a in ("_serve_request_context", "_get_serve_request_context",
                                                         "_get_global_client") if not hasattr(context, a)]
    if "multiplexed_model_id" not in _fields(context._RequestContext):
        out.append("ray.serve.context._RequestContext: no field multiplexed_model_id")
    if missing := [e for e in ENDPOINTS if e not in resolve("DEFAULT_ENDPOINTS")]:
        out.append(f"Ray's ingress DEFAULT_ENDPOINTS: no {', '.join(missing)}")
    app = resolve("ingress_app")()  # serving.ingress.middleware swaps this error wrapper for its own
    if not any(getattr(m.kwargs.get("dispatch"), "__name__", "") == "_handle_application_exceptions"
               for m in app.user_middleware):
        out.append("Ray's ingress app has no _handle_application_exceptions middleware to replace")
    ranks = typing.get_args(resolve("LoRAConfig").__dataclass_fields__["max_lora_rank"].type)
    if ranks and tuple(ranks) != VLLM_LORA_RANKS:
        out.append(f"vLLM's LoRA ranks are {ranks}, serving.config.VLLM_LORA_RANKS says {VLLM_LORA_RANKS}")
    return out


def problems() -> list[str]:
    """Everything the gateway relies on that the installed Ray and vLLM lack, in words; empty when none."""
    missing = []
    for name in PLACES:
        try:
            resolve(name)
        except InternalsMissing as exc:
            missing.append(str(exc))
    if missing:  # the deeper checks need the names
        return missing
    return _table_problems() + _other_problems()


__all__ = ["ATTRIBUTES", "ENDPOINTS", "FIELDS", "FUNCTIONS", "METHODS", "problems"]
