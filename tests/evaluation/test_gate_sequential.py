"""The offline gate's test (evaluation.gate.sequential): known boundaries, and the exact
false-promotion probability the dynamic programme computes checked against every path of the walk."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from evaluation.gate import Design, boundaries, judge, p_one_sided, promotion_probability
from evaluation.stats import mcnemar_exact

LOOKS = (16, 32, 48, 64)


def test_one_look_at_64_is_the_exact_mcnemar_of_the_issue():
    """One-sided at 0.025 is two-sided McNemar at 0.05: 6 wins with no loss, or 8 with 1, and not less."""
    single = Design(alpha=0.025, looks=(64,))
    assert boundaries(single, [6]) == (6,) and boundaries(single, [9]) == (8,)
    assert boundaries(single, [5]) == (None,)  # 5 of 5 is p = 1/32: no count of wins promotes
    assert mcnemar_exact(6, 0) < 0.05 <= mcnemar_exact(5, 0) and mcnemar_exact(8, 1) < 0.05 <= mcnemar_exact(7, 1)
    assert p_one_sided(6, 0) == 1 / 64 and p_one_sided(8, 1) == 10 / 512 and p_one_sided(0, 0) == 1.0


def test_ninety_against_ninety_five_percent_on_64_mazes_stays_undecided():
    """58 against 61 of 64 with the usual overlap: 4 wins, 1 loss, far from any boundary."""
    design = Design(alpha=0.05, looks=LOOKS, min_discordant=6)
    look = judge(design, [1, 2, 4, 5], wins=4, losses=1)
    assert look.verdict == "undecided" and look.wins_needed is None


def brute_force(design: Design, discordant: tuple[int, ...]) -> Fraction:
    """P(promotion by the last look | the discordant counts), counting every sequence of directions."""
    bounds = boundaries(design, discordant)
    promoted = 0
    for path in itertools.product((0, 1), repeat=discordant[-1]):
        if any(b is not None and sum(path[:n]) >= b for n, b in zip(discordant, bounds)):
            promoted += 1
    return Fraction(promoted, 2 ** discordant[-1])


@pytest.mark.parametrize("method", ["spending", "bonferroni"])
def test_the_exact_false_promotion_probability_matches_every_path_and_stays_within_alpha(method):
    rng = random.Random(7)
    design = Design(alpha=0.2, looks=(4, 8, 12, 16), min_discordant=2, method=method)
    checked = 0
    for _ in range(60):
        steps = [rng.randint(0, 4) for _ in range(4)]
        discordant = tuple(itertools.accumulate(steps))
        exact = promotion_probability(design, discordant)
        assert exact == brute_force(design, discordant), discordant
        assert exact <= Fraction(design.alpha)
        checked += exact > 0
    assert checked > 20  # most patterns could promote: the check is not vacuous


def first_promotion(design: Design, discordant: tuple[int, ...], path: tuple[int, ...]) -> int | None:
    """The look at which ``path`` (directions of the discordant seeds, 1: a win) is promoted, if any."""
    for j, (n, b) in enumerate(zip(discordant, boundaries(design, discordant))):
        if b is not None and sum(path[:n]) >= b:
            return j
    return None


def test_spending_promotes_every_path_bonferroni_does_no_later_and_uses_more_of_alpha():
    rng = random.Random(3)
    spending = Design(0.1, (4, 8, 12, 16))
    bonferroni = Design(0.1, (4, 8, 12, 16), method="bonferroni")
    more = 0
    for _ in range(40):
        discordant = tuple(itertools.accumulate(rng.randint(0, 4) for _ in range(4)))
        for path in itertools.product((0, 1), repeat=discordant[-1]):
            by_b = first_promotion(bonferroni, discordant, path)
            by_s = first_promotion(spending, discordant, path)
            assert by_b is None or (by_s is not None and by_s <= by_b), (discordant, path)
        more += promotion_probability(spending, discordant) > promotion_probability(bonferroni, discordant)
    assert more > 10


def test_boundaries_need_min_discordant_and_verdicts_follow_them():
    design = Design(alpha=0.05, looks=LOOKS, min_discordant=8)
    assert boundaries(design, [7, 7]) == (None, None)  # 7 of 7 would pass on alpha alone
    assert boundaries(Design(alpha=0.05, looks=LOOKS), [7]) == (7,)
    bound = boundaries(design, [10])[0]
    assert bound is not None
    assert judge(design, [10], wins=bound, losses=10 - bound).verdict == "better"
    assert judge(design, [10], wins=10 - bound, losses=bound).verdict == "worse"
    assert judge(design, [10], wins=bound - 1, losses=11 - bound).verdict == "continue"
    assert judge(design, [1, 2, 3, 4], wins=2, losses=2).verdict == "undecided"


@pytest.mark.parametrize("kwargs", [{"alpha": 0.5}, {"alpha": 0.0}, {"looks": ()}, {"looks": (16, 16)},
                                    {"looks": (0, 16)}, {"min_discordant": 0}])
def test_a_bad_design_is_refused(kwargs):
    with pytest.raises(ValueError):
        Design(**{"alpha": 0.05, "looks": LOOKS, **kwargs})


@pytest.mark.parametrize("discordant", [[], [3, 2], [17], [1, 2, 3, 4, 5]])
def test_impossible_discordant_counts_are_refused(discordant):
    with pytest.raises(ValueError):
        boundaries(Design(alpha=0.05, looks=LOOKS), discordant)
