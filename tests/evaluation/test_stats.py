"""Pure statistics, checked against hand-computed and textbook values."""

from __future__ import annotations

import math

import pytest

from evaluation.stats import mcnemar_exact, pass_at_k, wilson_interval


def test_wilson_known_values():
    low, high = wilson_interval(62, 64)
    assert low == pytest.approx(0.8932, abs=1e-3) and high == pytest.approx(0.9914, abs=1e-3)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 0.0)
    low, high = wilson_interval(28, 64)  # 43.75%, the reference SFT start point
    assert low < 0.4375 < high and high - low == pytest.approx(0.237, abs=2e-3)


def test_pass_at_k():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_mcnemar_exact():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(1, 10) == pytest.approx(2 * 12 / 2048)
    assert mcnemar_exact(2, 30) < 1e-6
