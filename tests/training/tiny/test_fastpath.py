"""The batched training forward and prompt encoding match HF's processor and forward exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.tiny.data import DemoConfig, demo_stream
from training.tiny.fastpath import (
    FastQwen3VL,
    FrameBank,
    FrameCatalog,
    collate,
    frame_rows,
    make_codec,
    to_openai_messages,
)
from training.tiny.policies import message_images

TINY = Path(__file__).resolve().parents[3] / "models" / "maze-tiny"


@pytest.fixture(scope="module")
def setup():
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(TINY)
    model = Qwen3VLForConditionalGeneration.from_pretrained(TINY, dtype=torch.float32).eval()
    catalog = FrameCatalog(7)
    bank = FrameBank(catalog, processor.image_processor, "cpu", dtype=torch.float32)
    return processor, model, catalog, bank


def test_catalog_covers_every_simple_maze(setup):
    _, _, catalog, _ = setup
    assert len(catalog.grids) == 192  # spanning trees of the 3x3 room grid
    assert len(catalog) == 192 * 4 * 17


def test_fast_forward_equals_hf(setup):
    processor, model, catalog, bank = setup
    codec = make_codec(processor)
    episode = next(demo_stream(DemoConfig(), catalog, seed=3))
    samples = [episode[0], episode[min(3, len(episode) - 1)]]  # 1 image, then a full window
    enc = [codec.encode(s.messages) for s in samples]
    batch = collate(enc, [frame_rows(s.messages) for s in samples])
    fast = FastQwen3VL(model, bank.grid_thw)
    with torch.no_grad():
        h = fast.hidden(batch["input_ids"], batch["pos"], fast.vision(batch["frames"], bank))
        fast_logits = fast.logits_at(h, batch["last"])
        for i, s in enumerate(samples):
            msgs = to_openai_messages(s.messages, catalog)
            text = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            inputs = processor(text=[text], images=message_images(msgs), return_tensors="pt")
            assert inputs["input_ids"][0].tolist() == enc[i].ids.tolist()
            hf = model(**inputs).logits[0, -1]
            assert (hf - fast_logits[i]).abs().max() < 1e-4


def test_frame_bank_cap_starts_over_and_keeps_pixels_exact(setup):
    """On CPU the bank holds at most max_frames: a request past the cap empties it and refills
    only what is asked, with the same pixels as an uncapped bank."""
    processor, _, catalog, _ = setup
    full = FrameBank(catalog, processor.image_processor, "cpu", dtype=torch.float32, max_frames=0)
    capped = FrameBank(catalog, processor.image_processor, "cpu", dtype=torch.float32, max_frames=4)
    assert FrameBank(catalog, processor.image_processor, "cpu").max_frames == FrameBank.CPU_MAX_FRAMES
    capped.fill([0, 1, 2])
    assert capped.pixels.shape[0] == 3
    got = capped[torch.tensor([7, 8])]  # 3 + 2 > 4: starts over with these two
    assert capped.pixels.shape[0] == 2 and (capped.slot >= 0).sum() == 2
    assert torch.equal(got, full[torch.tensor([7, 8])])
    got = capped[torch.tensor([0, 7])]  # one new frame: fits, appended
    assert capped.pixels.shape[0] == 3 and torch.equal(got, full[torch.tensor([0, 7])])
    big = capped[torch.arange(10, 16)]  # one request larger than the cap is still served whole
    assert capped.pixels.shape[0] == 6 and torch.equal(big, full[torch.arange(10, 16)])
