"""Checks of the fast path on a GPU machine: processor pixels on GPU vs CPU, fast vs HF forward.

Usage: ``python -m training.tiny.gpu.check MODEL_DIR``; prints one JSON line of measurements.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import torch

from training.tiny.fastpath import FastQwen3VL, FrameBank, FrameCatalog, collate, frame_rows, make_codec

log = logging.getLogger("training.tiny.gpu.check")


def main(model_dir: str) -> dict:
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    from training.tiny.data import DemoConfig, demo_stream

    processor = AutoProcessor.from_pretrained(model_dir)
    catalog = FrameCatalog(7)
    rows = list(range(0, len(catalog), 51))[:256]
    cpu = FrameBank(catalog, processor.image_processor, "cpu", dtype=torch.float32)
    gpu = FrameBank(catalog, processor.image_processor, "cuda", dtype=torch.float32)
    t = time.perf_counter()
    cpu.fill(rows)
    t_cpu = time.perf_counter() - t
    t = time.perf_counter()
    gpu.fill(rows)
    torch.cuda.synchronize()
    t_gpu = time.perf_counter() - t
    idx = torch.as_tensor(rows)
    diff = (cpu[idx].cuda() - gpu[idx]).abs()
    res = {"pixels_max_diff": diff.max().item(), "pixels_frac_diff": (diff > 1e-6).float().mean().item(),
           "cpu_s_per_frame": t_cpu / len(rows), "gpu_s_per_frame": t_gpu / len(rows)}
    model = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    fast = FastQwen3VL(model, gpu.grid_thw)
    codec = make_codec(processor)
    samples = next(demo_stream(DemoConfig(), catalog, seed=1))[:4]
    from training.tiny.fastpath import to_openai_messages
    from training.tiny.policies import message_images

    b = collate([codec.encode(s.messages) for s in samples], [frame_rows(s.messages) for s in samples])
    with torch.no_grad():
        h = fast.hidden(b["input_ids"].cuda(), b["pos"].cuda(), fast.vision(b["frames"].cuda(), cpu))
        lf = fast.logits_at(h, b["last"].cuda())
        worst = 0.0
        for i, s in enumerate(samples):
            om = to_openai_messages(s.messages, catalog)
            text = processor.apply_chat_template(om, tokenize=False, add_generation_prompt=True)
            inp = processor(text=[text], images=message_images(om), return_tensors="pt").to("cuda")
            worst = max(worst, (model(**inp).logits[0, -1] - lf[i]).abs().max().item())
    res["fast_vs_hf_logit_max_diff_fp32"] = worst
    print(json.dumps(res), flush=True)
    return res


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(sys.argv[1])
