"""The grouped CPU LoRA kernels (serving.engine.lora_kernels) against vLLM's stock CPU punica wrapper.

Both wrappers get the same vLLM ``LoRAMapping`` (a batch that mixes base-model requests with two
adapters, one of them in two separate runs of rows) and the same stacked weights, shaped as vLLM's
LoRA layers hold them; their outputs must agree within float32 tolerance for every wrapper entry
point the LoRA layers call.
"""

from __future__ import annotations

import pytest
import torch

from serving.compat import engine_build

pytest.importorskip("vllm")
if engine_build() != "cpu":  # vLLM's CUDA wheel builds its CPU LoRA wrapper on the GPU
    pytest.skip("the CPU LoRA kernels run on vLLM's CPU build only", allow_module_level=True)

from vllm.lora.layers import LoRAMapping
from vllm.lora.punica_wrapper.punica_cpu import PunicaWrapperCPU

from serving.engine.lora_kernels import STATS, GroupedPunicaWrapperCPU, adapter_groups

MAX_LORAS = 4  # slots; the tests below leave the last one empty unless they say otherwise
RANK, HIDDEN, VOCAB = 16, 48, 40
# Rows per request and its LoRA id (0: the base model). Adapter 7 appears twice, apart.
REQUESTS = [(5, 0), (7, 7), (3, 9), (4, 0), (6, 7), (1, 9)]
SLOT_OF = {7: 0, 9: 1}  # lora id -> slot, as vLLM's lora_index_to_id says
ATOL = 1e-5


def mapping(requests=REQUESTS) -> LoRAMapping:
    tokens = tuple(lid for n, lid in requests for _ in range(n))
    return LoRAMapping(tokens, tuple(lid for _, lid in requests), is_prefill=True)


def wrappers(requests=REQUESTS, slot_of=SLOT_OF):
    index_to_id = [None] * MAX_LORAS
    for lid, slot in slot_of.items():
        index_to_id[slot] = lid
    out = []
    for cls in (PunicaWrapperCPU, GroupedPunicaWrapperCPU):
        w = cls(max_num_batched_tokens=256, max_batches=16, device="cpu")
        w.update_metadata(mapping(requests), index_to_id, MAX_LORAS + 1, VOCAB)
        out.append(w)
    return out


def stacked(out_dim: int, in_dim: int, slots=(0, 1), seed: int = 0) -> torch.Tensor:
    """vLLM's (slots, 1, out, in) layout with random weights in ``slots`` and zeros elsewhere."""
    g = torch.Generator().manual_seed(seed)
    w = torch.zeros(MAX_LORAS, 1, out_dim, in_dim)
    for s in slots:
        w[s, 0] = torch.randn(out_dim, in_dim, generator=g) / in_dim**0.5
    return w


def n_tokens(requests=REQUESTS) -> int:
    return sum(n for n, _ in requests)


def test_adapter_groups_slices_and_indices():
    groups = dict(adapter_groups(torch.tensor([-1, -1, 0, 0, 1, -1, 0, 1, 1])))
    assert set(groups) == {0, 1}
    assert groups[0].tolist() == [2, 3, 6]
    assert groups[1].tolist() == [4, 7, 8]
    assert dict(adapter_groups(torch.tensor([-1, 2, 2, 2, -1]))) == {2: slice(1, 4)}
    assert adapter_groups(torch.tensor([-1, -1])) == [] and adapter_groups(torch.tensor([], dtype=torch.long)) == []


@pytest.mark.parametrize("slices", [(HIDDEN,), (32, 16, 16)], ids=["one-slice", "qkv"])
def test_add_lora_linear_matches_stock(slices):
    stock, grouped = wrappers()
    t = n_tokens()
    x = torch.randn(t, HIDDEN)
    a = tuple(stacked(RANK, HIDDEN, seed=i) for i in range(len(slices)))
    b = tuple(stacked(n, RANK, seed=10 + i) for i, n in enumerate(slices))
    base = torch.randn(t, sum(slices))
    y_stock, y_grouped = base.clone(), base.clone()
    calls = STATS["grouped_calls"]
    stock.add_lora_linear(y_stock, x, a, b, 0.5, slices)
    grouped.add_lora_linear(y_grouped, x, a, b, 0.5, slices)
    assert STATS["grouped_calls"] == calls + 1  # the grouped path ran, not the stock fallback
    torch.testing.assert_close(y_grouped, y_stock, atol=ATOL, rtol=1e-5)
    base_rows = torch.tensor([lid == 0 for n, lid in REQUESTS for _ in range(n)])
    assert torch.equal(y_grouped[base_rows], base[base_rows])  # the base model's rows are untouched
    assert not torch.allclose(y_grouped[~base_rows], base[~base_rows])


