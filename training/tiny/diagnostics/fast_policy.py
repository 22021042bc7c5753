"""A shipped (or trained) model + adapter on the fast batched path, ready to play mazes.

The diagnostics and benchmarks (:mod:`~training.tiny.diagnostics.grpo_signal`,
:mod:`~training.tiny.diagnostics.task_sweep`, ``benchmarks/rollout_cache.py``) all need the same
set-up: the policy as GRPO trains it (peft LoRA, not merged), the frame bank, the prompt codec and
the model's agent profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from agent.maze import MazeLayout
from training.tiny.data import read_profile
from training.tiny.fastpath import (
    Episode,
    FastQwen3VL,
    FrameBank,
    FrameCatalog,
    PromptCodec,
    RolloutSettings,
    make_codec,
    play,
)
from training.tiny.model import adapter_shape, load_adapter_weights
from training.tiny.trainers import GRPOConfig, build_policy


@dataclass
class FastPolicy:
    fast: FastQwen3VL
    bank: FrameBank
    codec: PromptCodec
    profile: dict
    device: torch.device

    @classmethod
    def load(cls, model_path: str | Path, adapter: str | Path | None = None, device: str = "cpu") -> FastPolicy:
        """The base at ``model_path`` with ``adapter`` (a folder with adapter_model.safetensors) or a zero LoRA."""
        dev = torch.device(device)
        shape = adapter_shape(Path(adapter)) if adapter else None  # the LoRA is built at the adapter's own rank and scale
        rank = {"lora_rank": shape[0], "lora_alpha": shape[1]} if shape else {}
        cfg = GRPOConfig(model_path=str(model_path), ckpt_path="-", export_path="-", device=device, **rank)
        model, processor = build_policy(cfg, dev)
        if adapter:
            load_adapter_weights(model, Path(adapter))
        model.eval()
        bank = FrameBank(FrameCatalog(7), processor.image_processor, dev,
                         dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32)
        return cls(FastQwen3VL(model, bank.grid_thw), bank, make_codec(processor), read_profile(model_path), dev)

    def settings(self, temperature: float = 0.0, max_turns: int = 15, **kw) -> RolloutSettings:
        """Rollout settings under the model's own protocol and history policy."""
        return RolloutSettings(max_turns=max_turns, temperature=temperature, history=self.profile["history"],
                               protocol=self.profile["protocol"], **kw)

    def play(self, layouts: list[MazeLayout], settings: RolloutSettings, seed: int | None = None,
             max_batch: int = 1024) -> list[Episode]:
        """One episode per layout (sampled with a generator seeded by ``seed`` when given)."""
        gen = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        return play(self.fast, self.bank, self.codec, self.bank.catalog, layouts, settings, generator=gen,
                    device=self.device, max_batch=max_batch)
