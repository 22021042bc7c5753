"""What the engine applied of an adapter (serving.engine.lora_coverage): vLLM's own LoRA manager asked
through the worker extension, in a real CPU engine with tower LoRA off (the stack runs it on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from serving.engine.lora_coverage import refusal
from tests.support.peft_adapters import BASE, build_adapter

ROOT = Path(__file__).resolve().parents[3]


def _report(left_out, tower_lora=False):
    return {"registered": True, "applied": 16, "left_out": left_out, "tower_lora": tower_lora}


def test_modules_left_out_with_trained_weights_are_a_refusal_naming_their_group():
    left = [{"module": f"visual.blocks.{i}.attn.qkv", "group": "vision_tower", "zero": False} for i in range(4)]
    why = refusal(_report(left), "a@0123456789ab", 52)
    assert why.startswith("adapter 'a@0123456789ab' would be served without part of its weights: 4 of 52 LoRA "
                          "modules are in the vision tower and its merger, which this gateway does not apply")
    assert "visual.blocks.0.attn.qkv, visual.blocks.1.attn.qkv, visual.blocks.2.attn.qkv, ..." in why
    assert why.endswith("set lora.vision_tower: true in the serving config or retrain without them")


def test_modules_left_out_at_zero_change_nothing_and_are_no_refusal():
    left = [{"module": "visual.blocks.0.attn.qkv", "group": "vision_tower", "zero": True}]
    assert refusal(_report(left), "a@0123456789ab", 52) is None
    assert refusal(_report([]), "a@0123456789ab", 28) is None


def test_an_adapter_the_engine_did_not_register_is_a_refusal():
    assert "did not register" in refusal({"registered": False}, "a@0123456789ab", 3)


_ENGINE_SCRIPT = textwrap.dedent("""
    import json, sys
    from vllm import LLM
    from vllm.lora.request import LoRARequest
    from serving.engine import COVERAGE_EXTENSION_PATH
    from serving.engine.lora_coverage import module_count, refusal, take_report
    llm = LLM(model=sys.argv[1], enable_lora=True, max_lora_rank=8, max_loras=1, max_model_len=1024,
              enforce_eager=True, dtype="float32", kv_cache_memory_bytes=64 * 2**20, gpu_memory_utilization=0.2,
              worker_extension_cls=COVERAGE_EXTENSION_PATH)
    out = {"tower_support": llm.collective_rpc("lora_coverage_install"),
           "slots": llm.collective_rpc("lora_slot_memory")[0]}
    for i, folder in enumerate(sys.argv[2:], 1):
        llm.llm_engine.add_lora(LoRARequest(f"a{i}", i, folder))
        left = take_report(folder)  # what the worker left at registration
        report = llm.collective_rpc("lora_coverage", args=(i,))[0]
        seconds = left.pop("coverage_s")
        out[folder] = {"report": report, "left": left, "seconds": seconds, "gone": take_report(folder),
                       "refusal": refusal(report, f"a{i}", lambda: module_count(folder))}
        llm.llm_engine.remove_lora(i)
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def engine_out(tmp_path_factory):
    """One CPU engine's answers: the coverage of a tower, an LM and a renamed adapter, and its slots."""
    tmp_path = tmp_path_factory.mktemp("coverage")
    folders = [build_adapter(kind, tmp_path) for kind in ("tower", "lm", "renamed")]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _ENGINE_SCRIPT, str(BASE), *map(str, folders)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT ")), folders


@pytest.mark.slow
@pytest.mark.engine_seam
def test_a_cpu_engine_without_tower_lora_reports_what_it_leaves_out(engine_out):
    out, folders = engine_out
    tower, lm, renamed = (out[str(f)] for f in folders)
    assert out["tower_support"] == [False]
    # all-linear: 28 language-model modules (packed into 16 by vLLM) applied, the tower's 24 left out
    assert tower["report"]["applied"] == 16 and len(tower["report"]["left_out"]) == 24
    assert "24 of 52 LoRA modules are in the vision tower and its merger" in tower["refusal"]
    assert lm["refusal"] is None  # the same 24 left out, all at zero
    assert len(lm["report"]["left_out"]) == 24 and all(m["zero"] for m in lm["report"]["left_out"])
    assert "28 of 28 LoRA modules name no module of the base" in renamed["refusal"]
    assert renamed["report"]["applied"] == 0
    # The report left at registration is the RPC's, read once, and says how long the check took (a
    # wall time on a niced test worker: its size is benchmarks/load_checks.py's to measure).
    for one in (tower, lm, renamed):
        assert one["left"] == one["report"] and one["gone"] is None and one["seconds"] > 0


def _slot_bytes(rank: int, dtype_bytes: int) -> int:
    """One LoRA slot of maze-tiny's language model, from its config: A (rank x in) and B (out x rank)
    for each of the seven projections of every layer, and for the token embedding and the LM head,
    which vLLM wraps whatever the adapters target."""
    text = json.loads((BASE / "config.json").read_text())["text_config"]
    h, i, d = text["hidden_size"], text["intermediate_size"], text["head_dim"]
    q, kv = text["num_attention_heads"] * d, text["num_key_value_heads"] * d
    in_out = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
    ends = 2 * (text["vocab_size"] + h)
    return rank * dtype_bytes * (text["num_hidden_layers"] * sum(a + b for a, b in in_out) + ends)


@pytest.mark.slow
@pytest.mark.engine_seam
def test_the_engine_reports_what_its_lora_slots_hold(engine_out):
    slots = engine_out[0]["slots"]
    assert (slots["slots"], slots["max_rank"], slots["device"]) == (1, 8, "cpu")
    assert slots["modules"] == 4 * 4 + 2  # qkv, o, gate_up, down per layer (as vLLM packs them), the two ends
    assert slots["bytes"] == _slot_bytes(8, 4)  # float32
    assert slots["per_slot_mib"] == round(_slot_bytes(8, 4) / 2**20, 3)
