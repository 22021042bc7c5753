"""The KV-cached rollout gives the replies and log-probs of the uncached one it replaced."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent.maze import generate_from_seed
from agent.protocol import assistant_message, get_protocol, user_message
from training.tiny.diagnostics import FastPolicy
from training.tiny.fastpath import frame_rows, frame_url
from training.tiny.fastpath.rollout import sample_replies

MODELS = Path(__file__).resolve().parents[3] / "models"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy():
    """The shipped base with the shipped adapter (non-zero LoRA, so peft's layers take part)."""
    return FastPolicy.load(MODELS / "maze-tiny", MODELS / "maze-grpo")


def test_prompts_of_different_lengths_decode_alike(policy):
    """Right padding: the short prompt's cached pad columns must stay out of its reply's attention."""
    fast, bank, codec = policy.fast, policy.bank, policy.codec
    proto, cat = get_protocol(policy.profile["protocol"]), bank.catalog
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
            settings = policy.settings(t, max_new_tokens=8, kv_cache=cached)
            out[cached, t] = sample_replies(fast, bank, prompts, frames, codec.eos_id, settings,
                                            torch.Generator().manual_seed(3), policy.device, codec.banned_ids)
    for t in (0.0, 1.0):
        (tok_c, lp_c), (tok_f, lp_f) = out[True, t], out[False, t]
        assert tok_c == tok_f
        assert all(len(r) >= 2 for r in tok_c)  # several reply tokens: decode steps ran
        for a, b in zip(lp_c, lp_f, strict=True):
            assert a == pytest.approx(b, abs=1e-4)


def test_cached_episodes_match_uncached(policy):
    layouts = [generate_from_seed(7, 7, s) for s in (0, 1, 2, 27)]
    for t in (0.0, 1.0):
        runs = [policy.play(layouts, policy.settings(t, max_turns=6, max_new_tokens=8, kv_cache=cached), seed=5)
                for cached in (True, False)]
        for c, f in zip(*runs, strict=True):
            assert c.conversation == f.conversation and c.success == f.success
            for tc, tf in zip(c.turns, f.turns, strict=True):
                assert tc.tokens == tf.tokens
                assert tc.logprobs == pytest.approx(tf.logprobs, abs=1e-4)
