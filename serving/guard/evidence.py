"""The live guard's test: e-values for "the canary solves more (or fewer) mazes than the stable
version", from pairs of one canary and one stable session outcome.

In a pair where exactly one arm solved its maze (a discordant pair), the canary is the one with
probability ``theta = pc (1 - ps) / (pc (1 - ps) + ps (1 - pc))``, which is 1/2 exactly when the two
solve rates are equal, above it when the canary is better and below when it is worse. Each side is
tested by a likelihood ratio mixed over a uniform prior on its half of ``theta``:

    E_better(w, l) = 2^(n+1) * integral over (1/2, 1) of theta^w (1 - theta)^l d theta,   n = w + l,

(``w`` pairs the canary won, ``l`` it lost) and ``E_worse(w, l) = E_better(l, w)``. Each is a
nonnegative supermartingale under its null (the canary no better, resp. no worse), so by Ville's
inequality the chance that it ever reaches ``1 / alpha`` is at most ``alpha``, however often it is
read: the guard may look after every outcome. The integral has a closed form through the binomial
distribution: ``B(w+1, l+1) * P(Binomial(n+1, 1/2) <= w)``; everything is summed in logs, so a
canary with thousands of pairs costs microseconds.
"""

from __future__ import annotations

import math


def _log_sum(logs: list[float]) -> float:
    top = max(logs)
    return top + math.log(sum(math.exp(v - top) for v in logs))


def _log_binom_cdf_half(k: int, n: int) -> float:
    """log P(Binomial(n, 1/2) <= k)."""
    if k >= n:
        return 0.0
    lf = math.lgamma
    return _log_sum([lf(n + 1) - lf(i + 1) - lf(n - i + 1) for i in range(k + 1)]) - n * math.log(2)


def log_e_better(wins: int, losses: int) -> float:
    """log of the e-value against "the canary is no better" (see the module)."""
    if wins < 0 or losses < 0:
        raise ValueError(f"pair counts must be >= 0, got wins={wins} losses={losses}")
    n = wins + losses
    log_beta = math.lgamma(wins + 1) + math.lgamma(losses + 1) - math.lgamma(n + 2)
    return (n + 1) * math.log(2) + log_beta + _log_binom_cdf_half(wins, n + 1)


def e_better(wins: int, losses: int) -> float:
    """The e-value against "the canary is no better": 1 with no discordant pair, growing with wins."""
    return math.exp(log_e_better(wins, losses))


def e_worse(wins: int, losses: int) -> float:
    """The e-value against "the canary is no worse" (the same test with the arms swapped)."""
    return math.exp(log_e_better(losses, wins))


def reaches(e_value: float, alpha: float) -> bool:
    """Whether an e-value is evidence at level ``alpha`` (Ville: ``e >= 1 / alpha``)."""
    return e_value >= 1.0 / alpha


__all__ = ["e_better", "e_worse", "log_e_better", "reaches"]
