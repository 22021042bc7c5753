"""Multi-node settings of the serving config: explicit replica placement, autoscaling's start, the
manifest's custom resources, and a lost replica answered as a retryable 503 (pure parts)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from serving.app import llm_config_dicts, serving_args
from serving.config import ServingConfig
from serving.errors import ReplicaUnavailable
from serving.k8s import render_rayservice


def cluster_cfg(**replicas) -> ServingConfig:
    d = ServingConfig.shipped("cluster").model_dump(mode="json")
    d["replicas"].update(replicas)
    return ServingConfig.model_validate(d)


def test_replicas_take_the_custom_resource_and_start_at_initial():
    (llm,) = llm_config_dicts(cluster_cfg())
    dep = llm["deployment_config"]
    assert dep["ray_actor_options"] == {"resources": {"maze_replica": 1}}
    assert dep["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 4,
                                         "initial_replicas": 2}
    ingress = serving_args(cluster_cfg())["ingress_deployment_config"]["ray_actor_options"]
    assert ingress["resources"] == {"maze_head": 0.01} and ingress["num_cpus"] == 0


def test_no_resources_no_placement():
    (llm,) = llm_config_dicts(ServingConfig.shipped("production"))
    assert "ray_actor_options" not in llm["deployment_config"]


def test_initial_replicas_within_bounds():
    with pytest.raises(ValidationError, match="initial_replicas"):
        cluster_cfg(initial_replicas=3)


def test_manifest_offers_the_resources_on_the_pods():
    cfg = cluster_cfg()
    cfg = cfg.model_copy(update={"auth": cfg.auth.model_copy(update={"open": True})})  # render refuses auth off
    spec = render_rayservice(cfg)["spec"]["rayClusterConfig"]
    worker = spec["workerGroupSpecs"][0]["rayStartParams"]["resources"]
    head = spec["headGroupSpec"]["rayStartParams"]["resources"]
    assert json.loads(json.loads(worker)) == {"maze_replica": 1} and json.loads(json.loads(head)) == {"maze_head": 1}


def test_lost_replica_is_a_retryable_503():
    from ray.exceptions import ActorDiedError, ActorUnavailableError

    from serving.ingress.gateway import _replica_lost

    assert _replica_lost(ActorUnavailableError("connection reset", b"0" * 16))
    assert _replica_lost(ActorDiedError())
    assert not _replica_lost(ValueError("bad adapter"))
    err = ReplicaUnavailable("the replica serving 'maze-tiny:x' was lost")
    assert err.status_code == 503 and err.to_openai()["error"]["code"] == "replica_unavailable"
