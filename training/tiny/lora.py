"""The LoRA parameterization of maze-tiny's adapters, shared by GRPO and the SFT LoRA probe."""

from __future__ import annotations

#: The text model's projections. The vision tower's modules are named qkv/proj/linear_fc*, so
#: these names never match it (vLLM serves LoRA on the language model only).
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
#: The tower's and its mergers' layers, added for the vision diagnostic.
VISION_LORA_TARGETS = ["qkv", "proj", "linear_fc1", "linear_fc2"]


def lora_config(rank: int, alpha: int, vision: bool = False):
    """A peft ``LoraConfig`` of ``rank``/``alpha`` on the text model (and the tower with ``vision``)."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                      target_modules=LORA_TARGETS + (VISION_LORA_TARGETS if vision else []))
