"""benchmarks/gate_error_rate.py's parts: the exact interval, the correlation read from the results
files, the simulated gate judged as the gate judges, and its results file consistent with itself."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.gate_error_rate import clopper_pearson, default_design, measured_rho, play, run_gate, scenario
from evaluation.gate import judge

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gate_error_rate.json"


def test_clopper_pearson_matches_known_intervals():
    low, high = clopper_pearson(5, 10)
    assert low == pytest.approx(0.18709, abs=1e-4) and high == pytest.approx(0.81291, abs=1e-4)
    assert clopper_pearson(0, 20)[0] == 0.0 and clopper_pearson(0, 20)[1] == pytest.approx(0.16843, abs=1e-4)
    assert clopper_pearson(20, 20)[1] == 1.0


def test_the_correlation_is_read_from_the_two_models_outcomes():
    corr = measured_rho()
    assert corr["seeds"] == 64 and corr["solve_rate"] == [26 / 64, 58 / 64]
    assert 0 < corr["rho"] < 1


def test_a_simulated_gate_stops_where_the_gate_would():
    design, rng = default_design(), random.Random(4)
    for _ in range(50):
        pairs = play(rng, 64, 0.8, 0.6, 0.3)
        verdict, played, full = run_gate(design, pairs)
        wins = sum(c and not s for c, s in pairs[:played])
        losses = sum(s and not c for c, s in pairs[:played])
        looks = design.looks.index(played) + 1
        assert judge(design, full[:looks], wins, losses).verdict == verdict


def test_under_the_null_the_exact_promotion_probability_stays_within_alpha():
    out = scenario(default_design(), 0.6, 0.6, 0.2, gates=300, seed=9)
    assert out["exact_promotion_given_discordant"] <= 0.05
    assert out["false_promotion_ci95"][0] <= out["false_promotion"] <= out["false_promotion_ci95"][1]


def test_the_results_file_holds_its_verdict():
    doc = json.loads(RESULTS.read_text())
    nulls = doc["null"]
    assert doc["summary"]["within_alpha"] == all(s["false_promotion_ci95"][1] <= doc["policy"]["alpha"] for s in nulls)
    assert doc["summary"]["max_false_promotion"] == max(s["false_promotion"] for s in nulls)
    assert all(abs(s["better"] + s["worse"] + s["undecided"] - 1) < 1e-3 for s in nulls + doc["alternatives"])
