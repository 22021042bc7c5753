"""How far a 16-bit GPU engine's first-token logprobs sit from the HF + peft reference, against how far
the adapter moves them: the margin a 16-bit parity tolerance has to fit in.

    python benchmarks/parity_dtype.py [--dtype bfloat16] [--out FILE]

On the parity frames (serving.parity.frames) with the shipped maze-tiny and maze-grpo, it takes the
first token's top-5 logprobs from vLLM's own engine (``vllm.LLM``, LoRA on, ``--dtype``, the chat
template the OpenAI server applies) with and without the adapter, and from HF + peft in float32 on
the CPU (the reference parity uses) and in ``--dtype`` on the engine's device. Each pair is compared as
parity compares (serving.parity.measure.compare): the largest |logprob difference| over tokens in
both top-5 lists, and the frames whose top token differs. On a GPU where vLLM has its GPU build; a CPU
build runs the same comparisons on the CPU (vLLM's CPU kernels, not the GPU's).
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


def start_engine(dtype: str):
    from serving.compat import LLM

    rank = json.loads((ADAPTER / "adapter_config.json").read_text())["r"]
    return LLM(model=str(BASE), dtype=dtype, enable_lora=True, max_lora_rank=rank, max_loras=1, max_model_len=4096,
               enforce_eager=True, gpu_memory_utilization=0.3, limit_mm_per_prompt={"image": 1})


def served(llm, conversations, folder: Path | None, lora_id: int = 0) -> list:
    """The engine's first-token top-5 per conversation, with the adapter in ``folder`` (None: the base)."""
    from serving.compat import SamplingParams
    from serving.compat import LoRARequest

    lora = LoRARequest(folder.name, lora_id, str(folder)) if folder is not None else None
    results = llm.chat([list(c) for c in conversations], SamplingParams(max_tokens=1, temperature=0, logprobs=5),
                       lora_request=lora, use_tqdm=False)
    return [_top(r.outputs[0].logprobs[0]) for r in results]


def _top(logprobs: dict) -> list[tuple[str, float]]:
    ranked = sorted(logprobs.values(), key=lambda lp: -lp.logprob)[:5]
    return [(lp.decoded_token or "", float(lp.logprob)) for lp in ranked]


# How a version can be served wrongly while the coverage check passes: its scale off by half (an alpha
# or rank-scaling mismatch), or the MLP modules' updates lost (their B at zero, so counted as no-ops).
WRONG = {"half_scale": lambda key: 0.5 if "lora_B" in key else 1.0,
         "no_mlp": lambda key: 0.0 if "lora_B" in key and "mlp" in key else 1.0}


def altered(src: Path, dst: Path, scale, seed: int | None = None) -> Path:
    """A copy of adapter ``src`` with each tensor times ``scale(key)``; with ``seed``, first made into
    another adapter of the same kind: its layers' updates moved to other layers (a random permutation)
    and each module's update negated or kept at random, so its size and structure stay a trained one's."""
    import random
    import re
    import shutil

    from safetensors.torch import load_file, save_file

    tensors = load_file(str(src / "adapter_model.safetensors"))
    if seed is not None:
        rng = random.Random(seed)
        layers = sorted({int(m.group(1)) for k in tensors if (m := re.search(r"layers\.(\d+)\.", k))})
        moved = dict(zip(layers, rng.sample(layers, len(layers)), strict=True))
        signs: dict[str, float] = {}
        redone = {}
        for key, t in tensors.items():
            new_key = re.sub(r"layers\.(\d+)\.", lambda m: f"layers.{moved[int(m.group(1))]}.", key)
            module = new_key.split(".lora_")[0]
            sign = signs.setdefault(module, rng.choice((1.0, -1.0))) if "lora_B" in key else 1.0
            redone[new_key] = (t.float() * sign).to(t.dtype)
        tensors = redone
    out = {key: (t.float() * scale(key)).to(t.dtype).contiguous() for key, t in tensors.items()}
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "adapter_config.json", dst / "adapter_config.json")
    save_file(out, str(dst / "adapter_model.safetensors"))
    return dst


def calibrate(llm, frames, n: int, work: Path) -> dict:
    """maze-grpo and ``n`` adapters made from it (:func:`altered`), each served as trained and in each WRONG way,
    against its float32 HF reference: the differences a tolerance must pass and those it must catch."""
    from serving.parity.measure import compare
    from serving.parity.reference import reference_top_logprobs

    adapters = [ADAPTER] + [altered(ADAPTER, work / f"shuffled-{i}", lambda key: 1.0, seed=i) for i in range(n)]
    rows, lora_id = [], 10
    for folder in adapters:
        reference = reference_top_logprobs(BASE, folder, frames)
        row = {"adapter": folder.name}
        for way, scale in {"as_trained": lambda key: 1.0, **WRONG}.items():
            lora_id += 1
            served_folder = folder if way == "as_trained" else altered(folder, work / f"{folder.name}-{way}", scale)
            diff, top = compare(served(llm, frames, served_folder, lora_id), reference)
            row[way] = {"max_abs_diff": round(diff, 5), "top_token_differs": top}
        rows.append(row)
        print(f"  {folder.name}: " + ", ".join(f"{w} {row[w]['max_abs_diff']:.3f}" for w in ("as_trained", *WRONG)),
              flush=True)
    passes = [r["as_trained"]["max_abs_diff"] for r in rows]
    wrong = {w: [r[w]["max_abs_diff"] for r in rows] for w in WRONG}
    at = {str(t): {"as_trained_failed": sum(d > t for d in passes),
                   **{f"{w}_passed": sum(d <= t for d in ds) for w, ds in wrong.items()}}
          for t in (0.02, 0.05, 0.1, 0.125, 0.15, 0.2, 0.3)}
    return {"adapters": len(rows), "as_trained_max": max(passes),
            "wrong_min": {w: min(ds) for w, ds in wrong.items()}, "at_tolerance": at, "rows": rows}


def markdown_table(results: dict) -> str:
    """The docs' table: per tolerance, the versions served as trained that fail and the wrong ones that pass."""
    cal = results["calibration"]
    n = cal["adapters"]
    lines = ["| tolerance | served as trained, failed | at half scale, passed | without MLP updates, passed |",
             "|---|---|---|---|"]
    for t, row in cal["at_tolerance"].items():
        lines.append(f"| {t} | {row['as_trained_failed']} of {n} | {row['half_scale_passed']} of {n} | "
                     f"{row['no_mlp_passed']} of {n} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bfloat16", help="the engine's dtype (and the second reference's)")
    ap.add_argument("--out", type=Path, default=OUT, help="results file")
    ap.add_argument("--random", type=int, default=24, help="adapters made from maze-grpo (layers moved, updates negated) to calibrate on")
    ap.add_argument("--work", default="/tmp/maze-parity-dtype", help="folder for the random and altered adapters")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    args = ap.parse_args()
    if args.table:
        print(markdown_table(json.loads(args.out.read_text())))
        return 0
    import torch

    from serving.parity.frames import parity_frames
    from serving.parity.measure import TOLERANCE, compare
    from serving.parity.reference import reference_top_logprobs

    cuda = torch.cuda.is_available()
    dtype = args.dtype
    frames = list(parity_frames())
    t0 = time.monotonic()
    llm = start_engine(dtype)
    engine = {"adapter": served(llm, frames, ADAPTER, 1), "base": served(llm, frames, None)}
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
              "calibration": calibrate(llm, frames, args.random, Path(args.work)),
              "seconds": round(time.monotonic() - t0, 1), "machine": machine(), **provenance(sys.argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
