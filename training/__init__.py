"""``maze-train``: SkyRL GRPO jobs for the maze agent on any Ray cluster, from one typed spec.

The launcher: a :class:`TrainSpec` renders the SkyRL job's command with every override
(:func:`render_entrypoint`), its datasets and its RayCluster/FSx manifests (:func:`render_manifests`);
:class:`JobClient` submits, follows and stops the job on a cluster (:func:`follow_metrics` turns its
log into step metrics), :func:`publish` serves an exported step as a LoRA adapter, and :func:`watch`
does that for every step a run exports, scoring each through a gateway into a served curve.

SkyRL's own pieces (the skyrl-gym env, datasets, the job entrypoint, the checked key list) live in
:mod:`training.skyrl`; :mod:`training.tiny` is the lab that builds and trains the embedded model
(maze-tiny and its GRPO adapter), reached from here only through the local trainer job
(:mod:`training.local_job`).
"""

from training.checkpoints import ExportStep, fetch_step, list_steps
from training.errors import (
    ClusterAuthRequired,
    ClusterUnavailable,
    InvalidSpec,
    JobError,
    PublishError,
    TrainingError,
    UnknownJob,
)
from training.jobs import JobClient, JobInfo, follow_metrics, new_submission_id
from training.k8s import render_manifests, write_manifests
from training.local_job import local_entrypoint
from training.metrics import StepMetrics, parse_log_lines
from training.overrides import entrypoint_argv, render_entrypoint, to_skyrl_overrides
from training.publishing import Published, publish
from training.spec import TrainSpec
from training.watch import WatchConfig, Watcher, watch

__all__ = [
    "ClusterAuthRequired",
    "ClusterUnavailable",
    "ExportStep",
    "InvalidSpec",
    "JobClient",
    "JobError",
    "JobInfo",
    "PublishError",
    "Published",
    "StepMetrics",
    "TrainSpec",
    "TrainingError",
    "UnknownJob",
    "WatchConfig",
    "Watcher",
    "entrypoint_argv",
    "fetch_step",
    "follow_metrics",
    "list_steps",
    "local_entrypoint",
    "new_submission_id",
    "parse_log_lines",
    "publish",
    "render_entrypoint",
    "render_manifests",
    "to_skyrl_overrides",
    "watch",
    "write_manifests",
]
