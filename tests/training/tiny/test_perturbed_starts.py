"""Perturbed starts: groups that begin a few forced random moves into the maze."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.maze import MOVES, generate_from_seed
from agent.protocol import get_protocol
from training.tiny.data import perturbed_group
from training.tiny.data.perturbed_starts import perturbed_episode, random_walk
from training.tiny.fastpath import FrameCatalog, RolloutSettings, frame_url, play, play_on
from training.tiny.trainers import GRPOConfig
from training.tiny.trainers.grpo import train as grpo_train

TINY = Path(__file__).resolve().parents[3] / "models" / "maze-tiny"


def test_random_walk_stays_on_open_cells():
    rng = np.random.default_rng(0)
    for seed in range(20):
        lay = generate_from_seed(7, 7, seed)
        moves = random_walk(lay, 5, rng)
        at = tuple(lay.start)
        for d in moves:
            at = (at[0] + MOVES[d][0], at[1] + MOVES[d][1])
            assert lay.grid[at] == 0
        assert len(moves) == 5
    again = [random_walk(generate_from_seed(7, 7, 3), 4, np.random.default_rng(7)) for _ in range(2)]
    assert again[0] == again[1]  # seeded


def test_perturbed_episode_stands_where_the_moves_led():
    catalog = FrameCatalog(7)
    lay = generate_from_seed(7, 7, 30)  # start (1, 1); right, right is a dead end
    e = perturbed_episode(lay, [0, 0, 3], catalog)  # the last move bumps into the wall below (1, 3)
    assert e.agent == (1, 3) and e.start_turn == 3 and not e.turns and not e.done
    conv = e.conversation
    assert len(conv) == 1 + 2 * 3 and [m["content"] for m in conv[1::2]] == ["('move', 0)", "('move', 0)", "('move', 3)"]
    proto = get_protocol("tuple")
    assert proto.parse(conv[1]["content"]) == ("move", 0)
    last_image = next(p for p in conv[-1]["content"] if p["type"] == "image_url")["image_url"]["url"]
    assert last_image == frame_url(catalog.row(lay.grid, (1, 3), lay.goal))
    assert "wall" in next(p for p in conv[-1]["content"] if p["type"] == "text")["text"]


def test_perturbed_group_shares_one_state_in_separate_copies():
    catalog = FrameCatalog(7)
    g = perturbed_group(generate_from_seed(7, 7, 5), 4, 3, np.random.default_rng(1), catalog, greedy=1)
    assert len(g) == 4 and [e.greedy for e in g] == [True, False, False, False]
    assert len({(e.agent, e.start_turn, len(e.conversation)) for e in g}) == 1 and 1 <= g[0].start_turn <= 3
    g[0].conversation.append({"role": "assistant", "content": "x"})
    assert len(g[1].conversation) == 1 + 2 * g[1].start_turn


def test_perturbed_starts_config_checks():
    with pytest.raises(ValueError, match="perturbed_starts"):
        GRPOConfig(model_path="m", ckpt_path="c", export_path="e", perturbed_starts=0.5, state_groups=4,
                   greedy_samples_per_prompt=1)
    with pytest.raises(ValueError, match="at most 1"):
        GRPOConfig(model_path="m", ckpt_path="c", export_path="e", perturbed_starts=0.6, hard_replay_fraction=0.5)


@pytest.mark.slow
def test_forcing_the_greedy_moves_replays_the_greedy_episode():
    """Forced with the greedy policy's own first moves, a perturbed episode must go on exactly as
    the greedy episode did: the same history, position and turn budget."""
    from training.tiny.diagnostics import FastPolicy

    pol = FastPolicy.load(TINY)  # the base with a zero LoRA, as GRPO starts
    fast, bank, codec, catalog = pol.fast, pol.bank, pol.codec, pol.bank.catalog
    settings = RolloutSettings(max_turns=7, temperature=0.0, max_new_tokens=8)
    proto = get_protocol("tuple")
    roots = play(fast, bank, codec, catalog, [generate_from_seed(7, 7, s) for s in (0, 1)], settings)
    starts = []
    for e in roots:
        replies = [m["content"] for m in e.conversation if m["role"] == "assistant"][:2]
        starts.append(perturbed_episode(e.layout, [proto.parse(r)[1] for r in replies], catalog))
    played = play_on(fast, bank, codec, catalog, starts, settings)
    for root, b in zip(roots, played, strict=True):
        assert [x.tokens for x in b.turns] == [x.tokens for x in root.turns[2:]]
        assert (b.success, b.agent, b.start_turn + len(b.turns)) == (root.success, root.agent, len(root.turns))


@pytest.mark.slow
def test_grpo_with_perturbed_starts_logs_them(tmp_path):
    """Two steps with perturbed groups, on a cosine schedule over those two steps."""
    cfg = GRPOConfig(model_path=str(TINY), ckpt_path=str(tmp_path / "ckpt"), export_path=str(tmp_path / "export"),
                     train_batch_size=2, n_samples_per_prompt=2, policy_mini_batch_size=2, max_turns=12,
                     max_generate_length=8, eval_before_train=False, eval_interval=10, eval_seeds=2, max_steps=2,
                     greedy_samples_per_prompt=1, perturbed_starts=0.5, temperature=1.5, scheduler="cosine", lr=1e-3)
    grpo_train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "export" / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        assert row["batch/perturbed"] == 1 and 0 <= row["reward/perturbed_mean"] <= 1
        assert row["batch/perturbed_zero_adv_groups"] in (0, 1) and 0 <= row["reward/greedy_mean"] <= 1
    assert [r["policy/lr"] for r in rows] == pytest.approx([1e-3, 5e-4])
    assert Path(tmp_path / "export" / "global_step_2" / "policy" / "adapter_model.safetensors").exists()
