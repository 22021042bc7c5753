"""GRPO groups rooted at states of greedy episodes (the GRPO trainer's ``state_groups``).

An episode-level group gives one advantage to every turn of an episode, and the turns that
decide a maze (a fork taken the wrong way, a detour not taken) are few among them; on mazes
the policy nearly always fails or nearly always solves, the whole group has one reward and
teaches nothing. A state group asks the question greedy evaluation cares about at one turn:
from the state a greedy episode reached, ``k`` replies are sampled (the policy's own
distribution, at the training temperature), each is followed by greedy play to the turn limit,
and the group-relative advantage of the 1/0 outcome goes to that one sampled reply only.
The reward is still the environment's: no solver, no shaping. This is tree-shaped rollout
with group-relative advantages (as in tree-search variants of GRPO); it is not a SkyRL setting.

On the shipped adapter the branches from failed greedy episodes seldom solve and most groups are
all zeros: after one different reply, greedy play walks back into the same mistake. It stays as a
switch and a probe.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from training.tiny.fastpath import Episode


def pick_states(episodes: list[Episode], n: int, rng: np.random.Generator) -> list[tuple[Episode, int]]:
    """Up to ``n`` (episode, turn) roots from the greedy episodes, failed episodes first.

    Within each tier the roots are drawn at random from all turns, so a failed episode gives the
    fork where it went wrong as often as any other turn; solved episodes fill the rest (they keep
    the greedy choices that work from drifting).
    """
    failed = [(e, t) for e in episodes if e.greedy and not e.success for t in range(len(e.turns))]
    solved = [(e, t) for e in episodes if e.greedy and e.success for t in range(len(e.turns))]
    out: list[tuple[Episode, int]] = []
    for tier in (failed, solved):
        take = min(n - len(out), len(tier))
        if take > 0:
            out.extend(tier[i] for i in sorted(rng.choice(len(tier), take, replace=False)))
    return out


def branches(roots: list[tuple[Episode, int]], k: int) -> list[Episode]:
    """``k`` fresh episodes per root, each standing at the root's state with its conversation so far."""
    out = []
    for e, t in roots:
        at = e.turns[t].agent
        if at is None:
            raise ValueError("the root episode was played without agent positions per turn")
        for _ in range(k):
            # Each turn adds the reply and the environment's answer, so turn t saw 1 + 2t messages.
            out.append(Episode(layout=e.layout, agent=at, conversation=list(e.conversation[: 1 + 2 * t]),
                               start_turn=t, branch=True))
    return out


def root_turns(played: list[Episode]) -> list[Episode]:
    """The branches cut to their first (sampled) turn: the only turn their advantage is for."""
    return [replace(e, turns=e.turns[:1]) for e in played]
