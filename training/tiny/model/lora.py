"""maze-tiny's LoRA adapters: their parameterization (shared by GRPO and the SFT LoRA probe) and
their folders (save, load, widen to a higher rank)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

log = logging.getLogger(__name__)

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


# -- adapter folders ---------------------------------------------------------------------------
def save_adapter(model, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """``adapter_model.safetensors`` (bf16) + ``adapter_config.json`` of a peft model."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(state, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    model.peft_config["default"].save_pretrained(str(out))
    return out


def load_adapter_weights(model, path: Path) -> None:
    """Load an adapter folder into ``model``'s LoRA; a lower-rank adapter is widened (see :func:`widen_lora_state`)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = load_file(str(path / "adapter_model.safetensors"))
    current = model.peft_config["default"]
    shape = adapter_shape(path)
    if shape and shape[0] != current.r:
        rank, alpha = shape
        ratio = (alpha / rank) / (current.lora_alpha / current.r)
        saved = widen_lora_state(saved, get_peft_model_state_dict(model), ratio)
        log.info("widened adapter %s from rank %d to %d", path, rank, current.r)
    set_peft_model_state_dict(model, saved)


def adapter_shape(path: Path) -> tuple[int, int] | None:
    """(rank, alpha) from an adapter folder's adapter_config.json; None if it has none (a checkpoint's
    ``lora_adapter`` holds weights only, at the run's own rank)."""
    conf = Path(path) / "adapter_config.json"
    if not conf.is_file():
        return None
    meta = json.loads(conf.read_text())
    return meta["r"], meta["lora_alpha"]


def widen_lora_state(saved: dict[str, torch.Tensor], target: dict[str, torch.Tensor],
                     scale_ratio: float) -> dict[str, torch.Tensor]:
    """``saved`` LoRA weights of rank r placed into ``target``'s larger rank R without changing the function.

    Each module adds ``scale * B @ A``. The first r rows of A are the saved ones, the rest keep the
    target's fresh init (random, so the new directions get gradients); B's first r columns are the
    saved ones times ``scale_ratio`` (old scale / new scale), the rest are zero. This lets GRPO
    continue a trained adapter with more capacity instead of restarting from a zero one.
    """
    out = {}
    for key, value in saved.items():
        want = target[key]
        if value.shape == want.shape:
            out[key] = value * scale_ratio if "lora_B" in key else value
            continue
        if "lora_A" in key and value.shape[0] < want.shape[0] and value.shape[1:] == want.shape[1:]:
            w = want.detach().clone().to(value.dtype)
            w[: value.shape[0]] = value
        elif "lora_B" in key and value.shape[1] < want.shape[1] and value.shape[0] == want.shape[0]:
            w = torch.zeros(want.shape, dtype=value.dtype)
            w[:, : value.shape[1]] = value * scale_ratio
        else:
            raise ValueError(f"adapter weight {key} has shape {tuple(value.shape)}, which cannot be widened "
                             f"to {tuple(want.shape)} (only a lower rank can be loaded into a higher one)")
        out[key] = w
    return out
