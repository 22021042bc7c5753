"""benchmarks/paired_ab.py's statistics: intervals that resample runs, then blocks, and the busy rule."""

from __future__ import annotations

import json
import random
from pathlib import Path

from benchmarks.paired_ab import busy_pairs, median_ci95, pooled, runs_median_ci95

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "paired_ab.json"


def _run(c1: list[float], c8: list[float], busy1=None, busy8=None) -> dict:
    run = {"c1": {"block_ratios": c1, "median_block_ratio": sorted(c1)[len(c1) // 2],
                  "median_block_ratio_ci95": median_ci95(c1)},
           "c8": {"block_ratios": c8, "median_block_ratio": sorted(c8)[len(c8) // 2],
                  "median_block_ratio_ci95": median_ci95(c8)}}
    if busy1 is not None:
        run["c1"]["busy_pairs"], run["c8"]["busy_pairs"] = busy1, busy8
    return run


def test_runs_that_disagree_widen_the_interval_blocks_alone_would_give():
    """Three runs whose blocks sit tight around different levels: pooling the blocks as if independent
    gives an interval narrower than the runs' own spread; resampling runs first does not."""
    rng = random.Random(1)
    runs = [[level + rng.gauss(0, 0.005) for _ in range(16)] for level in (0.93, 1.0, 1.07)]
    flat = median_ci95([x for r in runs for x in r])
    nested = runs_median_ci95(runs)
    assert flat[1] - flat[0] < 0.08  # the pooled blocks claim more than three runs can show
    assert nested[0] <= 0.94 and nested[1] >= 1.06
    assert runs_median_ci95([runs[0]]) is not None and runs_median_ci95([[]]) is None


def test_busy_pairs_follow_the_rule_fixed_before_the_run():
    loads = {"vllm": [0.01, 0.4, 0.0, 0.2], "gateway": [0.02, 0.0, 0.3, 0.25]}
    assert busy_pairs(loads, 0.25) == [1, 2]  # either side's block over the limit; at the limit is quiet


def test_pooled_gives_quiet_figures_beside_all_and_none_without_a_load_record():
    runs = [_run([1.0, 1.02, 1.5, 0.98], [1.1, 0.5, 1.12], [2], [1]),
            _run([1.01, 0.99, 1.03, 1.0], [1.08, 1.1, 1.09], [], [])]
    out = pooled(runs)
    assert out["c1_busy_pairs"] == 1 and out["c8_busy_pairs"] == 1
    assert out["c8_quiet_median_block_ratio"] == 1.1 and out["c8_median_block_ratio"] == 1.095  # the 0.5 left out
    assert len(out["c1_per_run_ci95"]) == 2
    old = pooled([_run([1.0, 1.1], [1.0, 1.2])])  # a file from before the load record
    assert old["c1_busy_pairs"] is None and old["c1_quiet_median_block_ratio"] is None


def test_the_results_file_summary_is_the_scripts_on_its_runs():
    doc = json.loads(RESULTS.read_text())
    assert doc["summary"] == {v: pooled(r["runs"]) for v, r in doc["variants"].items()}
