"""Merged adapter weights (serving.engine.lora_merge): a step whose rows are all one adapter's gets
exactly the base product plus the adapter's, from one product with ``W + B @ A``."""

from __future__ import annotations

import pytest
import torch

from serving.compat import engine_build

pytest.importorskip("vllm")
if engine_build() != "cpu":  # vLLM's CUDA wheel builds its CPU LoRA wrapper on the GPU
    pytest.skip("the CPU LoRA kernels run on vLLM's CPU build only", allow_module_level=True)

from vllm.lora.layers import LoRAMapping

from serving.engine.lora_kernels import GroupedPunicaWrapperCPU, grouped_lora
from serving.engine.lora_merge import MergedCache, merged_slots, merged_weight, single_slot

MAX_LORAS, RANK, HIDDEN = 4, 8, 32
SLICES = (32, 16, 16)  # a QKV layer: q, k, v


def wrapper(token_ids: list[int], slot_of: dict[int, int]) -> GroupedPunicaWrapperCPU:
    index_to_id = [None] * MAX_LORAS
    for lid, slot in slot_of.items():
        index_to_id[slot] = lid
    w = GroupedPunicaWrapperCPU(max_num_batched_tokens=64, max_batches=8, device="cpu")
    w.update_metadata(LoRAMapping(tuple(token_ids), tuple(dict.fromkeys(token_ids)), is_prefill=True),
                      index_to_id, MAX_LORAS + 1, 40)
    return w


def stacked(shape_per_slice, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(MAX_LORAS, 1, *shape, generator=g) / 8 for shape in shape_per_slice)


def test_one_adapters_rows_name_its_slot_and_anything_else_none():
    assert single_slot(wrapper([7] * 5, {7: 2}), 5) == 2
    assert single_slot(wrapper([7] * 5, {7: 2}), 6) is None  # not the step's rows (e.g. the vision tower)
    assert single_slot(wrapper([7, 7, 0, 0], {7: 2}), 4) is None  # base rows too
    assert single_slot(wrapper([7, 7, 9, 9], {7: 2, 9: 1}), 4) is None  # two adapters
    assert single_slot(wrapper([0, 0, 0], {7: 2}), 3) is None  # the base model only
    assert single_slot(object(), 3) is None  # vLLM's stock wrapper: no grouping, no merged path


def test_the_merged_product_is_the_base_plus_the_grouped_adapter_product():
    base = torch.randn(sum(SLICES), HIDDEN, generator=torch.Generator().manual_seed(0))
    a = stacked([(RANK, HIDDEN)] * len(SLICES), 1)
    b = stacked([(n, RANK) for n in SLICES], 2)
    x = torch.randn(6, HIDDEN, generator=torch.Generator().manual_seed(3))
    w = wrapper([7] * 6, {7: 2})
    want = x @ base.t()
    grouped_lora(want, x, a, b, 1.0, SLICES, w._token_groups)
    got = x @ merged_weight(base, a, b, SLICES, 2).t()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, x @ base.t())  # the adapter changed the output


class _Layer:
    def __init__(self, seed: int):
        self.base_layer = type("Base", (), {})()
        self.base_layer.maze_float_weight = torch.randn(sum(SLICES), HIDDEN)
        self.lora_a_stacked = stacked([(RANK, HIDDEN)] * len(SLICES), seed)
        self.lora_b_stacked = stacked([(n, RANK) for n in SLICES], seed + 1)
        self.output_slices = SLICES


def test_the_cache_keeps_the_newest_slots_and_drops_a_rewritten_one():
    packed = []
    cache = MergedCache(2, lambda w: packed.append(w) or (lambda x, bias: x @ w.t()))
    layer = _Layer(0)
    for slot in (0, 1, 0):
        cache.linear(layer, slot)
    assert cache.stats["merges"] == 2  # slot 0 again: kept
    cache.linear(layer, 2)  # a third slot pushes out the least recently used (1)
    cache.linear(layer, 1)
    assert cache.stats["merges"] == 4
    layer.lora_b_stacked[0][0].zero_()  # the slot is rewritten (an adapter activated into it) ...
    cache.drop(0)  # ... and activation drops its merged matrices
    cache.linear(layer, 0)
    assert cache.stats["merges"] == 5
    torch.testing.assert_close(packed[-1][:SLICES[0]], layer.base_layer.maze_float_weight[:SLICES[0]])


def test_merging_is_off_unless_the_engine_env_asks(monkeypatch):
    monkeypatch.delenv("MAZE_LORA_MERGED_SLOTS", raising=False)
    assert merged_slots() == 0
    monkeypatch.setenv("MAZE_LORA_MERGED_SLOTS", "2")
    assert merged_slots() == 2
    monkeypatch.setenv("MAZE_LORA_MERGED_SLOTS", "two")
    assert merged_slots() == 0
