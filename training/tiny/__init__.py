"""The lab that builds and trains the embedded model: maze-tiny (a 6M-parameter Qwen3-VL) and its
GRPO LoRA adapter maze-grpo (``models/``).

Laid out in rooms by role, each importing only the rooms below it: ``model/`` (the seeded model
folder, its offline tokenizer, the LoRA adapters), ``fastpath/`` (frames as ids, prompts as token
ids, a batched Qwen3-VL forward and multi-turn rollouts on it), ``data/`` (SFT demonstrations and
the starts of GRPO's groups), ``policies/`` (the model as ``agent.runner``'s policy through HF
transformers), ``trainers/`` (SFT, and GRPO with SkyRL's vocabulary and output layout),
``diagnostics/`` (the shipped pair measured and drawn) and ``gpu/`` (the pipeline on a GPU machine
and its configs). The lab depends on the agent library only; the launcher reaches it through one
seam, :mod:`training.local_job`. torch, transformers and peft come with the CPU serving stack
(``scripts/install_serving.sh``, which also installs the torchvision fix for CPU torch).
"""

from __future__ import annotations

import importlib


def lazy_exports(module: str, names_by_module: dict[str, tuple[str, ...]], modules: tuple[str, ...] = ()):
    """A module ``__getattr__`` (PEP 562) that imports a name's module the first time the name is used,
    as serving's faces do: the lab's modules pull in torch and transformers, and a room module run with
    ``python -m`` must not be imported by its face first. ``modules`` are the room's modules exported
    as namespaces (``from training.tiny.trainers import grpo``)."""
    home = {name: source for source, names in names_by_module.items() for name in names}

    def __getattr__(name: str):
        if name in home:
            return getattr(importlib.import_module(home[name]), name)
        if name in modules:
            return importlib.import_module(f"{module}.{name}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


_LAZY = {
    "training.tiny.model": ("BuilderConfig", "build_model", "build_random_lora", "lora_config"),
    "training.tiny.data": ("DemoConfig",),
    "training.tiny.policies": ("HFPolicy", "evaluate_hf"),
    "training.tiny.trainers": ("GRPOConfig", "SFTConfig"),
    "training.tiny.diagnostics": ("FastPolicy",),
}

__getattr__ = lazy_exports(__name__, _LAZY)

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
    "lazy_exports",
    "lora_config",
]
