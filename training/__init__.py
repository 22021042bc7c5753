"""``maze-train``: SkyRL GRPO jobs for the maze agent on any Ray cluster, from one typed spec.

The launcher: a :class:`TrainSpec` renders the SkyRL job's command with every override
(:func:`render_entrypoint`), its datasets and its RayCluster/FSx manifests (:func:`render_manifests`);
:class:`JobClient` submits, follows and stops the job on a cluster (:func:`follow_metrics` turns its
log into step metrics), and :func:`publish` serves an exported step as a LoRA adapter.

SkyRL's own pieces (the skyrl-gym env, datasets, the job entrypoint, the checked key list) live in
:mod:`training.skyrl`; :mod:`training.tiny` is the lab that builds and trains the embedded model
(maze-tiny and its GRPO adapter), reached from here only through the local trainer job
(:mod:`training.local_job`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Public name -> the module that defines it. Imported on first use, so that ``training.tiny`` (the
# lab) and the job entrypoints do not load the launcher, and ``import training`` stays cheap.
_EXPORTS = {
    "ExportStep": "training.checkpoints",
    "fetch_step": "training.checkpoints",
    "list_steps": "training.checkpoints",
    "JobClient": "training.jobs",
    "JobError": "training.jobs",
    "JobInfo": "training.jobs",
    "follow_metrics": "training.jobs",
    "new_submission_id": "training.jobs",
    "render_manifests": "training.k8s",
    "write_manifests": "training.k8s",
    "local_entrypoint": "training.local_job",
    "StepMetrics": "training.metrics",
    "parse_log_lines": "training.metrics",
    "entrypoint_argv": "training.overrides",
    "render_entrypoint": "training.overrides",
    "to_skyrl_overrides": "training.overrides",
    "Published": "training.publishing",
    "publish": "training.publishing",
    "TrainSpec": "training.spec",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from training.checkpoints import ExportStep, fetch_step, list_steps
    from training.jobs import JobClient, JobError, JobInfo, follow_metrics, new_submission_id
    from training.k8s import render_manifests, write_manifests
    from training.local_job import local_entrypoint
    from training.metrics import StepMetrics, parse_log_lines
    from training.overrides import entrypoint_argv, render_entrypoint, to_skyrl_overrides
    from training.publishing import Published, publish
    from training.spec import TrainSpec


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'training' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
