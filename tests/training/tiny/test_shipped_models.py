"""The shipped models: files, sizes, dtypes, agent profile, and that the adapter changes outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from agent.maze import generate_from_seed, render_frame
from agent.protocol import TUPLE, user_message

MODELS = Path(__file__).resolve().parents[3] / "models"
TINY, GRPO = MODELS / "maze-tiny", MODELS / "maze-grpo"
TEXT_TARGETS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_files_and_sizes():
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "preprocessor_config.json", "generation_config.json", "agent_profile.json"):
        assert (TINY / name).is_file(), name
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (GRPO / name).is_file(), name
    total = sum(f.stat().st_size for f in MODELS.rglob("*") if f.is_file())
    assert total < 20 * 2**20, f"models/ is {total / 2**20:.1f} MiB"
    assert (MODELS / "MODEL_CARD.md").is_file()


def test_weights_are_bf16_and_adapter_is_text_only():
    with safe_open(str(TINY / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}  # noqa: SIM118 - safe_open is no dict
    with safe_open(str(GRPO / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert {f.get_slice(k).get_dtype() for k in keys} == {"BF16"}
    assert keys and all(".language_model." in k and "lora_" in k for k in keys)
    assert not any(".visual." in k for k in keys)
    cfg = json.loads((GRPO / "adapter_config.json").read_text())
    assert set(cfg["target_modules"]) == TEXT_TARGETS
    assert cfg["peft_type"] == "LORA"


def test_profile_records_protocol_and_history():
    profile = json.loads((TINY / "agent_profile.json").read_text())
    assert profile["protocol"] == "tuple"
    assert profile["history"].startswith("window:")


@pytest.fixture(scope="module")
def first_turn():
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(TINY)
    lay = generate_from_seed(7, 7, 0)
    msgs = [user_message(TUPLE.initial_text(7, 7), render_frame(lay.grid, lay.start, lay.goal))]
    text = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[render_frame(lay.grid, lay.start, lay.goal)], return_tensors="pt")
    return processor, inputs


def test_base_replies_with_an_action_and_adapter_changes_outputs(first_turn):
    from peft import PeftModel
    from transformers import Qwen3VLForConditionalGeneration

    processor, inputs = first_turn
    base = Qwen3VLForConditionalGeneration.from_pretrained(TINY, dtype=torch.float32).eval()
    with torch.no_grad():
        logits_base = base(**inputs).logits[0, -1].clone()
        out = base.generate(**inputs, max_new_tokens=12, do_sample=False)
    reply = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]
    assert TUPLE.parse(reply) is not None, reply
    model = PeftModel.from_pretrained(base, GRPO).eval()
    with torch.no_grad():
        logits_lora = model(**inputs).logits[0, -1]
        with model.disable_adapter():
            logits_off = model(**inputs).logits[0, -1]
    assert torch.allclose(logits_off, logits_base, atol=1e-5)
    assert (logits_lora - logits_base).abs().max() > 1e-2
