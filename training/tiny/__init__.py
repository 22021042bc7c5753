"""The lab that builds and trains the embedded model: maze-tiny (a 6M-parameter Qwen3-VL) and its
GRPO LoRA adapter maze-grpo (``models/``).

:mod:`~training.tiny.model_builder` makes the seeded model and its offline tokenizer,
:mod:`~training.tiny.demos` and :mod:`~training.tiny.sft` the supervised base,
:mod:`~training.tiny.grpo_local` the single-machine GRPO trainer (SkyRL's vocabulary and output
layout), over a batched Qwen3-VL forward (:mod:`~training.tiny.fastpath`) and multi-turn rollouts
(:mod:`~training.tiny.rollout`). :mod:`~training.tiny.score`, :mod:`~training.tiny.task_sweep`,
:mod:`~training.tiny.group_signal` and :mod:`~training.tiny.plots` measure and draw the shipped
pair. The lab depends on the agent library only; the launcher reaches it through one seam,
:mod:`training.local_job`. torch, transformers and peft come with the CPU serving stack
(``scripts/install_serving.sh``, which also installs the torchvision fix for CPU torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Public name -> its module, imported on first use (the modules pull in torch and transformers).
_EXPORTS = {
    "BuilderConfig": "training.tiny.model_builder",
    "build_model": "training.tiny.model_builder",
    "build_random_lora": "training.tiny.model_builder",
    "DemoConfig": "training.tiny.demos",
    "SFTConfig": "training.tiny.sft",
    "GRPOConfig": "training.tiny.grpo_local",
    "FastPolicy": "training.tiny.fast_policy",
    "HFPolicy": "training.tiny.hf_policy",
    "evaluate_hf": "training.tiny.hf_policy",
    "lora_config": "training.tiny.lora",
}

__all__ = [
    "BuilderConfig",
    "DemoConfig",
    "FastPolicy",
    "GRPOConfig",
    "HFPolicy",
    "SFTConfig",
    "build_model",
    "build_random_lora",
    "evaluate_hf",
    "lora_config",
]

if TYPE_CHECKING:
    from training.tiny.demos import DemoConfig
    from training.tiny.fast_policy import FastPolicy
    from training.tiny.grpo_local import GRPOConfig
    from training.tiny.hf_policy import HFPolicy, evaluate_hf
    from training.tiny.lora import lora_config
    from training.tiny.model_builder import BuilderConfig, build_model, build_random_lora
    from training.tiny.sft import SFTConfig


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'training.tiny' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
