"""GRPO checkpoints in SkyRL's layout: save one step, resume from the latest.

``{ckpt_path}/global_step_N/`` holds ``policy/lora_adapter/`` (the LoRA weights at the run's rank),
``policy/optimizer.pt`` and ``trainer_state.pt`` (the step, every RNG's state, the metrics history
and the config). ``{ckpt_path}/latest_ckpt_global_step.txt`` is written last: it is the commit
marker, so a run killed while saving resumes from the step before.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch

from training.tiny.model import load_adapter_weights, save_adapter
from training.tiny.trainers.grpo_config import GRPOConfig

log = logging.getLogger("training.tiny.trainers.checkpointing")

MARKER = "latest_ckpt_global_step.txt"


def save_checkpoint(cfg: GRPOConfig, model, opt, step: int, np_rng: np.random.Generator, history: list[dict]) -> None:
    """Step ``step``'s adapter, optimizer and trainer state, then the marker pointing at it."""
    root = Path(cfg.ckpt_path)
    d = root / f"global_step_{step}"
    save_adapter(model, d / "policy" / "lora_adapter", dtype=torch.float32)
    torch.save(opt.state_dict(), d / "policy" / "optimizer.pt")
    torch.save({"global_step": step, "np_rng": np_rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                "py_rng": random.getstate(), "history": history, "config": cfg.model_dump()}, d / "trainer_state.pt")
    (root / MARKER).write_text(str(step))  # the commit marker, written last


def try_resume(cfg: GRPOConfig, model, opt, np_rng: np.random.Generator) -> tuple[int, list[dict]]:
    """Load the latest checkpoint into ``model``, ``opt`` and the RNGs: (its step, its history), or
    (0, []) when there is none or ``resume_mode`` is ``none``."""
    marker = Path(cfg.ckpt_path) / MARKER
    if cfg.resume_mode != "latest" or not marker.exists():
        return 0, []
    step = int(marker.read_text().strip())
    d = Path(cfg.ckpt_path) / f"global_step_{step}"
    load_adapter_weights(model, d / "policy" / "lora_adapter")
    opt.load_state_dict(torch.load(d / "policy" / "optimizer.pt", map_location="cpu"))
    for group in opt.param_groups:  # the config's lr/eps win over the saved ones (resume with a new lr)
        group["lr"], group["eps"] = cfg.lr, cfg.adam_eps
    state = torch.load(d / "trainer_state.pt", weights_only=False)
    np_rng.bit_generator.state = state["np_rng"]
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["py_rng"])
    log.info("resumed from %s", d)
    return step, state["history"]
