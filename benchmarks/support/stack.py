"""The embedded gateway stack for benchmarks and tests: model assets and a config on free ports.

Uses the delivered ``models/maze-tiny`` (+ ``models/maze-grpo``) when present, else an untrained
model and random LoRA adapters built with ``training.tiny.model.builder`` into a cache folder
(``~/.cache/maze-gateway/dev``, ~10 s once). Extra random adapters for the same base are always
built there (tests push them during the run).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from serving.config import REPO_ROOT, ServingConfig
from serving.local import free_port

LAYOUT_ENV = "MAZE_TEST_LAYOUT"  # run the stack tests on the other layout: MAZE_TEST_LAYOUT=standard|colocated
INGRESS_ENV = "MAZE_TEST_INGRESS"  # and on the other ingress: MAZE_TEST_INGRESS=proxy|direct
CACHE = Path.home() / ".cache" / "maze-gateway" / "dev"


@dataclass
class Assets:
    base_dir: Path
    shipped: dict[str, Path]  # adapters seeded on up (name -> folder)
    extra: list[Path] = field(default_factory=list)  # more random adapters for the same base


def dev_assets(n_extra: int = 8) -> Assets:
    """Base model folder, the adapters to seed, and ``n_extra`` further random adapters."""
    from training.tiny.model import BuilderConfig, build_model

    shipped_base = REPO_ROOT / "models" / "maze-tiny"
    if (shipped_base / "config.json").is_file() and (REPO_ROOT / "models" / "maze-grpo" / "adapter_config.json").is_file():
        base, shipped = shipped_base, None
    else:
        base = CACHE / "maze-tiny"
        if not (base / "config.json").is_file():
            build_model(base, BuilderConfig(seed=0))
        shipped = {"maze-grpo": _lora(base, CACHE / "lora-0", 0)}
    tag = hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:8]
    extra = [_lora(base, CACHE / f"extra-{tag}-{i}", 100 + i) for i in range(n_extra)]
    if shipped is None:
        from serving.local.embedded import shipped_adapters

        shipped = shipped_adapters()
    return Assets(base_dir=base, shipped=shipped, extra=extra)


def _lora(base: Path, out: Path, seed: int) -> Path:
    from training.tiny.model import build_random_lora

    if not (out / "adapter_model.safetensors").is_file():
        build_random_lora(base, out, rank=8, seed=seed)
    return out


def stack_config(base_dir: Path, *, name: str = "maze-gateway-test", auth_env: str | None = None,
                 keys_file: str | None = None, resolve_ttl_s: float = 1.0, adapters_per_replica: int | None = None,
                 layout: str | None = None, ingress: str | None = None, vision_tower: bool = False) -> ServingConfig:
    """The shipped embedded config on free ports, pointing at ``base_dir``; ``layout`` and ``ingress``
    (default: the embedded config's, or ``$MAZE_TEST_LAYOUT`` / ``$MAZE_TEST_INGRESS``) pick the
    Serve layout and who listens on the port; ``auth_env`` (flat keys) and ``keys_file`` (scoped
    keys, re-read every 2 s) turn auth on; ``vision_tower`` applies adapters' vision-tower LoRA."""
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["layout"] = layout or os.environ.get(LAYOUT_ENV) or d["layout"]
    d["ingress"] = ingress or os.environ.get(INGRESS_ENV) or d["ingress"]
    if d["layout"] != "colocated":
        d["ingress"] = "proxy"  # direct ingress needs the colocated layout
    d["name"] = name
    d["base_models"][0]["source"] = str(base_dir)
    d["port"] = free_port()
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    d["adapters"]["resolve_ttl_s"] = resolve_ttl_s
    d["auth"] = {"api_keys_env": auth_env, "keys_file": keys_file, **({"reload_s": 2.0} if keys_file else {})}
    d["limits"] = {"max_body_bytes": 2 * 2**20, "max_images_per_request": 4, "max_image_bytes": 256 * 2**10}
    if adapters_per_replica:
        d["lora"]["adapters_per_replica"] = adapters_per_replica
    d["lora"]["vision_tower"] = vision_tower
    return ServingConfig.model_validate(d)


def cluster_stack_config(**replicas) -> ServingConfig:
    """The shipped ``cluster`` config (standard layout, 1..2 replicas placed one per worker node) on
    free ports, serving the shipped models/maze-tiny; ``replicas`` overrides its replica fields."""
    d = ServingConfig.shipped("cluster").model_dump(mode="json")
    d["port"] = free_port()
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    d["adapters"]["resolve_ttl_s"] = 1.0
    d["replicas"].update(replicas)
    return ServingConfig.model_validate(d)
