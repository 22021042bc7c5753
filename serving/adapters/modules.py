"""Which modules of the base an adapter's LoRA reaches, and whether the engine would apply them all.

vLLM applies an adapter's LoRA modules in the language model (with ``embed_tokens`` and
``lm_head``) always, and those in the vision tower and its merger only with
``enable_tower_connector_lora`` (``lora.vision_tower`` in the serving config). Tensors of any
other module, a tower module with that off or a name the base does not have, load without error
and are ignored: an adapter trained there would be served as (part of) the base model. So before
publishing, :func:`inspect_adapter` maps every tensor of a peft folder to its module, checks the
module exists in the base (the base's safetensors header or shard index: names only, no weights
read), sorts it into a group (:data:`GROUP_PATTERNS`), and marks it trained when both its A and
B hold a non-zero value; a module left at peft's zero init changes nothing, so leaving it out
loses nothing. :meth:`AdapterModules.raise_if_lost` refuses an adapter whose trained modules the
engine would leave out. Where the base's weights cannot be read here (a hub id, a path on another
machine) modules are grouped by name alone and existence is left to the engine's check at load.

:func:`unsupported_features` mirrors vLLM's refusals of peft features at load
(``vllm/lora/peft_helper.py``: DoRA, LoRA bias, PiSSA-like inits, ...) in its wording, so they
surface at publish rather than on the first request. Pure: reads files with numpy and json only
(no torch, no vLLM), so the CLI, the ingress and training processes can all run it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from serving.config import REPO_ROOT
from serving.errors import AdapterInvalid, AdapterNotServable, ServingError

LANGUAGE_MODEL = "language_model"
EMBEDDINGS = "embeddings"
VISION_TOWER = "vision_tower"
VISION_MERGER = "vision_merger"
UNMATCHED = "unmatched"
GROUPS = (LANGUAGE_MODEL, EMBEDDINGS, VISION_TOWER, VISION_MERGER, UNMATCHED)
GROUP_TITLES = {LANGUAGE_MODEL: "language model", EMBEDDINGS: "embeddings/lm_head", VISION_TOWER: "vision tower",
                VISION_MERGER: "vision merger", UNMATCHED: "no module of the base"}

#: Dotted path segments that place a module in a group; the first match wins, so the mergers (which
#: live under ``visual``) come before the tower. Anything else of the base is the language model.
#: Qwen-VL names first; ``multi_modal_projector`` (LLaVA, Gemma 3, ...), ``mm_projector`` and
#: ``vision_tower``/``vision_model`` are the other VLMs' common names.
GROUP_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (VISION_MERGER, ("visual.merger", "visual.deepstack_merger_list", "multi_modal_projector", "mm_projector")),
    (VISION_TOWER, ("visual", "vision_tower", "vision_model")),
    (EMBEDDINGS, ("embed_tokens", "lm_head")),
)

PEFT_PREFIX = "base_model.model."
# peft's tensor names: <module>.lora_A.weight, <module>.lora_embedding_A (a parameter, no .weight),
# <module>.lora_magnitude_vector (DoRA), <module>.lora_B.bias (lora_bias).
_LORA_TENSOR = re.compile(
    r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)"
    r"(?P<kind>\.weight|\.bias)?$")
_A_PARTS, _B_PARTS = {"lora_A", "lora_embedding_A"}, {"lora_B", "lora_embedding_B"}

# safetensors dtypes whose sign is the top bit of each little-endian element: "zero" ignores it (-0.0).
_FLOAT_WIDTH = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
_INT_DTYPES = {"I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"}
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit: a larger "header" is a corrupt file

# The inits vLLM loads as plain LoRA (vllm/lora/peft_helper.py _init_is_supported): they only pick
# the starting weights. The others (PiSSA, OLoRA, CorDA, LoftQ, ...) change the base's weights too.
_SUPPORTED_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
_CLASSIFIER_MODULES = ("classifier", "score")


# -- reading names ---------------------------------------------------------------------------------
def read_safetensors_header(path: str | Path) -> tuple[dict[str, dict[str, Any]], int]:
    """The tensors' entries of a safetensors file (dtype, shape, data_offsets) and where their data
    starts; reads the header only.

    Raises:
        ValueError: not a safetensors file.
    """
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        if not 0 < size <= _MAX_HEADER:
            raise ValueError(f"{path} is not a safetensors file (header size {size})")
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    return header, 8 + size


def resolve_base_folder(source: str | None) -> Path | None:
    """The base's folder on this machine, or None (no base, a hub id, a path not here).

    A relative source is tried against the repository first, as ``BaseModelSpec.resolved_source``
    resolves shipped models, then against the working directory.
    """
    if not source:
        return None
    path = Path(source)
    for candidate in ((path,) if path.is_absolute() else (REPO_ROOT / path, path)):
        if candidate.is_dir():
            return candidate
    return None


def base_tensor_names(source: str | None) -> tuple[frozenset[str] | None, str | None]:
    """The base's tensor names from its weights' header or shard index, and None; or None and why
    they are not readable here."""
    folder = resolve_base_folder(source)
    if folder is None:
        return None, f"the base's weights are not on this machine ({source or 'no base given'})"
    index, single = folder / "model.safetensors.index.json", folder / "model.safetensors"
    try:
        if index.is_file():
            return frozenset(json.loads(index.read_text())["weight_map"]), None
        if single.is_file():
            return frozenset(read_safetensors_header(single)[0]), None
    except (OSError, ValueError, KeyError) as exc:  # a half-copied or foreign folder: leave it to the engine
        return None, f"the base's weights in {folder} do not read ({type(exc).__name__}: {exc})"
    return None, f"{folder} holds no model.safetensors or model.safetensors.index.json"


def split_tensor_name(key: str) -> tuple[str, str, str] | None:
    """``(module, part, kind)`` of a peft LoRA tensor name, e.g. ``base_model.model.model.visual.
    blocks.0.attn.qkv.lora_A.weight`` -> ``("model.visual.blocks.0.attn.qkv", "lora_A", ".weight")``;
    None for a tensor that is not LoRA (a modules_to_save copy)."""
    match = _LORA_TENSOR.match(key.removeprefix(PEFT_PREFIX))
    return (match["module"], match["part"], match["kind"] or "") if match else None


def _has_segment(module: str, pattern: str) -> bool:
    return f".{pattern}." in f".{module}."


def _exists(module: str, base_modules: frozenset[str]) -> bool:
    # A base with tied embeddings stores no lm_head weight, yet has the module.
    if module in base_modules:
        return True
    return module.split(".")[-1] == "lm_head" and any(m.split(".")[-1] == "embed_tokens" for m in base_modules)


def group_of(module: str, base_modules: frozenset[str] | None) -> str:
    """The group of a module path; with ``base_modules`` None (base not readable), by name alone."""
    if base_modules is not None and not _exists(module, base_modules):
        return UNMATCHED
    for group, patterns in GROUP_PATTERNS:
        if any(_has_segment(module, p) for p in patterns):
            return group
    return LANGUAGE_MODEL


def applied_groups(vision_tower: bool) -> frozenset[str]:
    """The groups vLLM applies: the language model with its embeddings always, the tower and its
    merger with ``enable_tower_connector_lora`` (``lora.vision_tower``); unmatched names never."""
    return frozenset({LANGUAGE_MODEL, EMBEDDINGS} | ({VISION_TOWER, VISION_MERGER} if vision_tower else set()))


# -- reading values --------------------------------------------------------------------------------
def _is_nonzero(raw: np.ndarray, dtype: str) -> bool:
    """Whether a tensor's raw little-endian bytes hold any value other than (+/-) zero."""
    width = _FLOAT_WIDTH.get(dtype)
    if width is None:
        # an integer tensor compares directly; an unknown dtype counts as trained (never drop weights unseen)
        return bool(raw.any()) if dtype in _INT_DTYPES else True
    elements = raw.reshape(-1, width)
    return bool(elements[:, :-1].any() or (elements[:, -1] & 0x7F).any())


