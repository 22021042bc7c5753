"""Build the Ray Serve LLM application from a :class:`ServingConfig` (pure: no I/O).

One ``LLMConfig`` per base model (vLLM with LoRA enabled, adapters from the S3 prefix, served by
:class:`serving.engine.llm_server.GatewayLLMServer`) behind :class:`serving.ingress.gateway.GatewayIngress`
(``layout: standard``), or, with ``layout: colocated``, one deployment
(:class:`serving.ingress.colocated.ColocatedGateway`) that is the ingress and runs that server in-process.

This mirrors ``ray.serve.llm.build_openai_app`` (same validation through ``LLMServingArgs``,
same ``ingress_cls_config`` contract) with one difference: Ray's builder creates the ingress
FastAPI app internally, leaving no hook for middleware or extra routers, so we pass our own app
(:func:`serving.ingress.create_app`) to ``make_fastapi_ingress``.

``build_app_from_args`` is the import path of the RayService (``serving.k8s``).
"""

from __future__ import annotations

import logging
import pprint
from typing import Any

from serving.adapters import s3_env
from serving.config import ServingConfig
from serving.engine import (
    COVERAGE_EXTENSION_PATH,
    MERGED_SLOTS_ENV,
    SERVER_CLS_PATH,
    WORKER_EXTENSION_PATH,
    allocator_env,
)
from serving.ingress import INGRESS_CLS_PATH
from serving.placement import ROUTER_PATH

log = logging.getLogger(__name__)

COLOCATED_DEPLOYMENT = "ColocatedGateway"


def _fixed_size(cfg: ServingConfig) -> bool:
    return cfg.replicas.min_replicas == cfg.replicas.max_replicas


def _router_config(cfg: ServingConfig) -> dict[str, Any]:
    """The LLM deployment's request router: serving.placement.router's, unless the config keeps Ray's (or the
    layout has no handle between an ingress and the engines to route on)."""
    if cfg.routing.policy == "affinity" or cfg.layout == "colocated":
        return {}
    # By import path: building the app imports neither Ray's router nor vLLM.
    return {"request_router_config": {"request_router_class": ROUTER_PATH,
                                      "request_router_kwargs": {"spread_threshold": cfg.routing.spread_threshold}}}


def _deployment_config(cfg: ServingConfig) -> dict[str, Any]:
    r = cfg.replicas
    # The replica actor's custom resources land in the first bundle of its placement group
    # (Ray Serve LLM merges them), which is what pins a replica to a node that offers them.
    placement = {"ray_actor_options": {"resources": dict(r.resources)}} if r.resources else {}
    placement.update(_router_config(cfg))
    if _fixed_size(cfg):
        # A fixed replica count, not autoscaling with min == max: autoscaling makes every handle
        # push queue metrics to the Serve controller, which on a 2-core node cost ~0.7 CPU under load.
        return {"num_replicas": r.min_replicas, "max_ongoing_requests": r.max_ongoing_requests, **placement}
    autoscaling = {"min_replicas": r.min_replicas, "max_replicas": r.max_replicas,
                   "target_ongoing_requests": r.target_ongoing_requests}
    if r.initial_replicas is not None:
        autoscaling["initial_replicas"] = r.initial_replicas
    return {"autoscaling_config": autoscaling, "max_ongoing_requests": r.max_ongoing_requests, **placement}


def llm_config_dicts(cfg: ServingConfig) -> list[dict[str, Any]]:
    """The ``LLMConfig`` of each base model, as plain dicts (what a Serve YAML would hold)."""
    env = {**s3_env(cfg), **cfg.env, **allocator_env(cfg.allocator, cfg.env)}
    if cfg.grouped_cpu_lora and cfg.lora.cpu_merged_slots:
        env[MERGED_SLOTS_ENV] = str(cfg.lora.cpu_merged_slots)
    out = []
    for m in cfg.base_models:
        engine = {
            **m.engine_kwargs,
            "max_model_len": m.max_model_len,
            "mm_processor_cache_gb": m.mm_cache_gb,
            "enable_lora": True,
            "max_lora_rank": cfg.lora.max_rank,
            # vLLM holds max_loras adapters per batch; Ray keeps as many per replica: keep them equal
            # so an adapter Ray thinks is resident never needs an engine-side swap.
            "max_loras": cfg.lora.adapters_per_replica,
        }
        # vLLM mixes this class into its worker: the replica asks it what LoRA applied of each adapter
        # (serving.engine.lora_coverage); the grouped one also installs the grouped CPU LoRA kernels there.
        engine["worker_extension_cls"] = WORKER_EXTENSION_PATH if cfg.grouped_cpu_lora else COVERAGE_EXTENSION_PATH
        if cfg.lora.vision_tower:
            engine["enable_tower_connector_lora"] = True
        llm: dict[str, Any] = {
            "model_loading_config": {"model_id": m.id, "model_source": m.resolved_source()},
            "engine_kwargs": engine,
            "lora_config": {
                "dynamic_lora_loading_path": cfg.adapters.prefix,
                "max_num_adapters_per_replica": cfg.lora.adapters_per_replica,
                "download_timeout_s": cfg.lora.download_timeout_s,
                "max_download_tries": cfg.lora.max_download_tries,
            },
            "deployment_config": _deployment_config(cfg),
            "runtime_env": {"env_vars": env},
            "server_cls": SERVER_CLS_PATH,
        }
        if cfg.stream_batching_ms is not None:
            llm["experimental_configs"] = {"stream_batching_interval_ms": cfg.stream_batching_ms}
        if cfg.device == "cpu":
            llm["accelerator_config"] = {"kind": "cpu"}
        elif cfg.accelerator_type:
            llm["accelerator_type"] = cfg.accelerator_type
        out.append(llm)
    return out


