"""Validate manifests against the KubeRay CRDs in tests/data/kuberay (no cluster needed)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jsonschema
import pytest
import yaml

SCHEMAS = Path(__file__).resolve().parents[1] / "data" / "kuberay"


def structural_to_jsonschema(node):
    """A CRD's openAPIV3Schema as a strict JSON schema.

    ``x-kubernetes-int-or-string`` becomes integer-or-string; objects that declare properties and
    do not preserve unknown fields reject unknown ones (``kubectl apply`` validates strictly);
    CEL rules (``x-kubernetes-validations``) and list-map hints are dropped.
    """
    if isinstance(node, list):
        return [structural_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: structural_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=4)
def crd_validator(filename: str) -> jsonschema.Draft7Validator:
    """A validator for the v1 schema of ``tests/data/kuberay/<filename>``."""
    path = SCHEMAS / filename
    if not path.exists():
        pytest.fail(f"KubeRay CRD not found at {path}")
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    # No metaschema check of this large schema (seconds): it is KubeRay's, unchanged.
    return jsonschema.Draft7Validator(structural_to_jsonschema(v1["schema"]["openAPIV3Schema"]))
