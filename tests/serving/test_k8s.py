"""k8s/rayservice.yaml is the rendering of the production serving config and passes KubeRay's CRD."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from serving.config import ServingConfig
from serving.k8s import APP_IMPORT_PATH, render_rayservice, render_yaml
from tests.support.k8s_schema import crd_validator

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_rayservice_is_the_rendering():
    expected = render_yaml(ServingConfig.shipped("production"))
    assert (ROOT / "k8s" / "rayservice.yaml").read_text() == expected, "stale: run `maze-serve render -o k8s/rayservice.yaml`"


def test_rayservice_validates_against_kuberay_crd():
    validator = crd_validator("ray.io_rayservices.yaml")
    manifest = yaml.safe_load((ROOT / "k8s" / "rayservice.yaml").read_text())
    validator.validate(manifest)
    broken = copy.deepcopy(manifest)
    broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replica"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_serve_config_carries_the_whole_serving_config():
    cfg = ServingConfig.shipped("production")
    m = render_rayservice(cfg)
    serve = yaml.safe_load(m["spec"]["serveConfigV2"])
    (app,) = serve["applications"]
    assert app["import_path"] == APP_IMPORT_PATH
    assert ServingConfig.model_validate(app["args"]["config"]) == cfg
    worker = m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert worker["minReplicas"] == worker["maxReplicas"] == 1
    container = worker["template"]["spec"]["containers"][0]
    assert {"name": "MAZE_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "maze-gateway-redis", "key": "url"}}} \
        in container["env"]
    # The key file is a mounted Secret (updated in place by the kubelet, re-read within auth.reload_s).
    assert container["volumeMounts"] == [{"name": "api-keys", "mountPath": "/etc/maze-gateway/keys", "readOnly": True}]
    (volume,) = worker["template"]["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "maze-gateway-keys"


def test_ray_token_auth_is_on_in_the_cluster():
    """Each replica's gRPC server listens on every interface: the cluster's Ray token closes it."""
    m = render_rayservice(ServingConfig.shipped("production"))
    assert m["spec"]["rayClusterConfig"]["authOptions"] == {"mode": "token"}


def test_flat_api_keys_render_as_an_env_secret():
    data = ServingConfig.shipped("production").model_dump(mode="json")
    data["auth"] = {"api_keys_env": "MAZE_API_KEYS"}
    m = render_rayservice(ServingConfig.model_validate(data))
    container = m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "MAZE_API_KEYS",
                                 "valueFrom": {"secretKeyRef": {"name": "maze-gateway-api-keys", "key": "keys"}}}]
    assert "volumeMounts" not in container


def test_production_config_matches_the_reference():
    cfg = ServingConfig.shipped("production")
    (base,) = cfg.base_models
    assert (base.id, base.source, base.max_model_len) == ("visgym-qwen3vl", "/shared/models/visgym_sft_mixed_qwen3vl", 16000)
    assert cfg.adapters.prefix.endswith("/lora-adapters") and cfg.device == "gpu"
    assert (cfg.lora.max_rank, cfg.lora.adapters_per_replica) == (32, 1)
    assert cfg.replicas.min_replicas == cfg.replicas.max_replicas == 1


@pytest.mark.parametrize(
    "patch, match",
    [
        ({"lora": {"max_rank": 12}}, "max_rank must be one of"),
        ({"adapters": {"prefix": "/local/path"}}, "s3://"),
        ({"base_models": [{"id": "a:b", "source": "x"}]}, "without ':'"),
        ({"replicas": {"min_replicas": 3, "max_replicas": 1}}, "max_replicas"),
        ({"unknown_key": 1}, "Extra inputs"),
        ({"base_models": [{"id": "a", "source": "x", "engine_kwargs": {"max_loras": 4}}]}, "may not set"),
        ({"base_models": [{"id": "a", "source": "x", "engine_kwargs": {"mm_processor_cache_gb": 1}}]}, "may not set"),
        ({"base_models": [{"id": "a", "source": "x", "mm_cache_gb": -1}]}, "greater than or equal"),
    ],
)
def test_bad_configs_are_clear_errors(patch, match):
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data.update(patch)
    with pytest.raises(ValueError, match=match):
        ServingConfig.model_validate(data)
