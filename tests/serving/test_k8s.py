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
    keys = [e for e in container["env"] if e["name"] == "MAZE_API_KEYS"]
    assert keys == [{"name": "MAZE_API_KEYS",
                     "valueFrom": {"secretKeyRef": {"name": "maze-gateway-api-keys", "key": "keys"}}}]
    # The config's engine env rides beside it as plain values, never as the secret.
    assert {e["name"]: e.get("value") for e in container["env"] if e["name"] != "MAZE_API_KEYS"} == data["env"]
    assert "volumeMounts" not in container


def test_production_config_matches_the_reference():
    cfg = ServingConfig.shipped("production")
    (base,) = cfg.base_models
    assert (base.id, base.source, base.max_model_len) == ("visgym-qwen3vl", "/shared/models/visgym_sft_mixed_qwen3vl", 16000)
    assert cfg.adapters.prefix.endswith("/lora-adapters") and cfg.device == "gpu"
    assert (cfg.lora.max_rank, cfg.lora.adapters_per_replica) == (32, 1)
    assert cfg.replicas.min_replicas == cfg.replicas.max_replicas == 1


def test_the_gpu_manifest_carries_no_cpu_engine_setting():
    """The production (GPU) config leaves every CPU engine's setting unset or off, and its manifest does not
    name the CPU LoRA kernels at all (a rendered `cpu_kernels: grouped` read as if it applied)."""
    cfg = ServingConfig.shipped("production")
    assert cfg.lora.cpu_kernels is None and cfg.cpu_lora_kernels is None and not cfg.grouped_cpu_lora
    assert (cfg.lora.cpu_merged_slots, cfg.cpu_affinity, cfg.allocator) == (0, "none", "system")
    assert not [k for k in cfg.env if k.startswith("VLLM_CPU_")]
    config = yaml.safe_load(render_rayservice(cfg)["spec"]["serveConfigV2"])["applications"][0]["args"]["config"]
    assert "cpu_kernels" not in config["lora"]
    assert [ServingConfig.shipped(n).cpu_lora_kernels for n in ("embedded", "cluster")] == ["grouped", "grouped"]


@pytest.mark.parametrize("patch, named", [
    ({"lora": {"cpu_kernels": "grouped"}}, "lora.cpu_kernels 'grouped' picks a CPU engine's LoRA arithmetic"),
    ({"lora": {"cpu_kernels": "vllm"}}, "lora.cpu_kernels 'vllm'"),
    ({"lora": {"cpu_merged_slots": 2}}, "lora.cpu_merged_slots keeps merged weights"),
    ({"cpu_affinity": "split"}, "cpu_affinity 'split' places a CPU engine's worker"),
    ({"allocator": "jemalloc"}, "allocator 'jemalloc' preloads a CPU engine's malloc"),
    ({"env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HOME": "/x"}}, "env ['VLLM_CPU_KVCACHE_SPACE'] is read by vLLM's CPU"),
])
def test_cpu_only_settings_are_refused_on_a_gpu_config(patch, named):
    data = ServingConfig.shipped("production").model_dump(mode="json")
    for key, value in patch.items():
        data[key] = {**data[key], **value} if key == "lora" else value
    with pytest.raises(ValueError) as caught:
        ServingConfig.model_validate(data)
    message = str(caught.value)
    assert "this config's device is 'gpu', and it sets what only a CPU engine uses" in message
    assert named in message and "docs/gpu.md" in message
    data["device"] = "cpu"  # the same settings on a CPU config are the CPU engine's own
    assert ServingConfig.model_validate(data).device == "cpu"


def test_every_cpu_only_setting_is_named_at_once():
    data = ServingConfig.shipped("production").model_dump(mode="json")
    data["lora"]["cpu_merged_slots"], data["allocator"] = 2, "jemalloc"
    with pytest.raises(ValueError, match="lora.cpu_merged_slots .*; allocator 'jemalloc'"):
        ServingConfig.model_validate(data)


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


def _embedded(**changes) -> dict:
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data.update(changes)
    return data


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gateway.internal"])
def test_auth_off_on_a_network_address_is_refused(host):
    with pytest.raises(ValueError) as caught:
        ServingConfig.model_validate(_embedded(host=host))
    message = str(caught.value)
    assert f"auth is off and host is {host!r}" in message
    assert "push, promote and delete adapters" in message
    assert "auth.keys_file" in message and "host: 127.0.0.1" in message and "auth: {open: true}" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_auth_off_on_loopback_starts(host):
    assert ServingConfig.model_validate(_embedded(host=host)).host == host


