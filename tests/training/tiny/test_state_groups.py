"""State groups: roots picked from greedy episodes, branches that stand exactly where the root did."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.maze import generate_from_seed
from training.tiny.data import branches, pick_states, root_turns
from training.tiny.fastpath import Episode, RolloutSettings, Turn, play, play_on
from training.tiny.trainers import GRPOConfig
from training.tiny.trainers.grpo import train as grpo_train
from training.tiny.trainers.grpo_loss import minibatches

TINY = Path(__file__).resolve().parents[3] / "models" / "maze-tiny"


def _episode(turns: int, success: bool, greedy: bool = True) -> Episode:
    e = Episode(layout=generate_from_seed(7, 7, 0), agent=(1, 1), conversation=[{"role": "user", "content": "0"}],
                greedy=greedy, success=success, done=True)
    for t in range(turns):
        e.turns.append(Turn(prompt=None, frames=[], tokens=[1], logprobs=[0.0], agent=(1, t)))
        e.conversation += [{"role": "assistant", "content": f"a{t}"}, {"role": "user", "content": f"{t + 1}"}]
    return e


def test_pick_states_takes_failed_greedy_episodes_first():
    failed, solved, sampled = _episode(3, False), _episode(4, True), _episode(5, False, greedy=False)
    rng = np.random.default_rng(0)
    roots = pick_states([sampled, solved, failed], 5, rng)
    assert [e for e, _ in roots[:3]] == [failed] * 3 and all(e is solved for e, _ in roots[3:])
    assert len(roots) == 5 and len({(id(e), t) for e, t in roots}) == 5  # no root twice
    assert len(pick_states([failed, solved], 50, rng)) == 7  # every turn of the greedy episodes, no more
    assert pick_states([sampled], 4, rng) == []


def test_branches_stand_at_the_roots_state():
    root = _episode(4, False)
    b = branches([(root, 2)], 3)
    assert len(b) == 3 and all(x.branch and x.start_turn == 2 and x.agent == (1, 2) and not x.turns for x in b)
    assert [m["content"] for m in b[0].conversation] == ["0", "a0", "1", "a1", "2"]  # what turn 2 was shown
    b[0].conversation.append({"role": "assistant", "content": "x"})
    assert len(b[1].conversation) == 5 and len(root.conversation) == 9  # copies, not shared lists
    b[0].turns = root.turns[2:]
    assert root_turns(b[:1])[0].turns == root.turns[2:3] and len(b[0].turns) == 2


def test_minibatches_keep_groups_and_share_out_state_items():
    parts = minibatches(16, 16 + 10, 8)
    assert [list(p[:8]) for p in parts] == [list(range(8)), list(range(8, 16))]
    assert sorted(np.concatenate(parts)) == list(range(26)) and [len(p) for p in parts] == [13, 13]
    assert [list(p) for p in minibatches(5, 5, 8)] == [list(range(5))]


@pytest.mark.slow
def test_a_greedy_branch_replays_the_root_episode():
    """All greedy, a branch from turn t must make the root's own later replies and end the same way:
    the prefix, position and turn budget it is given are exactly the root's."""
    from training.tiny.diagnostics import FastPolicy

    pol = FastPolicy.load(TINY)  # the base with a zero LoRA, as GRPO starts
    fast, bank, codec, catalog = pol.fast, pol.bank, pol.codec, pol.bank.catalog
    settings = RolloutSettings(max_turns=6, temperature=0.0, max_new_tokens=8)
    roots = play(fast, bank, codec, catalog, [generate_from_seed(7, 7, s) for s in (0, 1)], settings)
    pairs = [(e, t) for e in roots for t in (1, len(e.turns) - 1)]
    played = play_on(fast, bank, codec, catalog, branches(pairs, 1), settings)
    for (root, t), b in zip(pairs, played, strict=True):
        assert [x.tokens for x in b.turns] == [x.tokens for x in root.turns[t:]]
        assert (b.success, b.agent) == (root.success, root.agent)


@pytest.mark.slow
def test_grpo_with_state_groups_logs_them(tmp_path):
    # 9 turns are the 8 moves of a direct maze and the stop: a sampled detour (T=2) cannot be made up.
    cfg = GRPOConfig(model_path=str(TINY), ckpt_path=str(tmp_path / "ckpt"), export_path=str(tmp_path / "export"),
                     train_batch_size=2, n_samples_per_prompt=2, policy_mini_batch_size=1, max_turns=9,
                     max_generate_length=8, eval_before_train=False, eval_interval=10, eval_seeds=2, max_steps=1,
                     greedy_samples_per_prompt=1, state_groups=6, state_group_size=4, temperature=2.0)
    grpo_train(cfg)
    (row,) = [json.loads(x) for x in (tmp_path / "export" / "metrics.jsonl").read_text().splitlines()]
    assert row["state_groups/roots"] == 6 and row["state_groups/zero_adv_groups"] < 6  # some state groups teach
    assert 0 < row["state_groups/reward_mean"] < 1 and row["policy/updates"] == 2


def test_state_groups_need_a_greedy_member():
    with pytest.raises(ValueError, match="state_groups"):
        GRPOConfig(model_path="m", ckpt_path="c", export_path="e", state_groups=4)
