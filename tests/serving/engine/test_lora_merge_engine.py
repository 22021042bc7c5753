"""The merged-weights path (serving.engine.lora_merge) in a real vLLM CPU engine: with merged slots on,
single-adapter steps run on merged matrices (the worker's own counters say so) and give the tokens and
log-probabilities of the grouped kernels' path with merging off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from serving.compat import engine_build
from serving.engine.lora_merge import SLOTS_ENV

pytest.importorskip("vllm")
if engine_build() != "cpu":  # vLLM's CUDA wheel builds its CPU LoRA wrapper on the GPU
    pytest.skip("the CPU LoRA kernels run on vLLM's CPU build only", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[3]
BASE, ADAPTER = ROOT / "models" / "maze-tiny", ROOT / "models" / "maze-grpo"

_ENGINE_SCRIPT = textwrap.dedent("""
    import json, sys
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest
    from serving.engine.lora_worker import EXTENSION_QUALNAME
    llm = LLM(model=sys.argv[1], enable_lora=True, max_lora_rank=64, max_loras=1, max_model_len=1024,
              enforce_eager=True, dtype="float32", kv_cache_memory_bytes=64 * 2**20,
              worker_extension_cls=EXTENSION_QUALNAME)
    params = SamplingParams(max_tokens=12, temperature=0, logprobs=0, ignore_eos=True)
    prompts = ["move up", "the goal is to the left of the agent", "stop"]
    lora = LoRARequest("maze-grpo", 1, sys.argv[2])
    out = {"adapter": [], "base": []}
    for p in prompts:
        (a,) = llm.generate([p], params, lora_request=lora, use_tqdm=False)
        (b,) = llm.generate([p], params, use_tqdm=False)
        for key, r in (("adapter", a), ("base", b)):
            c = r.outputs[0]
            out[key].append({"ids": list(c.token_ids),
                             "logprobs": [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]})
    out["stats"] = llm.collective_rpc("lora_kernel_stats")[0]
    print("RESULT " + json.dumps(out))
""")


def _run(slots: int) -> dict:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(ROOT), SLOTS_ENV: str(slots)}
    proc = subprocess.run([sys.executable, "-c", _ENGINE_SCRIPT, str(BASE), str(ADAPTER)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT "))


@pytest.mark.slow
def test_single_adapter_steps_run_merged_and_match_the_grouped_kernels():
    merged, grouped = _run(1), _run(0)
    assert merged["stats"]["installed"] and merged["stats"]["merged_slots"] == 1
    # Every adapter step of a one-request batch owns one slot: it ran merged (the base's steps never do).
    assert merged["stats"]["merged_calls"] > 0 and merged["stats"]["merges"] > 0, merged["stats"]
    assert grouped["stats"]["merged_slots"] == 0 and "merged_calls" not in grouped["stats"]
    for key in ("adapter", "base"):
        for m, g in zip(merged[key], grouped[key], strict=True):
            assert m["ids"] == g["ids"], key
            assert m["logprobs"] == pytest.approx(g["logprobs"], abs=1e-3), key
    # The adapter changes what the model says: the comparison above is not of two base runs.
    assert [r["ids"] for r in merged["adapter"]] != [r["ids"] for r in merged["base"]]
