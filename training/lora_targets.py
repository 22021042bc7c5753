"""Which modules a training spec's LoRA targets wrap, checked against what the serving gateway applies.

vLLM applies a vision-language adapter's LoRA in the vision tower and its merger only with tower
LoRA on (the serving config's ``lora.vision_tower``, off by default), and the gateway refuses at
publish an adapter whose trained modules it would not apply (``serving.adapters.modules``). A SkyRL
job whose targets reach the tower, publishing to a gateway with tower LoRA off, would spend its GPU
hours on adapters that cannot be served as trained: :func:`serving_mismatch` says so before
``maze-train submit`` sends anything.

peft reads ``target_modules`` two ways: a string is a regular expression full-matched against every
module name (``all-linear`` aside: every linear layer but the output head), a list names module-name
suffixes. Whether targets reach the tower is decided on the module names of Qwen3-VL, the family this
project trains (:data:`QWEN3_VL_TOWER`: its tower's and mergers' linear layers, as the repo's
maze-tiny checkpoint names them), and, for a list, on entries naming another VLM's tower or projector
(:data:`TOWER_SEGMENTS`). Pure: the caller passes the serving config's flag.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from training.spec import LANGUAGE_MODEL_TARGETS, TrainSpec

ALL_LINEAR = "all-linear"
TARGETS_KEY = "trainer.policy.model.lora.target_modules"

#: One of each linear layer of Qwen3-VL's vision tower, merger and deepstack mergers (layer 0 stands
#: for every layer: peft matches the names, not the indices, unless a regex pins an index).
QWEN3_VL_TOWER = (
    "model.visual.blocks.0.attn.qkv",
    "model.visual.blocks.0.attn.proj",
    "model.visual.blocks.0.mlp.linear_fc1",
    "model.visual.blocks.0.mlp.linear_fc2",
    "model.visual.merger.linear_fc1",
    "model.visual.merger.linear_fc2",
    "model.visual.deepstack_merger_list.0.linear_fc1",
    "model.visual.deepstack_merger_list.0.linear_fc2",
)
#: Dotted name segments of a tower or projector in other VLMs (LLaVA, Gemma 3, SigLIP towers, ...).
TOWER_SEGMENTS = ("visual", "vision_tower", "vision_model", "merger", "multi_modal_projector", "mm_projector")


def tower_hits(target_modules: str | Sequence[str]) -> list[str]:
    """What in ``target_modules`` wraps the vision tower or its merger, as short phrases; empty: nothing.

    Raises:
        ValueError: a string that is not a regular expression (peft would fail on it too).
    """
    if isinstance(target_modules, str):
        if target_modules == ALL_LINEAR:
            return ["'all-linear' wraps every linear layer, the tower's and its merger's included"]
        try:
            pattern = re.compile(target_modules)
        except re.error as exc:
            raise ValueError(f"target_modules {target_modules!r} is not a regular expression: {exc}") from None
        matched = [name for name in QWEN3_VL_TOWER if pattern.fullmatch(name)]
    else:
        matched = [name for name in QWEN3_VL_TOWER
                   if any(name == t or name.endswith(f".{t}") for t in target_modules)]
        named = [t for t in target_modules if set(t.split(".")) & set(TOWER_SEGMENTS)]
        matched += [t for t in named if t not in matched]
    if not matched:
        return []
    return [f"it matches {', '.join(matched[:3])}{', ...' if len(matched) > 3 else ''}"]


def effective_targets(spec: TrainSpec) -> tuple[str, str]:
    """The targets SkyRL will use and where they come from: the last ``extra_overrides`` entry for
    ``trainer.policy.model.lora.target_modules`` (appended last, so it wins), else the spec's field."""
    for item in reversed(spec.extra_overrides):
        key, _, value = item.partition("=")
        if key.strip() == TARGETS_KEY:
            value = value.strip()
            if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            return value, f"extra_overrides' {TARGETS_KEY}"
    return spec.model.lora.target_modules, "model.lora.target_modules"


def serving_mismatch(spec: TrainSpec, *, vision_tower: bool, serving_config: str = "embedded") -> str | None:
    """Why the gateway of ``serving_config`` (whose ``lora.vision_tower`` is ``vision_tower``) could not
    serve what ``spec`` trains, or None when it could.

    Only LoRA targets are compared: with tower LoRA on everything trained is applied, and a spec of
    rank 0 trains the full model (no adapter).

    Raises:
        ValueError: targets that are not a regular expression.
    """
    if vision_tower or spec.model.lora.rank == 0:
        return None
    targets, source = effective_targets(spec)
    hits = tower_hits(targets)
    if not hits:
        return None
    return (f"{source} {targets!r} reaches the vision tower and its merger ({'; '.join(hits)}), which the "
            f"gateway this job publishes to does not apply (serving config {serving_config}: lora.vision_tower is "
            "off), so every exported step would be refused at publish: target the language model's layers only "
            f"(the default, {LANGUAGE_MODEL_TARGETS!r}) or publish to a serving config with lora.vision_tower: true "
            "(--serving-config)")


__all__ = ["ALL_LINEAR", "QWEN3_VL_TOWER", "TARGETS_KEY", "TOWER_SEGMENTS", "effective_targets", "serving_mismatch",
           "tower_hits"]
