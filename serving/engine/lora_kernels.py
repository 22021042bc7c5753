"""Grouped LoRA kernels for vLLM's CPU backend, installed into the engine's worker process.

vLLM 0.32's CPU backend runs multi-LoRA through ``PunicaWrapperCPU``, whose PyTorch stand-ins for
the Punica kernels (``vllm.lora.ops.torch_ops``) gather a copy of the LoRA weights *per token*
(``lora_a_weights[token_indices]``) and multiply with a batched matrix-vector einsum. For a
rank-64 adapter on the seven projections of ``maze-tiny``'s text model that is ~5 MB of weight
copies per prompt token per forward pass (~1.5 GB for one 300-token turn), so prefill time grows
with the batch's tokens and batching buys nothing (docs/benchmarks.md, "LoRA on CPU").

:class:`GroupedPunicaWrapperCPU` keeps vLLM's metadata and layers and replaces only the arithmetic:
once per step it groups the batch's token rows by adapter slot (a slice when a slot's rows are
contiguous, as they are for one request, else an index), and per group and projection slice does
two small matrix products, ``(x @ A.T) * scale`` then ``@ B.T`` added into the output. Rows with
slot ``-1`` (the base model) get no LoRA term; the stock ops index slot ``-1`` as the *last* slot,
which adds that slot's adapter to base rows when all ``max_loras`` slots are in use.

This module has no import side effects: :func:`install` makes the CPU platform hand out
:class:`GroupedPunicaWrapperCPU`, and :mod:`serving.engine.lora_worker` calls it inside the engine's
worker process. The wrapper logs one line when it is built and counts its work in :data:`STATS`.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import torch

from serving.compat import PunicaWrapperCPU

# A child of vLLM's logger: in the engine's processes only vLLM's logger has a handler, and this
# module's one INFO line (the kernels are active) belongs with the engine's own log lines.
log = logging.getLogger(f"vllm.{__name__}")

WRAPPER_QUALNAME = f"{__name__}.GroupedPunicaWrapperCPU"

# Rows of one adapter slot: a slice (contiguous rows) or a 1-D index tensor.
Rows = slice | torch.Tensor
Groups = list[tuple[int, Rows]]

#: What this process's grouped kernels did (read through ``lora_kernel_stats``).
STATS: Counter = Counter()


def adapter_groups(indices: torch.Tensor) -> Groups:
    """``[(slot, rows)]`` for every adapter slot (>= 0) in a per-row slot index; -1 rows are skipped.

    A request's tokens are contiguous and share a slot, so a slot usually owns one run of rows and
    its rows are a slice (a view, no copy); a slot with several runs gets one index tensor.
    """
    if indices.numel() == 0:
        return []
    values, counts = torch.unique_consecutive(indices, return_counts=True)
    spans: dict[int, list[tuple[int, int]]] = {}
    start = 0
    for slot, n in zip(values.tolist(), counts.tolist(), strict=True):
        if slot >= 0:
            spans.setdefault(slot, []).append((start, start + n))
        start += n
    groups: Groups = []
    for slot, runs in spans.items():
        if len(runs) == 1:
            groups.append((slot, slice(*runs[0])))
        else:
            groups.append((slot, torch.cat([torch.arange(a, b, device=indices.device) for a, b in runs])))
    return groups


def slot_weight(stacked: torch.Tensor, slot: int) -> torch.Tensor:
    """One slot's (out, in) matrix from vLLM's stacked (slots, 1, out, in) or (slots, out, in)."""
    w = stacked[slot]
    return w[0] if w.dim() == 3 else w


def _addmm_rows(y: torch.Tensor, rows: Rows, a: torch.Tensor, b_t: torch.Tensor) -> None:
    """``y[rows] += a @ b_t`` in place (``y`` may be a column slice of the output)."""
    if isinstance(rows, slice):
        y[rows].addmm_(a, b_t)
    else:
        y.index_add_(0, rows, torch.mm(a, b_t))


def grouped_shrink(y: torch.Tensor, x: torch.Tensor, a_stacked: torch.Tensor, groups: Groups, scale: float) -> None:
    """``y[rows] = (x[rows] @ A[slot].T) * scale`` per group; other rows of ``y`` are left as they are
    (vLLM's callers pass a zeroed buffer)."""
    for slot, rows in groups:
        w = slot_weight(a_stacked, slot)
        out = torch.mm(x[rows].to(y.dtype), w.to(y.dtype).t())
        if scale != 1.0:
            out.mul_(scale)
        y[rows] = out[:, : y.shape[1]]


def grouped_expand(y: torch.Tensor, x: torch.Tensor, b_stacked: torch.Tensor, groups: Groups,
                   offset: int, size: int, add_inputs: bool = True) -> None:
    """``y[rows, offset:offset+size] (+)= x[rows] @ B[slot].T`` per group (B's rows beyond ``size``,
    vocab padding, are dropped as the stock op does)."""
    cols = y[:, offset: offset + size]
    for slot, rows in groups:
        w = slot_weight(b_stacked, slot)
        width = min(w.shape[0], cols.shape[1])
        xg, w_t = x[rows].to(y.dtype), w[:width].to(y.dtype).t()
        if add_inputs:
            _addmm_rows(cols[:, :width], rows, xg, w_t)
        else:
            cols[rows, :width] = torch.mm(xg, w_t)


class SlotViews:
    """Each slot's transposed weight matrix, made once per (stacked tensor, slot) and reused every step.

    The views alias vLLM's stacked storage, so they follow ``set_lora``/``reset_lora``'s in-place
    writes and never go stale; caching them saves the handful of tensor calls per projection that
    dominate a decode step (a few rows per adapter).
    """

    def __init__(self) -> None:
        self._views: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, stacked: torch.Tensor, slot: int) -> torch.Tensor:
        hit = self._views.get((id(stacked), slot))
        if hit is None or hit[0] is not stacked:  # the reference held also keeps the id from being reused
            hit = (stacked, slot_weight(stacked, slot).t())
            self._views[(id(stacked), slot)] = hit
        return hit[1]


