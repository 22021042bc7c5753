"""The learning-rate schedules SFT and GRPO share."""

from __future__ import annotations

import itertools

import pytest

from training.tiny.trainers.schedules import lr_factor


def test_warmup_then_constant():
    assert [lr_factor(s, "constant", 4, 100) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_factor(10_000, "constant", 0, 100) == 1.0


def test_cosine_falls_to_zero_at_total_and_stays():
    f = [lr_factor(s, "cosine", 10, 110) for s in range(130)]
    assert f[9] == 1.0 and f[10] == 1.0 and f[60] == pytest.approx(0.5) and f[110] == pytest.approx(0.0)
    assert all(a >= b for a, b in itertools.pairwise(f[10:])) and f[129] == pytest.approx(0.0)