def test_shrink_then_expand_matches_stock():
    """The row-parallel layers' path: add_shrink into a zeroed buffer, then add_expand."""
    stock, grouped = wrappers()
    t = n_tokens()
    x = torch.randn(t, HIDDEN)
    a, b = (stacked(RANK, HIDDEN, seed=3),), (stacked(HIDDEN, RANK, seed=4),)
    base = torch.randn(t, HIDDEN)
    results = []
    for w in (stock, grouped):
        buf = torch.zeros(1, t, RANK)
        y = base.clone()
        w.add_shrink(buf, x, a, 2.0)
        w.add_expand(y, buf, b, (HIDDEN,), offset_start=0, add_inputs=True)
        results.append((buf, y))
    torch.testing.assert_close(results[1][0], results[0][0], atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(results[1][1], results[0][1], atol=ATOL, rtol=1e-5)


def test_add_lora_logits_matches_stock():
    stock, grouped = wrappers()
    rows = len(REQUESTS)  # one sampled row per request
    x = torch.randn(rows, HIDDEN)
    a, b = stacked(RANK, HIDDEN, seed=5), stacked(VOCAB + 8, RANK, seed=6)  # B padded past the vocab
    base = torch.randn(rows, VOCAB)
    y_stock, y_grouped = base.clone(), base.clone()
    stock.add_lora_logits(y_stock, x, a, b, 1.0)
    grouped.add_lora_logits(y_grouped, x, a, b, 1.0)
    torch.testing.assert_close(y_grouped, y_stock, atol=ATOL, rtol=1e-5)


def test_add_lora_embedding_matches_stock():
    stock, grouped = wrappers()
    t = n_tokens()
    x = torch.randn(t, RANK)  # the looked-up lora_a rows
    b = stacked(HIDDEN, RANK, seed=7)
    base = torch.randn(t, HIDDEN)
    y_stock, y_grouped = base.clone(), base.clone()
    stock.add_lora_embedding(y_stock, x, b)
    grouped.add_lora_embedding(y_grouped, x, b)
    base_rows = torch.tensor([lid == 0 for n, lid in REQUESTS for _ in range(n)])
    # The stock op also multiplies the base rows' (here random) inputs by the last, empty slot: zeros.
    torch.testing.assert_close(y_grouped, y_stock, atol=ATOL, rtol=1e-5)
    assert torch.equal(y_grouped[base_rows], base[base_rows])


def test_base_rows_stay_base_when_every_slot_is_in_use():
    """vLLM's stock CPU ops index slot -1 (the base model) as the last slot; the grouped path does not
    apply any adapter to base rows, whatever the slots hold."""
    slot_of = {7: 0, 9: MAX_LORAS - 1}
    stock, grouped = wrappers(slot_of=slot_of)
    t = n_tokens()
    x = torch.randn(t, HIDDEN)
    slots = tuple(slot_of.values())
    a, b = (stacked(RANK, HIDDEN, slots=slots, seed=8),), (stacked(HIDDEN, RANK, slots=slots, seed=9),)
    base = torch.randn(t, HIDDEN)
    y_stock, y_grouped = base.clone(), base.clone()
    stock.add_lora_linear(y_stock, x, a, b, 1.0, (HIDDEN,))
    grouped.add_lora_linear(y_grouped, x, a, b, 1.0, (HIDDEN,))
    base_rows = torch.tensor([lid == 0 for n, lid in REQUESTS for _ in range(n)])
    torch.testing.assert_close(y_grouped[~base_rows], y_stock[~base_rows], atol=ATOL, rtol=1e-5)
    assert torch.equal(y_grouped[base_rows], base[base_rows])
    assert not torch.allclose(y_stock[base_rows], base[base_rows])  # stock: slot 3's adapter leaked in


def test_all_base_batch_is_a_no_op():
    _stock, grouped = wrappers(requests=[(4, 0), (3, 0)])
    x, base = torch.randn(7, HIDDEN), torch.randn(7, HIDDEN)
    y = base.clone()
    grouped.add_lora_linear(y, x, (stacked(RANK, HIDDEN),), (stacked(HIDDEN, RANK),), 1.0, (HIDDEN,))
    assert torch.equal(y, base)


def test_rows_that_do_not_match_the_mapping_take_the_stock_path():
    stock, grouped = wrappers()
    t = n_tokens() + 3  # e.g. padded rows: not what the step's mapping describes
    x, base = torch.randn(t, HIDDEN), torch.randn(t, HIDDEN)
    fallbacks = STATS["stock_fallbacks"]
    a, b = (stacked(RANK, HIDDEN),), (stacked(HIDDEN, RANK),)
    with pytest.raises(RuntimeError):  # the stock op itself cannot handle this shape either
        stock.add_lora_linear(base.clone(), x, a, b, 1.0, (HIDDEN,))
    with pytest.raises(RuntimeError):
        grouped.add_lora_linear(base.clone(), x, a, b, 1.0, (HIDDEN,))
    assert STATS["stock_fallbacks"] > fallbacks


def test_the_gateway_installs_the_kernels_on_cpu_engines_only():
    """Every engine gets a worker extension (the LoRA coverage report); only grouped CPU engines the kernels."""
    from serving.app import llm_config_dicts
    from serving.config import ServingConfig
    from serving.engine import COVERAGE_EXTENSION_PATH, WORKER_EXTENSION_PATH
    from serving.engine.lora_coverage import COVERAGE_QUALNAME
    from serving.engine.lora_worker import EXTENSION_QUALNAME

    assert (WORKER_EXTENSION_PATH, COVERAGE_EXTENSION_PATH) == (EXTENSION_QUALNAME, COVERAGE_QUALNAME)
    embedded = ServingConfig.shipped("embedded")
    (cpu,) = llm_config_dicts(embedded)
    assert cpu["engine_kwargs"]["worker_extension_cls"] == EXTENSION_QUALNAME
    (gpu,) = llm_config_dicts(ServingConfig.shipped("production"))
    assert gpu["engine_kwargs"]["worker_extension_cls"] == COVERAGE_QUALNAME
    stock = embedded.model_copy(update={"lora": embedded.lora.model_copy(update={"cpu_kernels": "vllm"})})
    (cpu_stock,) = llm_config_dicts(stock)
    assert cpu_stock["engine_kwargs"]["worker_extension_cls"] == COVERAGE_QUALNAME
    assert "enable_tower_connector_lora" not in cpu["engine_kwargs"]
    tower = embedded.model_copy(update={"lora": embedded.lora.model_copy(update={"vision_tower": True})})
    assert llm_config_dicts(tower)[0]["engine_kwargs"]["enable_tower_connector_lora"] is True


def test_a_worker_extension_of_ones_own_is_refused():
    from serving.config import ServingConfig

    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["base_models"][0]["engine_kwargs"]["worker_extension_cls"] = "my.ext:Cls"
    with pytest.raises(ValueError, match="worker_extension_cls"):
        ServingConfig.model_validate(data)
    data["lora"]["cpu_kernels"] = "vllm"
    with pytest.raises(ValueError, match="worker_extension_cls"):
        ServingConfig.model_validate(data)


def test_the_worker_extension_installs_the_grouped_wrapper():
    from vllm.platforms import current_platform

    from serving.engine.lora_kernels import WRAPPER_QUALNAME, install, uninstall
    from serving.engine.lora_worker import INSTALLED, GroupedLoraWorkerExtension

    uninstall()  # importing the extension (here or in an earlier test) installed it in this process
    stock = current_platform.get_punica_wrapper()
    assert stock != WRAPPER_QUALNAME
    assert INSTALLED == current_platform.is_cpu()
    if INSTALLED:
        assert install()
        stats = GroupedLoraWorkerExtension().lora_kernel_stats()
        assert stats["installed"] and stats["punica_wrapper"] == WRAPPER_QUALNAME
    uninstall()
    assert current_platform.get_punica_wrapper() == stock


@pytest.fixture(autouse=True)
def _stock_platform_afterwards():
    """Leave this process's vLLM platform as it was: the worker extension installs on import."""
    yield
    from serving.engine.lora_kernels import uninstall

    uninstall()
