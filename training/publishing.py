"""Publish an exported training step as a served adapter (``maze-train publish``).

A step's ``policy/`` folder (SkyRL's or the local trainer's export) is fetched and pushed through
serving's adapter store, which validates it (a LoRA for this base, rank within the serving
config's ``lora.max_rank``, weights load) and publishes it atomically under a new version.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from training.checkpoints import fetch_step


@dataclass(frozen=True)
class Published:
    """An adapter version now served as ``{base}:{name}``."""

    base: str
    name: str
    version: str
    step: int


def publish(export_path: str, step: int, name: str, *, serving_config: str | None = None,
            base: str | None = None, force: bool = False, candidate: bool = False) -> Published:
    """Push step ``step`` under ``export_path`` (local or s3://) to the serving config's adapter store.

    Args:
        export_path: the run's export path.
        step: the global step to publish.
        name: the adapter name to publish as.
        serving_config: a shipped serving config name or a YAML path (default: the embedded one).
        base: the base model id (default: the serving config's first).
        force: replace an existing adapter of that name.
        candidate: publish the version without serving it, as a candidate for the offline gate (the name
            must be published already).

    Returns:
        The published adapter's base, name and version.

    Raises:
        ValueError: ``base`` is not one of the serving config's base models.
        FileNotFoundError: the export has no such step.
        serving.errors.ServingError: the store refused the adapter or is unreachable.
    """
    # Serving (boto3, the store) is only needed here, not by the launcher's other commands.
    from serving.adapters import AdapterStore, export_s3_env
    from serving.config import load_config

    cfg = load_config(serving_config)
    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:
        raise ValueError(f"unknown base {base!r}")
    folder = fetch_step(export_path, step)
    try:
        export_s3_env(cfg)
        ref = AdapterStore(cfg.adapters).push(folder, name, base=spec.id, base_source=spec.source,
                                              max_rank=cfg.lora.max_rank, force=force, candidate=candidate,
                                              vision_tower=cfg.lora.vision_tower)
    finally:  # the fetched copy (a download for an S3 export) is only needed for the push
        shutil.rmtree(folder, ignore_errors=True)
    return Published(base=spec.id, name=ref.name, version=ref.version, step=step)