def nonzero_tensors(path: str | Path, keys: list[str]) -> frozenset[str]:
    """Which of ``keys`` hold a non-zero value; reads one tensor at a time, from its bytes (bf16
    included, which numpy cannot load as a dtype)."""
    header, start = read_safetensors_header(path)
    found = set()
    with open(path, "rb") as fh:
        for key in keys:
            begin, end = header[key]["data_offsets"]
            fh.seek(start + begin)
            raw = np.frombuffer(fh.read(end - begin), dtype=np.uint8)
            if _is_nonzero(raw, header[key]["dtype"]):
                found.add(key)
    return frozenset(found)


def _natural(name: str) -> list:
    # layers.2 before layers.10
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# -- the report ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdapterModules:
    """An adapter's LoRA modules by group, which of them are trained (non-zero A and B), and which
    groups the engine applies under the serving config (``applied``). ``unchecked`` says why module
    names were grouped by name alone (the base's weights not readable here); None when each was
    checked to exist in the base."""

    modules: dict[str, tuple[str, ...]]
    trained: frozenset[str]
    applied: frozenset[str]
    vision_tower: bool
    base: str | None = None
    unchecked: str | None = None

    @property
    def total(self) -> int:
        return sum(len(names) for names in self.modules.values())

    @property
    def checked(self) -> bool:
        return self.unchecked is None

    def counts(self) -> dict[str, int]:
        return {group: len(self.modules.get(group, ())) for group in GROUPS}

    def lost(self) -> dict[str, tuple[str, ...]]:
        """Trained modules the engine would leave out, by group (empty: served as trained)."""
        out = {g: tuple(m for m in names if m in self.trained) for g, names in self.modules.items()
               if g not in self.applied}
        return {g: names for g, names in out.items() if names}

    def summary(self) -> str:
        """One line: modules per group, how many trained, what is applied, whether names were checked."""
        parts = ", ".join(f"{n} {GROUP_TITLES[g]}" for g, n in self.counts().items() if n)
        applied = ", ".join(GROUP_TITLES[g] for g in GROUPS if g in self.applied)
        checked = (f"names checked against {Path(self.base).name}'s weights" if self.checked
                   else f"names not checked against the base: {self.unchecked}")
        return f"{self.total} LoRA modules ({parts}), {len(self.trained)} trained; applied: {applied}; {checked}"

    def problems(self) -> list[str]:
        """What the engine would leave out, one sentence per cause."""
        lost, out = self.lost(), []
        if UNMATCHED in lost:
            names = lost[UNMATCHED]
            out.append(f"{len(names)} of {self.total} LoRA modules name no module of the base "
                       f"{Path(self.base or '?').name} ({_examples(names)}): the adapter was saved with other "
                       "module names; re-export it with the base's names")
        tower = lost.get(VISION_TOWER, ()) + lost.get(VISION_MERGER, ())
        if tower:
            out.append(f"{len(tower)} of {self.total} LoRA modules are in the vision tower and its merger "
                       f"({_examples(tower)}) and hold trained (non-zero) weights, which this gateway does not "
                       "apply (lora.vision_tower is off): set lora.vision_tower: true in the serving config or "
                       "retrain without them (target the language model's layers only)")
        return out

    def raise_if_lost(self, error: type[ServingError] = AdapterNotServable) -> None:
        """Raise ``error`` naming every part the engine would leave out; nothing when all is applied."""
        if problems := self.problems():
            raise error("; ".join(problems))


