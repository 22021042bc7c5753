"""Real peft LoRA adapters for models/maze-tiny, of the kinds a trainer may hand the gateway, and the
HF + peft reference a served adapter must match.

Each adapter wraps maze-tiny with peft, sets the LoRA weights it keeps to N(0, 0.2) (large enough to
move the first token's logprobs by whole nats) and the others to zero, and saves it as peft does:

* ``tower``: ``all-linear`` (SkyRL's default targets), only the vision tower and merger trained;
* ``lm``: ``all-linear``, only the language model trained (the tower modules stay at zero);
* ``lm-explicit``: the language model's seven projections named explicitly;
* ``renamed``: ``lm-explicit`` with its tensors under a prefix that names no module of the base;
* ``dora``: DoRA on q/v (a peft feature vLLM does not serve).
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "models" / "maze-tiny"
LM_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
KINDS = ("tower", "lm", "lm-explicit", "renamed", "dora")


def _base_model():
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration.from_pretrained(str(BASE), dtype=torch.float32).eval()


def _build(folder: Path, targets, keep, *, dora: bool = False) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(_base_model(), LoraConfig(r=8, lora_alpha=16, target_modules=targets, use_dora=dora))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0, 0.2) if keep(name) else param.zero_()
    model.save_pretrained(str(folder))
    (folder / "README.md").unlink(missing_ok=True)
    return folder


def _rename(src: Path, folder: Path) -> Path:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, folder, dirs_exist_ok=True)
    weights = folder / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    save_file({k.replace("base_model.model.model.language_model.", "base_model.model.transformer.decoder."): v
               for k, v in tensors.items()}, str(weights))
    return folder


def build_adapter(kind: str, root: Path) -> Path:
    """The ``kind`` adapter (one of :data:`KINDS`) under ``root``, built once per ``root``."""
    folder = root / kind
    if (folder / "adapter_model.safetensors").is_file():
        return folder
    if kind == "tower":
        return _build(folder, "all-linear", lambda n: ".visual." in n)
    if kind == "lm":
        return _build(folder, "all-linear", lambda n: ".language_model." in n)
    if kind == "lm-explicit":
        return _build(folder, LM_TARGETS, lambda n: True)
    if kind == "renamed":
        return _rename(build_adapter("lm-explicit", root), folder)
    if kind == "dora":
        return _build(folder, ["q_proj", "v_proj"], lambda n: True, dora=True)
    raise ValueError(f"unknown adapter kind {kind!r}; one of {KINDS}")


def hf_first_logprobs(adapter: Path | None, image_png: bytes, text: str, k: int = 5) -> list[tuple[str, float]]:
    """The first generated token's top-``k`` (token, logprob) under HF transformers (+ peft with
    ``adapter``), for one user turn of ``text`` and an image, through the model's chat template."""
    import io

    import torch
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(BASE))
    image = Image.open(io.BytesIO(image_png)).convert("RGB")
    messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "image": image}]}]
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    model = _base_model()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(model(**inputs).logits[0, -1].float(), -1)
    values, ids = logprobs.topk(k)
    return [(processor.tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids, strict=True)]


__all__ = ["BASE", "KINDS", "LM_TARGETS", "build_adapter", "hf_first_logprobs"]
