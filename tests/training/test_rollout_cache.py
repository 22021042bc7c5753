"""The KV-cached rollout gives the replies and log-probs of the uncached one it replaced."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import training  # noqa: F401 - makes torchvision importable on CPU torch
from agent.mazes import generate_from_seed
from agent.protocol import assistant_message, get_protocol, user_message
from training.demos import read_profile
from training.fastpath import FastQwen3VL, FrameBank, FrameCatalog, frame_rows, frame_url
from training.grpo_local import GRPOConfig, build_policy, load_adapter_weights
from training.rollout import RolloutSettings, play, sample_replies
from training.sft import make_codec

MODELS = Path(__file__).resolve().parents[2] / "models"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy():
    """The shipped base with the shipped adapter (non-zero LoRA, so peft's layers take part)."""
    device = torch.device("cpu")
    cfg = GRPOConfig(model_path=str(MODELS / "maze-tiny"), ckpt_path="c", export_path="e")
    model, processor = build_policy(cfg, device)
    load_adapter_weights(model, MODELS / "maze-grpo")
    model.eval()
    bank = FrameBank(FrameCatalog(7), processor.image_processor, device, dtype=torch.float32)
    return FastQwen3VL(model, bank.grid_thw), bank, make_codec(processor), read_profile(MODELS / "maze-tiny")


def _settings(profile: dict, temperature: float, kv_cache: bool, max_turns: int = 6) -> RolloutSettings:
    return RolloutSettings(max_turns=max_turns, temperature=temperature, max_new_tokens=8, history=profile["history"],
                           protocol=profile["protocol"], kv_cache=kv_cache)


def test_prompts_of_different_lengths_decode_alike(policy):
    """Right padding: the short prompt's cached pad columns must stay out of its reply's attention."""
    fast, bank, codec, profile = policy
    proto, cat = get_protocol(profile["protocol"]), bank.catalog
    lay = generate_from_seed(7, 7, 4)
    url = frame_url(cat.row(lay.grid, lay.start, lay.goal))
    first = [user_message(proto.initial_text(7, 7), image_url=url)]
    later = first + [assistant_message("('move', 1)"), user_message(proto.parse_failure_text(), image_url=url)]
    convs = [first, later, first]
    prompts, frames = [codec.encode(c) for c in convs], [frame_rows(c) for c in convs]
    assert len(prompts[0].ids) != len(prompts[1].ids)
    out = {}
    for cached in (True, False):
        for t in (0.0, 1.0):
            out[cached, t] = sample_replies(fast, bank, prompts, frames, codec.eos_id, _settings(profile, t, cached),
                                            torch.Generator().manual_seed(3), torch.device("cpu"), codec.banned_ids)
    for t in (0.0, 1.0):
        (tok_c, lp_c), (tok_f, lp_f) = out[True, t], out[False, t]
        assert tok_c == tok_f
        assert all(len(r) >= 2 for r in tok_c)  # several reply tokens: decode steps ran
        for a, b in zip(lp_c, lp_f, strict=True):
            assert a == pytest.approx(b, abs=1e-4)


def test_cached_episodes_match_uncached(policy):
    fast, bank, codec, profile = policy
    layouts = [generate_from_seed(7, 7, s) for s in (0, 1, 2, 27)]
    for t in (0.0, 1.0):
        runs = [play(fast, bank, codec, bank.catalog, layouts, _settings(profile, t, cached),
                     generator=torch.Generator().manual_seed(5)) for cached in (True, False)]
        for c, f in zip(*runs, strict=True):
            assert c.conversation == f.conversation and c.success == f.success
            for tc, tf in zip(c.turns, f.turns, strict=True):
                assert tc.tokens == tf.tokens
                assert tc.logprobs == pytest.approx(tf.logprobs, abs=1e-4)