def _examples(names: tuple[str, ...], limit: int = 3) -> str:
    return "e.g. " + ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def inspect_adapter(folder: str | Path, *, base_source: str | None, vision_tower: bool = False,
                    weights: str = "adapter_model.safetensors") -> AdapterModules:
    """Group the LoRA modules of the peft folder ``folder`` against the base ``base_source`` (a
    folder, repo-relative or absolute, or a hub id) and mark the trained ones.

    Raises:
        AdapterInvalid: the weights file does not read.
    """
    try:
        header, _ = read_safetensors_header(Path(folder) / weights)
    except (OSError, ValueError) as exc:
        raise AdapterInvalid(f"{weights} does not load: {exc}") from None
    base_names, unchecked = base_tensor_names(base_source)
    base_modules = None if base_names is None else frozenset(k.rsplit(".", 1)[0] for k in base_names)
    halves: dict[str, tuple[list[str], list[str]]] = {}
    for key in header:
        parts = split_tensor_name(key)
        if parts is None:
            continue
        module, part, kind = parts
        a_keys, b_keys = halves.setdefault(module, ([], []))
        if kind != ".bias":  # lora_B.bias (lora_bias) is refused with the config; it is no half of the delta
            (a_keys if part in _A_PARTS else b_keys if part in _B_PARTS else []).append(key)
    try:
        nonzero = nonzero_tensors(Path(folder) / weights, [k for a, b in halves.values() for k in a + b])
    except (OSError, ValueError, KeyError, TypeError) as exc:  # offsets or sizes a well-formed file never has
        raise AdapterInvalid(f"{weights} does not load: {type(exc).__name__}: {exc}") from None
    grouped: dict[str, list[str]] = {g: [] for g in GROUPS}
    for module in sorted(halves, key=_natural):
        grouped[group_of(module, base_modules)].append(module)
    # The delta is B @ A: zero when either half is all zeros (peft starts B at zero).
    trained = frozenset(m for m, (a, b) in halves.items()
                        if any(k in nonzero for k in a) and any(k in nonzero for k in b))
    return AdapterModules(modules={g: tuple(names) for g, names in grouped.items() if names}, trained=trained,
                          applied=applied_groups(vision_tower), vision_tower=vision_tower, base=base_source,
                          unchecked=unchecked)


