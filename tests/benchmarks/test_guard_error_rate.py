"""benchmarks/guard_error_rate.py's parts: the verdict table and the compiled replay of the ledger's
pairing agree with the real ledger (serving.guard.ledger), the iid reference is the exact one, and
the results file is consistent with itself."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.guard_error_rate import (
    CANARY_STARTED_AT,
    SHORT_HORIZON,
    Scenario,
    check,
    fast_verdict,
    iid_reference,
    ledger_verdict,
    policy,
    prepared,
    traffic,
    verdict_table,
)
from benchmarks.support.guard_replay import replay
from serving.guard.ledger import Outcome, fold, fresh, judge

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "guard_error_rate.json"
NEVER = (np.full(5000, -1, dtype=np.int64), np.full(5000, 10 ** 9, dtype=np.int64))  # a table that never decides


def test_the_verdict_table_is_the_ledgers_judge_on_every_count():
    pol = policy()
    roll, prom = verdict_table(pol, 60)
    doc = fresh("sim", "c" * 12, CANARY_STARTED_AT, "s" * 12)
    for n in range(61):
        for wins in range(n + 1):
            found = judge({**doc, "pairs": {"wins": wins, "losses": n - wins, "ties": 0}}, pol)
            expected = found.action if found else None
            table = "rollback" if wins <= roll[n] else "promote" if wins >= prom[n] else None
            assert table == expected, (wins, n - wins)
    assert roll[6] == -1 and prom[6] == 7  # 6 pairs all one way is not yet 1/alpha


def _ledger_pairs(run: dict, horizon: float, pending_max: int) -> dict:
    doc = fresh("sim", "c" * 12, CANARY_STARTED_AT, "s" * 12)
    for i, (c, s, end, start) in enumerate(zip(run["canary"].tolist(), run["solved"].tolist(), run["end"].tolist(),
                                               run["start"].tolist())):
        doc = fold(doc, "canary" if c else "stable", f"s{i}", Outcome(solved=s, duration_s=end - start), now=end,
                   horizon_s=horizon, pending_max=pending_max)
    return doc["pairs"]


def test_the_replay_pairs_as_the_ledger_ties_and_the_lines_bound_included():
    """Starts on a 100 ms grid make equal starts and equal distances common, so the ledger's order
    among them is exercised; a line of 20 drops sessions; a horizon inside the sessions' lengths
    leaves some out; sessions that started before the canary (at 0) report after it and are in no
    pair."""
    rng = np.random.default_rng(3)
    for share in (0.1, 0.5, 0.9):
        for horizon, line in ((30.0, 1000), (30.0, 20), (12.0, 1000)):
            start = np.sort(np.round(rng.uniform(-30, 600, 300), 1))
            end = start + np.round(rng.uniform(0.5, 25, 300), 1)
            start, end = start[end > 0], end[end > 0]  # reported before the canary started: in no ledger
            order = np.argsort(end, kind="stable")
            run = {"canary": (rng.random(300) < share)[order], "solved": (rng.random(300) < 0.6)[order],
                   "end": end[order], "start": start[order]}
            starts, included, waiting = prepared(run, horizon)
            _, _, wins, losses, ties = replay(run["end"], starts, run["canary"], run["solved"], included, waiting,
                                              0.0, horizon, line, *NEVER)
            expected = _ledger_pairs(run, horizon, line)
            assert {"wins": wins, "losses": losses, "ties": ties} == expected, (share, horizon, line)
            assert wins + losses + ties > 0
            early = included & (starts < 0)
            assert early.any()  # the rule is exercised: without it these would wait for a pair
            *_, w_all, l_all, t_all = replay(run["end"], starts, run["canary"], run["solved"], included, waiting,
                                             -np.inf, horizon, line, *NEVER)
            assert w_all + l_all + t_all >= wins + losses + ties


def test_fast_verdicts_match_the_real_ledger():
    table = verdict_table(policy(), 400)
    out = check(2, 5, table)
    assert out["agreed"] == out["runs"] == 28 and out["decided"] > 0
    for sc in (Scenario(0.44, 0.64, 0.5), Scenario(0.90, 0.44, 0.1, horizon=SHORT_HORIZON)):
        run = traffic(np.random.default_rng(1), replace(sc, budget=120))
        pol = policy(sc.horizon)
        found = fast_verdict(run, table, pol)
        assert found == ledger_verdict(run, pol) and found[0] is not None


def test_the_iid_reference_is_exact_and_within_alpha():
    table = verdict_table(policy(), 40)
    ref = iid_reference(table, 7)  # 7 fair coins: only 7-0 (e 32) or 0-7 decides
    assert ref == {"pairs": 7, "rollback": round(0.5 ** 7, 4), "promote": round(0.5 ** 7, 4)}
    ref = iid_reference(table, 40)
    assert 0 < ref["rollback"] == ref["promote"] <= 0.05


def test_the_results_file_holds_its_verdicts():
    doc = json.loads(RESULTS.read_text())
    a_roll, a_prom = doc["policy"]["alpha_rollback"], doc["policy"]["alpha_promote"]
    assert doc["checked_against_ledger"]["agreed"] == doc["checked_against_ledger"]["runs"] > 0
    assert doc["policy"]["horizon_s"] == doc["traffic"]["horizon_s"]
    for key, summary in doc["summary"].items():
        if not key.startswith("null"):
            continue
        nulls = doc[key]
        assert summary["max_false_promotion"] == max(s["promote"] for s in nulls)
        assert summary["max_false_rollback"] == max(s["rollback"] for s in nulls)
        assert summary["within_alpha"] == all(s["false_rollback_ci95"][1] <= a_roll
                                              and s["false_promotion_ci95"][1] <= a_prom for s in nulls)
    for key in ("null", "null_drift", "null_cold", "null_short", "effects", "effects_drift", "effects_cold",
                "effects_short"):
        for s in doc[key]:
            assert abs(s["rollback"] + s["promote"] + s["undecided"] - 1) < 1e-3
    assert all(s["horizon"] == doc["traffic"]["short_horizon_s"] for s in doc["null_short"] + doc["effects_short"])
    assert all(s["runs"] >= 10000 for s in doc["null"] + doc["null_drift"] + doc["null_cold"])
