"""The live guard's e-values (serving.guard.evidence): the closed form equals the mixture integral,
the two sides mirror each other, and the false-rollback rate of reading the test after every pair
is at most alpha, computed exactly over every path of up to 400 discordant pairs of a fair coin."""

from __future__ import annotations

import math

import pytest

from serving.guard import e_better, e_worse
from serving.guard.evidence import log_e_better, reaches


def _integral(w: int, l: int, steps: int = 20_000) -> float:
    """2^(n+1) * integral over (1/2, 1) of theta^w (1 - theta)^l, by Simpson's rule."""
    h = 0.5 / steps
    f = [(0.5 + i * h) ** w * (0.5 - i * h) ** l for i in range(steps + 1)]
    s = f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2])
    return 2 ** (w + l + 1) * s * h / 3


@pytest.mark.parametrize("w,l", [(0, 0), (1, 0), (3, 1), (7, 0), (20, 10), (5, 5), (2, 9)])
def test_closed_form_is_the_mixture_integral(w, l):
    assert e_better(w, l) == pytest.approx(_integral(w, l), rel=1e-6)
    assert e_worse(w, l) == pytest.approx(e_better(l, w))


def test_evidence_grows_with_wins_and_thousands_of_pairs_stay_finite():
    assert e_better(0, 0) == 1.0
    assert e_better(7, 0) > e_better(6, 0) > e_better(6, 1)
    assert e_worse(0, 7) == pytest.approx(31.875)  # 7 straight losses: past 1 / 0.05
    assert math.isfinite(log_e_better(3000, 2500)) and log_e_better(3000, 2500) > math.log(1e6)
    assert reaches(20.0, 0.05) and not reaches(19.99, 0.05)
    with pytest.raises(ValueError, match="pair counts"):
        e_better(-1, 0)


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_reading_after_every_pair_keeps_false_rollbacks_under_alpha(alpha):
    """Under equal solve rates each discordant pair is a fair coin. Propagate the probability of
    every (wins, losses) path that has not yet crossed, for 400 pairs; what crossed is the exact
    chance of a false rollback at any look."""
    alive = {(0, 0): 1.0}
    crossed = 0.0
    for _ in range(400):
        nxt: dict[tuple[int, int], float] = {}
        for (w, l), p in alive.items():
            for step in ((w + 1, l), (w, l + 1)):
                if reaches(e_worse(*step), alpha):
                    crossed += p / 2
                else:
                    nxt[step] = nxt.get(step, 0.0) + p / 2
        alive = nxt
    assert 0 < crossed <= alpha