def _transposed(stacked: torch.Tensor, slot: int) -> torch.Tensor:
    return slot_weight(stacked, slot).t()


def grouped_lora(y: torch.Tensor, x: torch.Tensor, a_stacked: tuple[torch.Tensor, ...],
                 b_stacked: tuple[torch.Tensor, ...], scale: float, output_slices: tuple[int, ...],
                 groups: Groups, views=_transposed) -> None:
    """``y[rows, slice i] += (x[rows] @ A_i.T * scale) @ B_i.T`` for every group and projection slice:
    vLLM's ``add_lora_linear`` without the intermediate buffer. ``views(stacked, slot)`` gives a
    slot's transposed matrix (:class:`SlotViews` caches them)."""
    f32 = torch.float32
    for slot, rows in groups:
        xg = x[rows]
        if xg.dtype != f32:  # the shrunk rows are float32, as in vLLM's buffer
            xg = xg.to(f32)
        offset = 0
        for a, b, size in zip(a_stacked, b_stacked, output_slices, strict=True):
            a_t, b_t = views(a, slot), views(b, slot)
            t = torch.mm(xg, a_t if a_t.dtype == f32 else a_t.to(f32))
            if scale != 1.0:
                t.mul_(scale)
            if b_t.shape[1] != size:  # B padded past the output (logits: vocab padding)
                b_t = b_t[:, :size]
            if y.dtype != f32:
                t, b_t = t.to(y.dtype), b_t.to(y.dtype)
            elif b_t.dtype != f32:
                b_t = b_t.to(f32)
            cols = y if size == y.shape[1] else y[:, offset: offset + size]
            _addmm_rows(cols, rows, t, b_t)
            offset += size


