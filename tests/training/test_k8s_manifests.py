"""k8s/ manifests: the checked-in files are the rendering, and the RayCluster passes KubeRay's CRD."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support.k8s_schema import crd_validator
from training.k8s import dump_manifest, render_manifests
from training.spec import TrainSpec

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"


@pytest.fixture(scope="module")
def raycluster_schema():
    return crd_validator("ray.io_rayclusters.yaml")


@pytest.mark.parametrize("name", sorted(render_manifests()))
def test_checked_in_manifest_is_the_rendering(name):
    expected = dump_manifest(render_manifests()[name])
    assert (K8S / name).read_text() == expected, f"k8s/{name} is stale: run `maze-train manifests --out k8s`"


def test_raycluster_validates_against_kuberay_crd(raycluster_schema):
    manifest = yaml.safe_load((K8S / "raycluster.yaml").read_text())
    raycluster_schema.validate(manifest)

    broken = copy.deepcopy(manifest)
    broken["spec"]["workerGroupSpecs"][0]["replica"] = 3  # a typo the API server would refuse
    with pytest.raises(jsonschema.ValidationError):
        raycluster_schema.validate(broken)
    broken = copy.deepcopy(manifest)
    broken["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] = 0  # must be a string
    with pytest.raises(jsonschema.ValidationError):
        raycluster_schema.validate(broken)


def test_raycluster_shape_follows_the_spec():
    m = render_manifests()["raycluster.yaml"]
    head = m["spec"]["headGroupSpec"]["template"]["spec"]
    (workers,) = m["spec"]["workerGroupSpecs"]
    worker = workers["template"]["spec"]
    assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["limits"]
    assert head["containers"][0]["resources"]["limits"]["memory"] == "64Gi"
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 3
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    for pod in (head, worker):
        assert {"name": "shared", "mountPath": "/shared"} in pod["containers"][0]["volumeMounts"]
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
        assert pod["containers"][0]["image"] == TrainSpec().cluster.image

    spec = TrainSpec.model_validate(
        {"placement": {"num_nodes": 2, "gpus_per_node": 4}, "inference": {"num_engines": 8}}
    )
    (workers,) = render_manifests(spec)["raycluster.yaml"]["spec"]["workerGroupSpecs"]
    assert workers["replicas"] == 2
    assert workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_pvc_binds_the_fsx_volume():
    docs = render_manifests()
    pv, pvc = docs["fsx-pv.yaml"], docs["fsx-pvc.yaml"]
    assert pv["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == pv["spec"]["storageClassName"] == ""
    assert pvc["spec"]["accessModes"] == pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["metadata"]["namespace"] == docs["raycluster.yaml"]["metadata"]["namespace"]