def test_auth_open_on_purpose_or_keys_start_on_any_address():
    assert ServingConfig.model_validate(_embedded(host="0.0.0.0", auth={"open": True})).auth.open
    assert ServingConfig.model_validate(_embedded(host="0.0.0.0", auth={"keys_env": "K"})).auth.enabled
    with pytest.raises(ValueError, match="auth.open: true declares a gateway without keys"):
        ServingConfig.model_validate(_embedded(auth={"open": True, "keys_file": "/k.yaml"}))


def _limited(layout: str, replicas: dict, store: str = "memory") -> dict:
    data = _embedded(layout=layout, ingress="proxy", replicas=replicas,
                     auth={"keys_env": "K", "store": {"kind": store}})
    return data


@pytest.mark.parametrize("layout, replicas", [
    ("standard", {"min_replicas": 1, "max_replicas": 1, "ingress_replicas": 2}),
    ("standard", {"min_replicas": 1, "max_replicas": 3}),  # ingress autoscaling
    ("colocated", {"min_replicas": 2, "max_replicas": 2}),
    ("colocated", {"min_replicas": 1, "max_replicas": 2}),
])
def test_memory_limit_store_with_several_ingress_replicas_is_refused(layout, replicas):
    with pytest.raises(ValueError) as caught:
        ServingConfig.model_validate(_limited(layout, replicas))
    message = str(caught.value)
    assert "auth.store.kind 'memory'" in message and "once per replica" in message
    assert "auth.store: {kind: redis}" in message and "replicas.ingress_replicas: 1" in message
    assert ServingConfig.model_validate(_limited(layout, replicas, store="redis")).several_ingress_replicas


@pytest.mark.parametrize("layout, replicas", [
    ("standard", {"min_replicas": 1, "max_replicas": 3, "ingress_replicas": 1}),
    ("standard", {"min_replicas": 2, "max_replicas": 2}),
    ("colocated", {"min_replicas": 1, "max_replicas": 1}),
])
def test_memory_limit_store_with_one_ingress_replica_starts(layout, replicas):
    assert not ServingConfig.model_validate(_limited(layout, replicas)).several_ingress_replicas


def test_memory_store_without_keys_is_no_limit_and_starts():
    data = _embedded(layout="standard", ingress="proxy", replicas={"min_replicas": 1, "max_replicas": 3})
    assert not ServingConfig.model_validate(data).auth.enabled


def test_shipped_configs_pass_the_safety_rules():
    for name in ("embedded", "production", "cluster"):
        ServingConfig.shipped(name)  # a refusal would raise here


def test_render_refuses_a_config_without_auth():
    data = ServingConfig.shipped("production").model_dump(mode="json")
    data["auth"] = {}
    data["host"] = "127.0.0.1"  # loopback in the config does not help: the RayService binds 0.0.0.0
    with pytest.raises(ValueError) as caught:
        render_rayservice(ServingConfig.model_validate(data))
    message = str(caught.value)
    assert "has auth off" in message and "listens on 0.0.0.0" in message
    assert "auth.keys_file" in message and "auth: {open: true}" in message
    data["auth"] = {"open": True}
    manifest = render_rayservice(ServingConfig.model_validate(data))
    serve = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    assert serve["applications"][0]["args"]["config"]["auth"]["open"] is True


def test_maze_serve_render_refuses_with_a_clear_error(tmp_path):
    from click.testing import CliRunner

    from serving.cli import main

    data = ServingConfig.shipped("production").model_dump(mode="json")
    data["auth"], data["host"] = {}, "127.0.0.1"
    path = tmp_path / "open.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["-c", str(path), "render"])
    assert result.exit_code == 2, result.output
    assert "has auth off" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("dtype", ["float32", "FLOAT"])
def test_a_float32_base_is_refused_on_a_gpu_config(dtype):
    """vLLM's GPU LoRA kernels assert 16-bit inputs: a float32 engine never starts, so the config says so."""
    data = ServingConfig.shipped("production").model_dump(mode="json")
    data["base_models"][0]["engine_kwargs"]["dtype"] = dtype
    with pytest.raises(ValueError, match=r"set engine_kwargs dtype float32 on a GPU config: vLLM's GPU LoRA kernels "
                                         r"take float16 or bfloat16 only"):
        ServingConfig.model_validate(data)
    data["base_models"][0]["engine_kwargs"]["dtype"] = "bfloat16"
    ServingConfig.model_validate(data)
    embedded = ServingConfig.shipped("embedded")  # a CPU engine runs float32 LoRA
    assert embedded.device == "cpu" and embedded.base_models[0].engine_kwargs.get("dtype") == "float32"
