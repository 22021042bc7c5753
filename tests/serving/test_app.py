"""The app builder's output (serving.app, pure): the config's extensions, the LLM configs and the
serving args Ray Serve LLM validates."""

from __future__ import annotations

import pytest

from serving.app import llm_config_dicts, serving_args
from serving.config import ServingConfig


def test_extensions_validated():
    cfg = ServingConfig.shipped("embedded")
    assert cfg.extensions == ["evaluation.api:router"]
    assert ServingConfig.shipped("production").extensions == ["evaluation.api:router"]
    with pytest.raises(ValueError, match="import paths"):
        ServingConfig.model_validate({**cfg.model_dump(), "extensions": ["not a path"]})


def test_llm_configs_follow_the_config():
    cfg = ServingConfig.shipped("production")
    (llm,) = llm_config_dicts(cfg)
    eng = llm["engine_kwargs"]
    assert eng["enable_lora"] and eng["max_lora_rank"] == 32 and eng["max_loras"] == 1 and eng["max_model_len"] == 16000
    assert llm["lora_config"]["dynamic_lora_loading_path"] == "s3://maze-gateway-adapters/lora-adapters"
    assert llm["lora_config"]["max_num_adapters_per_replica"] == eng["max_loras"]
    assert llm["accelerator_type"] == "H100" and "accelerator_config" not in llm
    assert llm["server_cls"] == "serving.engine.llm_server:GatewayLLMServer"
    assert llm["deployment_config"]["num_replicas"] == 1  # min == max: fixed size, no autoscaling
    assert eng["mm_processor_cache_gb"] == 4.0  # the field's default: vLLM's own
    (cpu,) = llm_config_dicts(ServingConfig.shipped("embedded"))
    assert cpu["accelerator_config"] == {"kind": "cpu"}
    # The embedded engine's memory bounds: a processed-image cache sized for the soak, and an allocator
    # that returns freed blocks (jemalloc here: the test set-up installs it; tests/serving/engine/test_allocator.py).
    assert cpu["engine_kwargs"]["mm_processor_cache_gb"] == 0.5
    assert "libjemalloc.so.2" in cpu["runtime_env"]["env_vars"]["LD_PRELOAD"]
    assert cpu["runtime_env"]["env_vars"]["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"
    args = serving_args(cfg)
    assert args["ingress_cls_config"]["ingress_cls"] == "serving.ingress.gateway:GatewayIngress"
    assert args["ingress_deployment_config"]["ray_actor_options"]["num_cpus"] == 0


def test_llm_serving_args_validate():
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs

    from serving.ingress.gateway import GatewayIngress

    args = LLMServingArgs.model_validate(serving_args(ServingConfig.shipped("embedded")))
    assert args.ingress_cls_config.ingress_cls is GatewayIngress
    assert args.llm_configs[0].lora_config.max_num_adapters_per_replica == 8
