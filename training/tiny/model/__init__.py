"""The tiny model itself: a seeded Qwen3-VL model folder, its offline tokenizer, and its LoRA adapters.

:mod:`~training.tiny.model.builder` writes a random-weight Qwen3-VL folder that transformers and
vLLM load as a real checkpoint (``python -m training.tiny.model.builder``);
:mod:`~training.tiny.model.tokenizer` trains its byte-level BPE offline on the protocol's texts;
:mod:`~training.tiny.model.lora` is the adapters' parameterization (shared by GRPO and the SFT
LoRA probe) and their folders. Names load on first use (the modules pull in torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training.tiny import lazy_exports

if TYPE_CHECKING:
    from training.tiny.model.builder import BuilderConfig, build_model, build_random_lora
    from training.tiny.model.lora import adapter_shape, load_adapter_weights, lora_config, save_adapter

_LAZY = {
    "training.tiny.model.builder": ("BuilderConfig", "build_model", "build_random_lora"),
    "training.tiny.model.lora": ("adapter_shape", "load_adapter_weights", "lora_config", "save_adapter"),
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["BuilderConfig", "adapter_shape", "build_model", "build_random_lora", "load_adapter_weights",
           "lora_config", "save_adapter"]
