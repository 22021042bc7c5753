"""GRPO loss reductions: which weight each reply token gets (SkyRL's ``loss_reduction`` names)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.maze import generate_from_seed
from training.tiny.fastpath import Episode, Turn
from training.tiny.trainers import GRPOConfig
from training.tiny.trainers.grpo import HardMazes
from training.tiny.trainers.grpo_loss import group_advantages, loss_items


def _episode(turns: int, tokens_per_turn: int = 2) -> Episode:
    e = Episode(layout=generate_from_seed(7, 7, 0), agent=(1, 1), conversation=[])
    e.turns = [Turn(prompt=None, frames=[], tokens=[1] * tokens_per_turn, logprobs=[0.0] * tokens_per_turn)
               for _ in range(turns)]
    return e


def _cfg(mode: str) -> GRPOConfig:
    return GRPOConfig(model_path="m", ckpt_path="c", export_path="e", loss_reduction=mode,
                      max_turns=15, max_generate_length=8)


def _signed_mass(items) -> float:
    """Total advantage x weight over all tokens: the push on a token that every reply shares."""
    return sum(a * w * len(t.tokens) for t, a, w in items)


def test_group_advantages_are_zero_mean_per_group():
    adv = group_advantages(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), 4)
    assert adv[:4].sum() == pytest.approx(0.0, abs=1e-6) and adv[0] > 0 > adv[1]
    assert np.all(adv[4:] == 0)  # a group that all solved teaches nothing


def test_sequence_mean_weighs_each_episode_once():
    # One short solved episode against one long failed one, as in the maze task.
    eps = [_episode(5), _episode(15)]
    adv = group_advantages(np.array([1.0, 0.0]), 2)
    items = loss_items(eps, adv, _cfg("sequence_mean"))
    assert sum(w * len(t.tokens) for t, _, w in items) == pytest.approx(1.0)
    assert _signed_mass(items) == pytest.approx(0.0, abs=1e-6)  # shared tokens get no net push


def test_token_mean_lets_long_failures_dominate():
    eps = [_episode(5), _episode(15)]
    adv = group_advantages(np.array([1.0, 0.0]), 2)
    items = loss_items(eps, adv, _cfg("token_mean"))
    assert sum(w * len(t.tokens) for t, _, w in items) == pytest.approx(1.0)
    assert _signed_mass(items) < -0.4  # the collapse mechanism sequence_mean removes


def test_zero_advantage_episodes_and_empty_turns_are_dropped():
    eps = [_episode(3), _episode(3), _episode(4, tokens_per_turn=0)]
    items = loss_items(eps, np.array([0.0, 1.0, -1.0]), _cfg("seq_mean_token_sum_norm"))
    assert len(items) == 3 and all(a == 1.0 for _, a, _ in items)
    assert items[0][2] == pytest.approx(1.0 / (1 * 15 * 8))


def test_unknown_reduction_is_rejected():
    with pytest.raises(ValueError, match="loss_reduction"):
        _cfg("mean")


def test_hard_mazes_replays_failed_solvable_mazes_at_most_twice():
    easy, hard, unsolvable = (generate_from_seed(7, 7, s) for s in (0, 26, 20))  # 8, 12 and 16 moves
    buf = HardMazes(size=8, max_turns=15)
    buf.offer([easy, hard, unsolvable], [0, 0, 0], np.array([1.0, 0.25, 0.0]))
    assert [(lay is hard, k) for lay, k in buf.take(4)] == [(True, 1)]  # only the failed, solvable one
    buf.offer([hard], [1], np.array([0.5]))
    (lay, k), = buf.take(1)
    assert lay is hard and k == 2
    buf.offer([hard], [2], np.array([0.0]))  # replayed twice already: not again
    assert len(buf) == 0 and buf.take(1) == []
