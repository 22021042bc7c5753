"""The reference side of parity: what HF transformers (+ peft for an adapter) compute from the
base's and the adapter's own files, on CPU in float32, for the first token of a conversation.

This is the trainer's arithmetic (SkyRL trains through HF + peft), independent of vLLM's loader and
kernels, so a served version that matches it is the one trained. It needs torch, transformers and
peft and the base's weights on this machine: the embedded base qualifies; a GPU base usually does
not, and then parity falls back to the check that the adapter changes the served output at all.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

TopK = list[tuple[str, float]]


def reference_available(base_folder: str | Path) -> str | None:
    """None when a reference can be computed here, else why not."""
    if not (Path(base_folder) / "config.json").is_file():
        return f"the base's weights are not readable here ({base_folder})"
    try:
        import peft  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return f"no HF reference on this machine ({exc.name} is not installed)"
    return None


def _hf_messages(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages -> HF processor messages (data: URL images decoded to PIL)."""
    from PIL import Image

    out = []
    for message in conversation:
        parts = []
        for part in message["content"]:
            if part["type"] == "text":
                parts.append({"type": "text", "text": part["text"]})
            else:
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                parts.append({"type": "image", "image": Image.open(io.BytesIO(data)).convert("RGB")})
        out.append({"role": message["role"], "content": parts})
    return out


def reference_top_logprobs(base_folder: str | Path, adapter_folder: str | Path | None,
                           conversations: list[list[dict[str, Any]]], k: int = 5, *, dtype: str = "float32",
                           device: str = "cpu") -> list[TopK]:
    """The first generated token's top-``k`` (token, logprob) per conversation, under HF (+ peft), with
    the model in ``dtype`` on ``device``."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a check inside `maze-train watch` or the CLI: no loading bars
    processor = AutoProcessor.from_pretrained(str(base_folder))
    model = AutoModelForImageTextToText.from_pretrained(str(base_folder), dtype=getattr(torch, dtype)).to(device).eval()
    if adapter_folder is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_folder)).eval()
    out = []
    for conversation in conversations:
        inputs = processor.apply_chat_template(_hf_messages(conversation), add_generation_prompt=True, tokenize=True,
                                               return_dict=True, return_tensors="pt").to(device)
        with torch.no_grad():
            logprobs = torch.log_softmax(model(**inputs).logits[0, -1].float(), -1)
        values, ids = logprobs.topk(k)
        out.append([(processor.tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids, strict=True)])
    return out


__all__ = ["TopK", "reference_available", "reference_top_logprobs"]
