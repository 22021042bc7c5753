"""The trainers: supervised training of the base, and single-machine GRPO of its LoRA adapter.

:mod:`~training.tiny.trainers.sft` trains maze-tiny on demonstrations; :mod:`~training.tiny.trainers.grpo`
is the GRPO trainer (SkyRL's vocabulary and output layout; ``python -m training.tiny.trainers.grpo``,
and ``maze-train submit --trainer local`` through :mod:`training.local_job`), with its settings
(:mod:`~training.tiny.trainers.grpo_config`), advantages and loss (:mod:`~training.tiny.trainers.grpo_loss`),
checkpoints in SkyRL's layout (:mod:`~training.tiny.trainers.checkpointing`) and the pick of a run's
best export (:mod:`~training.tiny.trainers.grpo_select`). Both trainers share the learning-rate
schedules (:mod:`~training.tiny.trainers.schedules`) and configs from YAML with flags on top
(:mod:`~training.tiny.trainers.config_file`). Names load on first use (the modules pull in torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training.tiny import lazy_exports

if TYPE_CHECKING:
    from training.tiny.trainers import grpo
    from training.tiny.trainers.grpo import build_policy
    from training.tiny.trainers.grpo_config import GRPOConfig
    from training.tiny.trainers.grpo_select import SEEDS_METRIC, TASKS_METRIC
    from training.tiny.trainers.sft import SFTConfig

_LAZY = {
    "training.tiny.trainers.grpo": ("build_policy",),
    "training.tiny.trainers.grpo_config": ("GRPOConfig",),
    "training.tiny.trainers.grpo_select": ("SEEDS_METRIC", "TASKS_METRIC"),
    "training.tiny.trainers.sft": ("SFTConfig",),
}

__getattr__ = lazy_exports(__name__, _LAZY, modules=("grpo",))

__all__ = ["SEEDS_METRIC", "TASKS_METRIC", "GRPOConfig", "SFTConfig", "build_policy", "grpo"]