class GroupedPunicaWrapperCPU(PunicaWrapperCPU):
    """vLLM's CPU punica wrapper with grouped-by-adapter arithmetic (see the module docstring).

    Groups are computed once per step in :meth:`update_metadata` and reused by every LoRA layer of
    that step. A call whose rows do not match the step's mapping (not expected) takes the stock path.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._token_groups: Groups = []
        self._token_rows = 0
        self._sampler_groups: Groups = []
        self._sampler_rows = 0
        self._views = SlotViews()
        log.info("grouped CPU LoRA kernels active (%s)", WRAPPER_QUALNAME)
        STATS["wrappers"] += 1

    def update_metadata(self, mapping, lora_index_to_id, max_loras, vocab_size, **kwargs) -> None:
        super().update_metadata(mapping, lora_index_to_id, max_loras, vocab_size, **kwargs)
        tokens = self.token_lora_indices
        self._token_groups, self._token_rows = adapter_groups(tokens), tokens.numel()
        sampler = self.sampler_indices
        self._sampler_groups, self._sampler_rows = adapter_groups(sampler), sampler.numel()
        STATS["steps"] += 1
        if self._token_groups:
            STATS["lora_steps"] += 1

    def _tokens(self, x: torch.Tensor) -> Groups | None:
        return self._token_groups if x.size(0) == self._token_rows else None

    def single_slot(self, rows: int) -> int | None:
        """The adapter slot owning every one of this step's ``rows`` token rows, else None (mixed
        adapters, base rows, or ``rows`` that are not the step's tokens)."""
        groups = self._token_groups
        if len(groups) != 1 or self._token_rows != rows:
            return None
        slot, span = groups[0]
        return slot if isinstance(span, slice) and span.start == 0 and span.stop == rows else None

    def add_shrink(self, y, x, lora_a_stacked, scale, **kwargs):
        x = x.view(-1, x.shape[-1])
        groups = self._tokens(x)
        if groups is None:
            STATS["stock_fallbacks"] += 1
            return super().add_shrink(y, x, lora_a_stacked, scale, **kwargs)
        for i, a in enumerate(lora_a_stacked):
            yi = y[i]
            grouped_shrink(yi.view(-1, yi.shape[-1]), x, a, groups, scale)
        STATS["grouped_calls"] += 1

    def add_expand(self, y, x, lora_b_stacked, output_slices, offset_start=0, add_inputs=True, **kwargs):
        y2 = y.view(-1, y.shape[-1])
        groups = self._tokens(y2)
        if groups is None:
            STATS["stock_fallbacks"] += 1
            return super().add_expand(y, x, lora_b_stacked, output_slices, offset_start, add_inputs, **kwargs)
        offset = offset_start
        for xi, b, size in zip(x, lora_b_stacked, output_slices, strict=True):
            grouped_expand(y2, xi, b, groups, offset, size, add_inputs)
            offset += size
        STATS["grouped_calls"] += 1

    def add_lora_embedding(self, y, x, lora_b_stacked, add_inputs=True, **kwargs):
        groups = self._tokens(x)
        if groups is None:
            STATS["stock_fallbacks"] += 1
            return super().add_lora_embedding(y, x, lora_b_stacked, add_inputs, **kwargs)
        grouped_expand(y, x, lora_b_stacked, groups, 0, y.shape[1], add_inputs)
        STATS["grouped_calls"] += 1

    def add_lora_linear(self, y, x, lora_a_stacked, lora_b_stacked, scale, output_slices, *, buffer=None, **kwargs):
        groups = self._tokens(x)
        if groups is None:
            STATS["stock_fallbacks"] += 1
            return super().add_lora_linear(y, x, lora_a_stacked, lora_b_stacked, scale, output_slices,
                                           buffer=buffer, **kwargs)
        grouped_lora(y, x, lora_a_stacked, lora_b_stacked, scale, output_slices, groups, self._views)
        STATS["grouped_calls"] += 1

    def add_lora_logits(self, y, x, lora_a_stacked, lora_b_stacked, scale, *, buffer=None, **kwargs):
        y2, x2 = y.view(-1, y.shape[-1]), x.view(-1, x.shape[-1])
        if x2.size(0) != self._sampler_rows:
            STATS["stock_fallbacks"] += 1
            return super().add_lora_logits(y, x, lora_a_stacked, lora_b_stacked, scale, buffer=buffer, **kwargs)
        width = min(lora_b_stacked.shape[-2], y2.shape[1])
        grouped_lora(y2, x2, (lora_a_stacked,), (lora_b_stacked,), scale, (width,), self._sampler_groups,
                     self._views)
        STATS["grouped_calls"] += 1


def install() -> bool:
    """Point vLLM's CPU platform at :class:`GroupedPunicaWrapperCPU` (in this process); False when
    the current platform is not the CPU one (GPU engines keep their Punica kernels)."""
    from serving.compat import current_platform

    if not current_platform.is_cpu():
        return False
    platform_cls = type(current_platform)
    if "get_punica_wrapper" in platform_cls.__dict__ and platform_cls not in _STOCK:
        _STOCK[platform_cls] = platform_cls.__dict__["get_punica_wrapper"]
    platform_cls.get_punica_wrapper = classmethod(lambda cls: WRAPPER_QUALNAME)
    return True


def uninstall() -> None:
    """Undo :func:`install` in this process (tests that import the worker extension in-process)."""
    for platform_cls, stock in _STOCK.items():
        platform_cls.get_punica_wrapper = stock
    _STOCK.clear()


_STOCK: dict[type, Any] = {}


__all__ = ["STATS", "WRAPPER_QUALNAME", "GroupedPunicaWrapperCPU", "SlotViews", "adapter_groups", "grouped_expand",
           "grouped_lora", "grouped_shrink", "install", "slot_weight", "uninstall"]
