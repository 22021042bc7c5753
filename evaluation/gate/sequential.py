"""The offline gate's test: exact, one-sided, group-sequential, on the discordant seeds of two
versions played on the same mazes. Pure (integers and fractions; no I/O).

On the seeds where exactly one version solved the maze (discordant), the candidate's share of
wins is 1/2 under the null "the candidate is no better", whatever the per-seed solve
probabilities and however the two versions' outcomes correlate on a seed: on a seed where both
versions solve with the same probability, "only the candidate" and "only the current" are equally
likely. Given the discordant seeds, the candidate's wins are a fair coin's heads, so the wins at
each look are a binomial random walk and every probability below is exact.

Looks are fixed seed counts (16/32/48/64 by default). The false-promotion rate is held to
``alpha`` by alpha spending (Lan and DeMets) with the exact distribution: at look ``j``, with
``t = seeds_j / seeds_last``, the rejection boundary is the fewest wins whose probability of a
promotion by this look, summed exactly over the walk's paths not stopped before (dynamic
programming over the wins count), stays within ``alpha * t``. The spending schedule is fixed by
seed counts before any outcome is seen, and each boundary depends only on the discordant counts
seen so far, which are independent of the wins' directions under the null; so, given the whole
discordance pattern, the chance of a promotion at any look is at most ``alpha``. Spending in
proportion to seeds lets a clear difference stop the gate early; benchmarks/gate_error_rate.py
measures the false-promotion rate and the power, beside one exact test at the last look and
Bonferroni.

Bonferroni (``alpha / looks`` at each look, each look's exact binomial test on its own; bounded by
the union bound) is here for comparison: spending promotes every path Bonferroni does, no later,
since it counts the overlap between looks that the union bound ignores and carries alpha a discrete
test could not use to the next look. A "worse" verdict is the mirror boundary on the losses; it only
stops the gate early (it never promotes), so it cannot raise the false-promotion rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from evaluation.stats import p_one_sided

Method = Literal["spending", "bonferroni"]
Verdict = Literal["better", "worse", "undecided", "continue"]


@dataclass(frozen=True)
class Design:
    """The fixed part of a gate: overall one-sided ``alpha``, the seed count at each look, the
    fewest discordant seeds a verdict needs and the method (``bonferroni`` for comparison)."""

    alpha: float
    looks: tuple[int, ...]
    min_discordant: int = 1
    method: Method = "spending"

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if not self.looks or any(b <= a for a, b in zip(self.looks, self.looks[1:])) or self.looks[0] < 1:
            raise ValueError(f"looks must be increasing seed counts >= 1, got {list(self.looks)}")
        if self.min_discordant < 1:
            raise ValueError(f"min_discordant must be >= 1, got {self.min_discordant}")

    def spend(self, j: int) -> Fraction:
        """Cumulative alpha spendable by look ``j`` (0-based): ``alpha * seeds_j / seeds_last``, exact
        (``alpha`` as the float it is)."""
        return Fraction(self.alpha) * Fraction(self.looks[j], self.looks[-1])

    @property
    def label(self) -> str:
        """The test in words, for the records."""
        looks = "/".join(map(str, self.looks))
        rule = ("alpha spent in proportion to seeds, exact by dynamic programming"
                if self.method == "spending" else f"Bonferroni alpha/{len(self.looks)} per look")
        return (f"exact one-sided binomial on discordant seeds, group-sequential at {looks} seeds, {rule}, "
                f"at least {self.min_discordant} discordant")


def _tail_counts(counts: Sequence[int]) -> list[int]:
    """``tails[c]`` = sum of ``counts[c:]`` (``tails[len] = 0``)."""
    tails = [0] * (len(counts) + 1)
    for c in range(len(counts) - 1, -1, -1):
        tails[c] = tails[c + 1] + counts[c]
    return tails


def _lowest_bound(tails: list[int], already: int, total: int, budget: Fraction) -> int | None:
    """The fewest wins ``c`` whose paths (``tails[c]``, none stopped before), with the ``already``
    promoted, are at most ``budget`` of ``total``; None when no path at or past it is left."""
    num, den = budget.numerator, budget.denominator
    for c in range(len(tails) - 1):
        if tails[c] == 0:
            return None
        if (already + tails[c]) * den <= num * total:
            return c
    return None


def _convolve(counts: list[int], flips: int) -> list[int]:
    """Path counts after ``flips`` more fair flips (each path splits into C(flips, i) with i more wins)."""
    if flips == 0:
        return list(counts)
    out = [0] * (len(counts) + flips)
    row = [math.comb(flips, i) for i in range(flips + 1)]
    for w, n in enumerate(counts):
        if n:
            for i, k in enumerate(row):
                out[w + i] += n * k
    return out


@lru_cache(maxsize=200_000)
def _walk(design: Design, discordant: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int | None, ...], int]:
    """After the looks whose discordant counts are ``discordant``: the count of paths per wins not
    stopped by a promotion (of ``2 ** discordant[-1]``), each look's boundary (None: no promotion
    possible there) and the count of paths promoted so far (in units of ``2 ** discordant[-1]``)."""
    j, n = len(discordant) - 1, discordant[-1]
    if j == 0:
        counts, bounds, promoted = [math.comb(n, w) for w in range(n + 1)], (), 0
    else:
        before, bounds, promoted = _walk(design, discordant[:-1])
        flips = n - discordant[-2]
        counts, promoted = _convolve(list(before), flips), promoted * 2 ** flips
    total = 2 ** n
    bound = None
    if n >= design.min_discordant:
        tails = _tail_counts(counts)
        if design.method == "bonferroni":  # each look alone: its binomial tail within alpha / looks
            marginal = _tail_counts([math.comb(n, w) for w in range(n + 1)])
            bound = _lowest_bound(marginal, 0, total, Fraction(design.alpha) / len(design.looks))
        else:
            bound = _lowest_bound(tails, promoted, total, design.spend(j))
        if bound is not None:
            promoted += tails[bound]
            counts = counts[:bound] + [0] * (len(counts) - bound)
    return tuple(counts), (*bounds, bound), promoted


def boundaries(design: Design, discordant: Sequence[int]) -> tuple[int | None, ...]:
    """Wins needed for a promotion at each look so far, given the discordant counts seen at them
    (None where no count of wins promotes: too few discordant seeds, or no alpha left to spend)."""
    return _walk(design, _checked(design, discordant))[1]


def promotion_probability(design: Design, discordant: Sequence[int]) -> Fraction:
    """The exact probability, under the null, that the gate promotes by the last look given, given
    the discordant counts at every look: at most ``design.alpha`` (what the unit tests check against
    enumerating every path)."""
    discordant = _checked(design, discordant)
    return Fraction(_walk(design, discordant)[2], 2 ** discordant[-1])


def _checked(design: Design, discordant: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(n) for n in discordant)
    if not out or len(out) > len(design.looks):
        raise ValueError(f"need 1 to {len(design.looks)} looks' discordant counts, got {len(out)}")
    if any(n < 0 for n in out) or any(b < a for a, b in zip(out, out[1:])):
        raise ValueError(f"discordant counts never fall, got {list(out)}")
    if any(n > s for n, s in zip(out, design.looks)):
        raise ValueError(f"more discordant seeds than seeds played: {list(out)} at looks {list(design.looks)}")
    return out


@dataclass(frozen=True)
class Look:
    """One look's verdict and its evidence."""

    index: int
    seeds: int
    wins: int
    losses: int
    wins_needed: int | None
    p_value: float
    verdict: Verdict


def judge(design: Design, discordant: Sequence[int], wins: int, losses: int) -> Look:
    """The verdict at the look ``len(discordant) - 1`` with ``wins`` and ``losses`` there
    (``wins + losses == discordant[-1]``): ``better`` (promote) when the wins reach the boundary,
    ``worse`` when the losses do, ``undecided`` at the last look otherwise, else ``continue``."""
    if wins + losses != (discordant[-1] if discordant else -1):
        raise ValueError(f"wins + losses ({wins} + {losses}) must be the look's discordant count")
    j = len(discordant) - 1
    bound = boundaries(design, discordant)[j]
    verdict: Verdict = "continue"
    if bound is not None and wins >= bound:
        verdict = "better"
    elif bound is not None and losses >= bound:
        verdict = "worse"
    elif j == len(design.looks) - 1:
        verdict = "undecided"
    return Look(index=j, seeds=design.looks[j], wins=wins, losses=losses, wins_needed=bound,
                p_value=p_one_sided(wins, losses), verdict=verdict)


__all__ = ["Design", "Look", "Method", "Verdict", "boundaries", "judge", "p_one_sided", "promotion_probability"]
