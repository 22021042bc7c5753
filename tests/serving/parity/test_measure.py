"""Served parity's comparison (serving.parity) and its fixed frames."""

from __future__ import annotations

import json

from evaluation.parity_frames import FRAMES_FILE, build_frames
from serving.parity.frames import parity_frames
from serving.parity.measure import TOLERANCE, TOLERANCE_16BIT, compare, difference, tolerance_for
from serving.parity.reference import reference_available


def test_the_shipped_frames_are_the_agent_runners_first_turns():
    assert json.loads(FRAMES_FILE.read_text()) == json.loads(json.dumps(build_frames()))
    frames = parity_frames()
    assert len(frames) == 4 and all(c[0]["content"][1]["image_url"]["url"].startswith("data:image/png") for c in frames)


def test_difference_is_over_the_tokens_both_lists_hold():
    a = [("0", -0.10), ("1", -2.0), ("x", -3.0)]
    b = [("0", -0.11), ("1", -2.005), ("y", -3.5)]
    diff, same_top = difference(a, b)
    assert abs(diff - 0.01) < 1e-9 and same_top


def test_a_split_utf8_token_matches_whether_decoded_as_empty_or_replacement():
    assert difference([("\ufffd", -1.0), ("a", -2.0)], [("", -1.001), ("a", -2.0)])[1]


def test_a_different_top_token_fails_unless_it_is_a_tie():
    served = [("0", -0.5), ("1", -0.9)]
    assert compare([served], [[("1", -0.5), ("0", -0.9)]])[1] == 1
    tie = [("1", -0.69), ("0", -0.69 - TOLERANCE / 2)]
    assert compare([[("0", -0.69), ("1", -0.695)]], [tie])[1] == 0


def test_no_shared_token_is_an_infinite_difference():
    assert compare([[("a", -1.0)]], [[("b", -1.0)]])[0] == float("inf")


def test_a_reference_needs_the_bases_files(tmp_path):
    assert "not readable" in reference_available(tmp_path / "nowhere")


def test_a_bf16_adapter_is_read_as_trained_or_not(tmp_path):
    """Trainers export bf16 weights (numpy has no bf16): the served-as-base check reads them all the same."""
    import torch
    from safetensors.torch import save_file

    from serving.parity.measure import _adapter_is_nonzero

    stem = "base_model.model.model.language_model.layers.0.self_attn.q_proj"
    for name, b in (("zero", torch.zeros(32, 8)), ("trained", torch.full((32, 8), 0.5))):
        (tmp_path / name).mkdir()
        save_file({f"{stem}.lora_A.weight": torch.ones(8, 32, dtype=torch.bfloat16),
                   f"{stem}.lora_B.weight": b.to(torch.bfloat16)}, str(tmp_path / name / "adapter_model.safetensors"))
    assert not _adapter_is_nonzero(tmp_path / "zero") and _adapter_is_nonzero(tmp_path / "trained")


def test_a_16_bit_engine_is_held_to_the_16_bit_tolerance():
    from serving.config import BaseModelSpec

    specs = [BaseModelSpec(id="b", source="x", engine_kwargs={"dtype": d} if d else {})
             for d in ("float32", "FLOAT", None, "auto", "bfloat16", "float16")]
    assert [tolerance_for(s) for s in specs] == \
        [TOLERANCE, TOLERANCE, TOLERANCE_16BIT, TOLERANCE_16BIT, TOLERANCE_16BIT, TOLERANCE_16BIT]
    # what a bfloat16 GPU engine serving maze-grpo as trained showed against the float32 reference
    served, reference = [("0", -0.30), ("1", -1.40)], [("0", -0.378), ("1", -1.35)]
    assert compare([served], [reference], TOLERANCE_16BIT) == (abs(-0.30 + 0.378), 0)
    # the tie rule takes the same tolerance: a top-token swap within it is a tie
    swapped = [("1", -0.69), ("0", -0.69 - TOLERANCE_16BIT / 2)]
    assert compare([[("0", -0.69), ("1", -0.70)]], [swapped], TOLERANCE_16BIT)[1] == 0
    assert compare([[("0", -0.69), ("1", -0.70)]], [swapped])[1] == 1


def test_check_served_holds_each_base_to_its_own_engines_tolerance(monkeypatch):
    """The path `adapters verify --parity` and `maze-train watch` take: the embedded base (float32) is held
    to 0.02, the same base in bfloat16 to the 16-bit tolerance."""
    from serving.adapters import ParityRecord
    from serving.config import ServingConfig
    from serving.parity import measure as parity_measure

    seen = []

    def fake_measure(store, gateway, base, base_folder, name, version, tolerance):  # the engine cannot run here
        seen.append(tolerance)
        return ParityRecord(ok=True, frames=4, max_abs_diff=0.0, reference="hf+peft", at="now", detail="")

    monkeypatch.setattr(parity_measure, "measure", fake_measure)
    cfg = ServingConfig.shipped("embedded")
    data = cfg.model_dump(mode="json")
    data["base_models"][0]["engine_kwargs"]["dtype"] = "bfloat16"
    for config in (cfg, ServingConfig.model_validate(data)):
        parity_measure.check_served(config, parity_measure.Gateway("http://127.0.0.1:9/v1"), "a", "0123456789ab",
                                    record=False)
    assert seen == [TOLERANCE, TOLERANCE_16BIT]