def serving_args(cfg: ServingConfig) -> dict[str, Any]:
    """``LLMServingArgs`` for ``cfg`` as a dict."""
    return {
        "llm_configs": llm_config_dicts(cfg),
        "ingress_cls_config": {
            "ingress_cls": INGRESS_CLS_PATH,
            "ingress_extra_kwargs": {"config": cfg.model_dump(mode="json")},
        },
        # num_cpus 0: the ingress is async I/O only, and on a small node the LLM server's
        # placement group takes every CPU (the app would never be scheduled otherwise).
        "ingress_deployment_config": {
            "ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": s3_env(cfg)},
                                  **({"resources": dict(cfg.replicas.ingress_resources)}
                                     if cfg.replicas.ingress_resources else {})},
            **({"num_replicas": cfg.replicas.ingress_replicas or 1}
               if _fixed_size(cfg) or cfg.replicas.ingress_replicas else {}),
        },
    }


def build_app(cfg: ServingConfig):
    """The Serve application for ``cfg`` (deploy with ``serve.run``), in the config's ``layout``."""
    from ray import serve

    from serving.compat import (
        LLMServingArgs,
        apply_deployment_defaults,
        build_llm_deployment,
        make_fastapi_ingress,
        to_model_metadata,
    )
    from serving.ingress import ENDPOINTS, create_app

    args = LLMServingArgs.model_validate(serving_args(cfg))
    llm_configs = args.llm_configs
    model_cards = {c.model_id: to_model_metadata(c.model_id, c) for c in llm_configs}
    lora_paths = {c.model_id: c.lora_config.dynamic_lora_loading_path for c in llm_configs}
    if cfg.layout == "colocated":
        return _build_colocated(cfg, llm_configs[0], model_cards, lora_paths)
    ingress_cls = args.ingress_cls_config.ingress_cls
    options = apply_deployment_defaults(ingress_cls.get_deployment_options(llm_configs), args.ingress_deployment_config)
    log.info("gateway %s: models %s, adapters %s, ingress options\n%s", cfg.name,
             [c.model_id for c in llm_configs], cfg.adapters.prefix, pprint.pformat(options))
    ingress = make_fastapi_ingress(ingress_cls, endpoint_map=ENDPOINTS, app=create_app(cfg))
    return serve.deployment(ingress, **options).bind(
        llm_deployments={c.model_id: build_llm_deployment(c) for c in llm_configs},
        model_cards=model_cards,
        lora_paths=lora_paths,
        **args.ingress_cls_config.ingress_extra_kwargs,
    )


def colocated_deployment_options(llm_config) -> dict[str, Any]:
    """The one deployment's options: those of the LLM-server deployment it replaces (placement
    group with the engine's bundles, runtime env, replicas, health checks), under its own name."""
    from serving.compat import DEFAULT_DEPLOYMENT_OPTIONS, apply_deployment_defaults
    from serving.ingress import server_class

    options = apply_deployment_defaults(DEFAULT_DEPLOYMENT_OPTIONS,
                                        server_class(llm_config).get_deployment_options(llm_config))
    options["name"] = COLOCATED_DEPLOYMENT
    return options


def _build_colocated(cfg: ServingConfig, llm_config, model_cards: dict, lora_paths: dict):
    from ray import serve

    from serving.compat import make_fastapi_ingress
    from serving.ingress import ENDPOINTS, ColocatedGateway, create_app

    options = colocated_deployment_options(llm_config)
    log.info("gateway %s (colocated): model %s, adapters %s, options\n%s", cfg.name, llm_config.model_id,
             cfg.adapters.prefix, pprint.pformat(options))
    ingress = make_fastapi_ingress(ColocatedGateway, endpoint_map=ENDPOINTS, app=create_app(cfg))
    return serve.deployment(ingress, **options).bind(
        llm_config=llm_config, model_cards=model_cards, lora_paths=lora_paths,
        config=cfg.model_dump(mode="json"),
    )


def build_app_from_args(args: dict[str, Any]):
    """Serve ``import_path`` entry: ``args = {"config": <ServingConfig as a dict>}``."""
    return build_app(ServingConfig.model_validate(args["config"]))
