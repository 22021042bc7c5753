"""Merged adapter weights for vLLM's CPU LoRA layers: a step whose every token row belongs to one
adapter runs each LoRA layer as one product with ``W + B @ A`` instead of the base product plus the
adapter's.

Why: on CPU the adapter's part of a layer is a handful of small tensor calls per projection slice
(:func:`serving.engine.lora_kernels.grouped_lora`), and a decode step of ``maze-tiny`` is made of
such calls: with one request in flight they are a large part of an adapter turn's engine time. A
step of one adapter's rows (one request, or a batch that all names the same adapter, as an
evaluation does) can instead use the merged matrix, at exactly the base's cost.
Mixed batches, and rows of the base model, keep the grouped kernels.

How: :func:`install` (in the engine's worker process, before the model is built) keeps a reference
to each linear layer's float weight before vLLM's CPU backend packs it for oneDNN and drops it
(:func:`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`), and wraps the LoRA layers'
``_apply_sync``. A merged matrix is built on the first single-adapter step that needs it, packed by
the same dispatch vLLM uses for the base (so the kernel is the one the base runs), and kept for at
most ``MAZE_LORA_MERGED_SLOTS`` adapter slots; activating an adapter into a slot drops that slot's
merged matrices. The cost is memory: a reference copy of the base's linear weights, plus one merged
copy of the adapter's layers per kept slot (a few MB each for ``maze-tiny``).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(f"vllm.{__name__}")

#: Engine env: adapter slots whose merged matrices are kept (0 or unset: merging off). The module
#: imports torch only in what runs in the engine, so building the app can read this name.
SLOTS_ENV = "MAZE_LORA_MERGED_SLOTS"


def merged_slots() -> int:
    """Slots to keep merged matrices for, from :data:`SLOTS_ENV` (0 when unset or not a number)."""
    try:
        return max(0, int(os.environ.get(SLOTS_ENV, "0")))
    except ValueError:
        return 0


def single_slot(wrapper: Any, rows: int) -> int | None:
    """The adapter slot owning every one of the step's ``rows`` token rows, else None (also for
    vLLM's stock wrapper, which does not group a step's rows by adapter)."""
    ask = getattr(wrapper, "single_slot", None)  # GroupedPunicaWrapperCPU's
    return ask(rows) if ask is not None else None


def merged_weight(base: torch.Tensor, a_stacked, b_stacked, slices, slot: int) -> torch.Tensor:
    """``base + B_i @ A_i`` on each output slice ``i`` of ``slot`` (vLLM's B already carries the
    adapter's scale), as a new (out, in) matrix."""
    import torch

    from serving.engine.lora_kernels import slot_weight  # imports vLLM: the engine's worker only

    w = base.detach().clone()
    offset = 0
    for a, b, size in zip(a_stacked, b_stacked, slices, strict=True):
        a_s, b_s = slot_weight(a, slot), slot_weight(b, slot)
        w[offset: offset + size].add_(torch.mm(b_s[:size].to(w.dtype), a_s.to(w.dtype)))
        offset += size
    return w


class MergedCache:
    """Packed merged matrices per (LoRA layer, slot), for at most ``slots`` slots (least recently
    used slot dropped first)."""

    def __init__(self, slots: int, pack) -> None:
        self.slots, self._pack = slots, pack
        self._by_slot: OrderedDict[int, dict[int, Any]] = OrderedDict()
        self.stats = {"merged_calls": 0, "merges": 0}

    def linear(self, layer: Any, slot: int):
        """The packed ``fn(x, bias)`` of ``layer``'s merged matrix for ``slot`` (built on first use)."""
        per_layer = self._by_slot.get(slot)
        if per_layer is None:
            per_layer = self._by_slot[slot] = {}
            while len(self._by_slot) > self.slots:
                self._by_slot.popitem(last=False)
        self._by_slot.move_to_end(slot)
        fn = per_layer.get(id(layer))
        if fn is None:
            base = layer.base_layer.maze_float_weight
            fn = per_layer[id(layer)] = self._pack(merged_weight(base, layer.lora_a_stacked, layer.lora_b_stacked,
                                                                 layer.output_slices, slot))
            self.stats["merges"] += 1
        return fn

    def drop(self, slot: int | None = None) -> None:
        """Forget ``slot``'s merged matrices (all slots with None)."""
        if slot is None:
            self._by_slot.clear()
        else:
            self._by_slot.pop(slot, None)


def _packer(dispatch):
    """``pack(w) -> fn(x, bias)``: ``w`` packed by vLLM's own CPU GEMM dispatch, as the base layer was."""
    def pack(w: torch.Tensor):
        import torch

        holder = torch.nn.Module()
        holder.weight = torch.nn.Parameter(w, requires_grad=False)
        dispatch(holder, remove_weight=True)
        weight, fn = holder.weight, holder.cpu_linear
        return lambda x, bias: fn(x, weight, bias)
    return pack


def install(slots: int | None = None) -> MergedCache | None:
    """Keep float weights and route single-adapter steps to merged matrices in this process; the
    cache, or None when merging is off (``slots`` 0) or vLLM lacks the hooks it needs."""
    slots = merged_slots() if slots is None else slots
    if slots <= 0:
        return None
    import torch

    try:
        from serving.compat import BaseLinearLayerWithLoRA, LoRAModelManager, layer_utils
    except ImportError:  # serving.compat.InternalsMissing: this vLLM lacks what merging hooks into
        return None
    stock_dispatch = layer_utils.dispatch_cpu_unquantized_gemm
    cache = MergedCache(slots, _packer(stock_dispatch))

    def dispatch(layer, remove_weight: bool):
        weight = getattr(layer, "weight", None)
        if remove_weight and isinstance(weight, torch.Tensor) and weight.dim() == 2 and not weight.is_meta:
            layer.maze_float_weight = weight.data  # the packed copy replaces it; this one stays for merging
        return stock_dispatch(layer, remove_weight)

    stock_apply = BaseLinearLayerWithLoRA._apply_sync

    def apply_sync(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[0] if x.dim() == 2 else -1
        slot = single_slot(self.punica_wrapper, rows)
        if slot is None or getattr(self.base_layer, "maze_float_weight", None) is None:
            return stock_apply(self, x, bias)
        cache.stats["merged_calls"] += 1
        return cache.linear(self, slot)(x, bias)

    stock_activate = LoRAModelManager.activate_adapter

    def activate_adapter(self, lora_id: int) -> bool:
        done = stock_activate(self, lora_id)
        if done:  # the slot's weights were just rewritten
            cache.drop(self.lora_index_to_id.index(lora_id))
        return done

    layer_utils.dispatch_cpu_unquantized_gemm = dispatch
    BaseLinearLayerWithLoRA._apply_sync = apply_sync
    LoRAModelManager.activate_adapter = activate_adapter
    log.info("merged LoRA weights for single-adapter steps (up to %d slots)", slots)
    return cache


__all__ = ["SLOTS_ENV", "MergedCache", "install", "merged_slots", "merged_weight", "single_slot"]
