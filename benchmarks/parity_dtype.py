"""How far a 16-bit GPU engine's first-token logprobs sit from the HF + peft reference, against how far
the adapter moves them: the margin a 16-bit parity tolerance has to fit in.

    python benchmarks/parity_dtype.py [--dtype bfloat16] [--out FILE]

On the parity frames (serving.parity.frames) with the shipped maze-tiny and maze-grpo, it takes the
first token's top-5 logprobs from vLLM's own engine (``vllm.LLM``, LoRA on, ``--dtype``, the chat
template the OpenAI server applies) with and without the adapter, and from HF + peft in float32 on
the CPU (the reference parity uses) and in ``--dtype`` on the engine's device. Each pair is compared as
parity compares (serving.parity.measure.compare): the largest |logprob difference| over tokens in
both top-5 lists, and the frames whose top token differs. Runs where vLLM has a GPU build (a CPU build
runs it in float32 on the CPU, as a check of the script).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.gpu_machine import machine  # noqa: E402
from benchmarks.support.provenance import provenance  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "parity_dtype.json"
BASE, ADAPTER = ROOT / "models" / "maze-tiny", ROOT / "models" / "maze-grpo"


def engine_top_logprobs(dtype: str, conversations) -> dict[str, list]:
    """vLLM's first-token top-5 per conversation, with maze-grpo (``adapter``) and without (``base``)."""
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    rank = json.loads((ADAPTER / "adapter_config.json").read_text())["r"]
    llm = LLM(model=str(BASE), dtype=dtype, enable_lora=True, max_lora_rank=rank, max_loras=1, max_model_len=4096,
              enforce_eager=True, gpu_memory_utilization=0.3, limit_mm_per_prompt={"image": 1})
    params = SamplingParams(max_tokens=1, temperature=0, logprobs=5)
    out = {}
    for side, lora in (("adapter", LoRARequest("maze-grpo", 1, str(ADAPTER))), ("base", None)):
        results = llm.chat([list(c) for c in conversations], params, lora_request=lora, use_tqdm=False)
        out[side] = [_top(r.outputs[0].logprobs[0]) for r in results]
    return out


def _top(logprobs: dict) -> list[tuple[str, float]]:
    ranked = sorted(logprobs.values(), key=lambda lp: -lp.logprob)[:5]
    return [(lp.decoded_token or "", float(lp.logprob)) for lp in ranked]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bfloat16", help="the engine's dtype (and the second reference's)")
    ap.add_argument("--out", type=Path, default=OUT, help="results file")
    args = ap.parse_args()
    import torch

    from serving.parity.frames import parity_frames
    from serving.parity.measure import TOLERANCE, compare
    from serving.parity.reference import reference_top_logprobs

    cuda = torch.cuda.is_available()
    dtype = args.dtype if cuda else "float32"
    frames = list(parity_frames())
    t0 = time.monotonic()
    engine = engine_top_logprobs(dtype, frames)
    refs = {"hf_float32_cpu": reference_top_logprobs(BASE, ADAPTER, frames),
            f"hf_{dtype}_{'cuda' if cuda else 'cpu'}": reference_top_logprobs(
                BASE, ADAPTER, frames, dtype=dtype, device="cuda" if cuda else "cpu"),
            "hf_float32_cpu_base": reference_top_logprobs(BASE, None, frames)}
    pairs = {f"engine_{dtype}_vs_{name}": (engine["adapter"], ref) for name, ref in refs.items() if "base" not in name}
    pairs["engine_adapter_vs_engine_base"] = (engine["adapter"], engine["base"])  # what the adapter moves, served
    pairs["hf_adapter_vs_hf_base"] = (refs["hf_float32_cpu"], refs["hf_float32_cpu_base"])  # and in the reference
    comparisons = {name: dict(zip(("max_abs_diff", "top_token_differs"), compare(a, b))) for name, (a, b) in pairs.items()}
    for name, c in comparisons.items():
        print(f"  {name}: max |diff| {c['max_abs_diff']:.4f}, top token differs on {c['top_token_differs']}", flush=True)
    result = {"dtype": dtype, "device": "cuda" if cuda else "cpu", "frames": len(frames), "tolerance_now": TOLERANCE,
              "comparisons": comparisons, "engine": engine, "references": refs,
              "seconds": round(time.monotonic() - t0, 1), "machine": machine(), **provenance(sys.argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
