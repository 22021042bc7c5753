"""benchmarks/time_to_servable.py's arithmetic: a sample's split (stale wait, cold load, warm first
token) from the requests around a push, and the per-path percentiles (nearest rank)."""

from __future__ import annotations

from benchmarks.time_to_servable import Answer, pct, sample, summary

OLD, NEW = "maze-tiny:a@111111111111", "maze-tiny:a@222222222222"


def test_a_sample_splits_the_wait_the_cold_load_and_the_warm_first_token():
    t0 = 10.0
    before = [Answer(start=9.0, first_token=9.02, model=OLD), Answer(start=9.9, first_token=9.92, model=OLD),
              Answer(start=10.02, first_token=10.04, model=OLD), Answer(start=10.05, error="503: busy")]
    hit = Answer(start=11.0, first_token=11.07, model=NEW)
    row = sample(t0, hit, [*before, hit], NEW, name="a")
    assert row["version"] == "222222222222" and row["served"]
    assert row["total_s"] == 1.07 and row["stale_s"] == 1.0 and row["request_s"] == 0.07
    assert row["warm_s"] == 0.02 and row["cold_s"] == 0.05
    assert row["old_answers"] == 1 and row["errors"] == ["503: busy"]  # counted from the command's return


def test_an_unserved_version_is_a_failed_sample_left_out_of_the_percentiles():
    rows = [sample(0.0, None, [], NEW, name="a"),
            *({"served": True, "total_s": float(i), "stale_s": 0.0} for i in range(1, 21))]
    assert rows[0] == {"version": "222222222222", "served": False, "name": "a"}
    out = summary(rows)
    assert out["n"] == 21 and out["served"] == 20
    assert out["total_s"] == {"p50": 10.5, "p95": 19.0} and pct([3.0, 1.0, 2.0], 0.95) == 3.0