# -- peft features the engine refuses ----------------------------------------------------------------
def adapter_max_rank(cfg: dict[str, Any]) -> int:
    """The largest rank of an adapter config: ``r`` and its ``rank_pattern`` overrides (vLLM compares
    this with max_lora_rank)."""
    pattern = cfg.get("rank_pattern") or {}
    bad = {k: v for k, v in pattern.items() if not isinstance(v, int) or isinstance(v, bool) or v <= 0}
    if bad:
        raise AdapterInvalid(f"rank_pattern ranks must be positive integers, got {bad}")
    return max([cfg["r"], *pattern.values()])


def _init_is_supported(init: Any) -> bool:
    return not isinstance(init, str) or init.lower() in _SUPPORTED_INITS


def unsupported_features(cfg: dict[str, Any]) -> list[str]:
    """vLLM's reasons for refusing an adapter_config at load (vllm/lora/peft_helper.py
    ``_validate_features`` and ``validate_legal``, rank aside), in its words; empty when it loads."""
    reasons = []
    if missing := [k for k in ("r", "lora_alpha", "target_modules") if k not in cfg]:
        reasons.append(f"Missing required configuration fields: {missing}.")
    if unsupported := [m for m in cfg.get("modules_to_save") or [] if m not in _CLASSIFIER_MODULES]:
        reasons.append('vLLM only supports modules_to_save being either None or ["classifier", "score"] for '
                       f"classification models. Unsupported modules_to_save: {unsupported}.")
    flags = (("use_dora", "vLLM does not yet support DoRA."),
             ("lora_bias", "vLLM does not support LoRA bias (lora_bias)."))
    reasons += [reason for key, reason in flags if cfg.get(key)]
    init = cfg.get("init_lora_weights", True)
    if not _init_is_supported(init):
        reasons.append(f"vLLM does not support init_lora_weights={init!r}. Inits such as PiSSA, OLoRA, CorDA and "
                       "LoftQ modify the base model weights when PEFT loads the adapter. Convert it to a regular "
                       "LoRA adapter with PEFT's path_initial_model_for_weight_conversion, or set init_lora_weights "
                       "to true if the served base model already contains the modified weights.")
    flags = (("alora_invocation_tokens", "vLLM does not support Activated LoRA (aLoRA)."),
             ("layer_replication", "vLLM does not support layer_replication."),
             ("use_bdlora", "vLLM does not support block-diagonal LoRA (BD-LoRA)."),
             ("use_qalora", "vLLM does not support QALoRA."))
    reasons += [reason for key, reason in flags if cfg.get(key)]
    if cfg.get("bias", "none") != "none":
        reasons.append(f"Adapter bias is not supported (bias={cfg['bias']!r}).")
    return reasons


def check_servable(folder: str | Path, cfg: dict[str, Any], *, base_source: str | None,
                   vision_tower: bool = False) -> AdapterModules:
    """Refuse an adapter the engine would refuse at load or serve other than trained; else its report.

    Raises:
        AdapterNotServable: a peft feature vLLM refuses, or trained modules it would leave out.
        AdapterInvalid: the weights file does not read.
    """
    if reasons := unsupported_features(cfg):
        raise AdapterNotServable("the engine (vLLM) refuses this adapter's config: " + " ".join(reasons))
    report = inspect_adapter(folder, base_source=base_source, vision_tower=vision_tower)
    report.raise_if_lost()
    return report


__all__ = ["EMBEDDINGS", "GROUPS", "GROUP_PATTERNS", "LANGUAGE_MODEL", "UNMATCHED", "VISION_MERGER", "VISION_TOWER",
           "AdapterModules", "adapter_max_rank", "applied_groups", "base_tensor_names", "check_servable",
           "group_of", "inspect_adapter", "nonzero_tensors", "read_safetensors_header", "resolve_base_folder",
           "split_tensor_name", "unsupported_features"]
