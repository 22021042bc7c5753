"""The live guard's ledger (``serving.guard.ledger``: ``fold``, ``_settle``, ``judge``) replayed over a
whole simulated run at once, for benchmarks/guard_error_rate.py: the same pairing, step by step, on
arrays instead of a JSON document, so tens of thousands of runs take minutes rather than days.

The replay keeps the ledger's rules exactly, ties included: a session's start is the report time
less its duration, floored to the millisecond; it waits only if it ran no longer than the horizon;
at each report the sessions that started at least the horizon before it are closed, and the closed
canary sessions, in start order (equal starts: in the order they reported), each take the closed
stable session that started nearest (equal distances: the earliest in that order); the waiting
line keeps its newest ``pending_max`` by start. The verdict after each report is read from a table
of the real ``judge`` over (wins, losses): the benchmark's sessions report no errors or latencies,
so the guard rails never trip. benchmarks/guard_error_rate.py checks the replay against the real
``fold`` and ``judge`` on sampled runs.

Compiled with numba where it is installed (it comes with the serving stack's vLLM); without it the
same function runs as plain Python, correct but slow.
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
def replay(end: np.ndarray, start: np.ndarray, canary: np.ndarray, solved: np.ndarray, included: np.ndarray,
           order: np.ndarray, horizon: float, pending_max: int, roll: np.ndarray, prom: np.ndarray) -> tuple:
    """One run's sessions, in the order they report (``end``: report time; ``start``: the start the
    ledger places, floored; ``included``: ran no longer than the horizon; ``order``: the waiting
    sessions sorted by (start, report index)), folded one by one: the verdict (1 rollback, 2 promote,
    0 none), the index of the report it came at (undecided: the report count) and the pairs
    (wins, losses, ties) by then."""
    n = len(end)
    rank = np.empty(n, np.int64)
    for k in range(len(order)):
        rank[order[k]] = k
    in_line = np.zeros(n, np.bool_)  # in the ledger's waiting line
    closed = np.zeros(n, np.bool_)
    stable_open = np.zeros(n, np.bool_)  # closed, waiting, of the stable arm
    waiting_canaries = np.empty(len(order), np.int64)  # ranks of the closed canary sessions waiting, sorted
    n_wait, n_open, size, ptr, passed, lo = 0, 0, 0, 0, 0, 0
    wins = losses = ties = 0
    for i in range(n):
        cutoff = end[i] - horizon
        if included[i]:
            in_line[i] = True
            size += 1
            lo = min(lo, rank[i])
        while ptr < len(order) and start[order[ptr]] <= cutoff:
            ptr += 1
        # close the sessions the cutoff passed now, and this one if it was passed before it reported
        late = rank[i] if included[i] and rank[i] < passed else -1
        for k in range(passed, ptr + 1):
            if k == ptr:
                if late < 0:
                    break
                k = late
            j = order[k]
            if not in_line[j] or closed[j]:
                continue
            closed[j] = True
            if canary[j]:
                pos = n_wait
                while pos > 0 and waiting_canaries[pos - 1] > k:
                    waiting_canaries[pos] = waiting_canaries[pos - 1]
                    pos -= 1
                waiting_canaries[pos] = k
                n_wait += 1
            else:
                stable_open[j] = True
                n_open += 1
        passed = ptr
        paired = 0
        while n_wait > 0 and n_open > 0:
            q = waiting_canaries[0]
            s = _nearest(q, order, start, stable_open, lo, ptr)
            c_sess, s_sess = order[q], order[s]
            stable_open[s_sess] = False
            in_line[c_sess] = in_line[s_sess] = False
            n_open -= 1
            size -= 2
            for m in range(1, n_wait):
                waiting_canaries[m - 1] = waiting_canaries[m]
            n_wait -= 1
            if solved[c_sess] == solved[s_sess]:
                ties += 1
            elif solved[c_sess]:
                wins += 1
            else:
                losses += 1
            paired += 1
        while size > pending_max:  # the oldest by start leave the line
            while not in_line[order[lo]]:
                lo += 1
            j = order[lo]
            in_line[j] = False
            size -= 1
            if closed[j] and canary[j]:
                for m in range(1, n_wait):
                    waiting_canaries[m - 1] = waiting_canaries[m]
                n_wait -= 1
            elif closed[j]:
                stable_open[j] = False
                n_open -= 1
        while lo < ptr and not in_line[order[lo]]:
            lo += 1
        if paired:
            d = wins + losses
            if d < len(roll) and wins <= roll[d]:
                return 1, i, wins, losses, ties
            if d < len(prom) and wins >= prom[d]:
                return 2, i, wins, losses, ties
    return 0, n, wins, losses, ties


__all__ = ["replay"]
