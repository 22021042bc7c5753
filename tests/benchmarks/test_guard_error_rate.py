"""benchmarks/guard_error_rate.py's parts: the verdict table and the bulk pairing agree with the real
ledger (serving.guard.ledger), the iid reference is the exact one, and the results file is
consistent with itself."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.guard_error_rate import (
    Scenario,
    check,
    fast_verdict,
    iid_reference,
    ledger_verdict,
    pairs_of,
    policy,
    traffic,
    verdict_table,
)
from serving.guard.ledger import Outcome, fold, fresh, judge

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "guard_error_rate.json"


def test_the_verdict_table_is_the_ledgers_judge_on_every_count():
    pol = policy()
    roll, prom = verdict_table(pol, 60)
    doc = fresh("sim", "c" * 12, "start", "s" * 12)
    for n in range(61):
        for wins in range(n + 1):
            found = judge({**doc, "pairs": {"wins": wins, "losses": n - wins, "ties": 0}}, pol)
            expected = found.action if found else None
            table = "rollback" if wins <= roll[n] else "promote" if wins >= prom[n] else None
            assert table == expected, (wins, n - wins)
    assert roll[6] == -1 and prom[6] == 7  # 6 pairs all one way is not yet 1/alpha


def test_the_bulk_pairing_is_the_ledgers_pairing():
    rng = np.random.default_rng(3)
    for share in (0.1, 0.5, 0.9):
        canary, solved = rng.random(400) < share, rng.random(400) < 0.6
        doc = fresh("sim", "c" * 12, "start", "s" * 12)
        for i, (c, s) in enumerate(zip(canary.tolist(), solved.tolist())):
            doc = fold(doc, "canary" if c else "stable", f"s{i}", Outcome(solved=s), 1000)
        waiting, arriving, _ = pairs_of(canary)
        can = np.where(canary[arriving], arriving, waiting)
        sta = np.where(canary[arriving], waiting, arriving)
        wins = int((solved[can] & ~solved[sta]).sum())
        losses = int((~solved[can] & solved[sta]).sum())
        assert doc["pairs"] == {"wins": wins, "losses": losses, "ties": len(arriving) - wins - losses}


def test_fast_verdicts_match_the_real_ledger_and_the_waiting_lines_bound_is_caught():
    pol, table = policy(), verdict_table(policy(), 400)
    out = check(2, 5, table, pol)
    assert out["agreed"] == out["runs"] == 20 and out["met_the_bound"] > 0
    run = traffic(np.random.default_rng(1), replace(Scenario(0.44, 0.64, 0.5), budget=120))
    assert fast_verdict(run, table, pol.pending_max) == ledger_verdict(run, pol)


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
    for key, summary in doc["summary"].items():
        if not key.startswith("null"):
            continue
        nulls = doc[key]
        assert summary["max_false_promotion"] == max(s["promote"] for s in nulls)
        assert summary["max_false_rollback"] == max(s["rollback"] for s in nulls)
        assert summary["within_alpha"] == all(s["false_rollback_ci95"][1] <= a_roll
                                              and s["false_promotion_ci95"][1] <= a_prom for s in nulls)
    for key in ("null", "null_drift", "null_cold", "effects", "effects_drift", "effects_cold"):
        for s in doc[key]:
            assert abs(s["rollback"] + s["promote"] + s["undecided"] - 1) < 1e-3
    assert all(s["runs"] >= 10000 for s in doc["null"] + doc["null_drift"])
