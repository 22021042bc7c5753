"""Served curves in the results store: recording a scored step, reading the curves back (best step,
gap), and showing them in `maze-eval leaderboard --curves` and `maze-eval report --curve`.

The runs are real evaluations against the scripted BFS server (its adapter presets solve all,
some or none of the mazes), recorded as steps of a training run the way `maze-train watch` does.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from evaluation import EvalConfig, evaluate
from evaluation.cli import main
from evaluation.served import (
    SERVED_METRIC,
    TRAINER_METRIC,
    record_served_step,
    served_curves,
    served_run_name,
)
from evaluation.store import Store

SOURCE = "maze-local-0123abcd"
# step -> (scripted adapter preset, the trainer's own pass@1 at that step)
STEPS = {10: ("broken", 0.5), 20: ("noisy", 0.75), 30: ("perfect", 0.875), 40: ("perfect", None)}


def served_store(url: str, endpoint: str) -> Store:
    """A store holding a served curve of four steps, each a real run of 8 seeds."""
    store = Store(url)
    for step, (preset, trainer) in STEPS.items():
        r = evaluate(EvalConfig(endpoint=endpoint, adapter=preset, seeds="0-7", db=url,
                                run_name=served_run_name(SOURCE, step)))
        assert r.status == "complete"
        assert record_served_step(store, SOURCE, step, base=r.manifest.base, adapter="agent", version=f"{step:012x}",
                                  env_id=r.manifest.env_id, run_id=r.run_id, served=r.summary.solve_rate,
                                  trainer_pass_at_1=trainer)
    return store


def test_a_served_curve_pairs_each_step_with_the_trainer_and_picks_the_first_best(db_url, scripted):
    store = served_store(db_url, scripted.url)
    (curve,) = served_curves(store)
    assert [p.step for p in curve.points] == [10, 20, 30, 40]
    assert (curve.source, curve.base, curve.adapter) == (SOURCE, "bfs", "agent")
    p10, p20, p30, p40 = curve.points
    assert p10.served == 0.0 and p10.gap == -0.5 and p10.n == 8
    assert 0 < p20.served < 1 and p20.ci_low < p20.served < p20.ci_high
    assert p30.served == 1.0 and abs(p30.gap - 0.125) < 1e-9
    assert p40.trainer_pass_at_1 is None and p40.gap is None
    assert curve.best_step == 30  # 30 and 40 both solve everything: the first to get there
    assert curve.promote_command == f"maze-serve adapters promote agent@{30:012x}"
    assert store.runs_named(served_run_name(SOURCE, 30))[0]["run_id"] == p30.run_id


def test_recording_a_step_twice_changes_nothing(db_url, scripted):
    store = served_store(db_url, scripted.url)
    before = (store.curve(SOURCE), store.list_served_steps(SOURCE))
    p = served_curves(store)[0].points[0]
    assert not record_served_step(store, SOURCE, 10, base="bfs", adapter="agent", version=p.version, env_id="maze_2d/simple",
                                  run_id=p.run_id, served=p.served, trainer_pass_at_1=0.5)
    assert (store.curve(SOURCE), store.list_served_steps(SOURCE)) == before
    assert {pt["metric"] for pt in before[0]} == {SERVED_METRIC, TRAINER_METRIC}
    assert [r["step"] for r in store.list_served_steps(SOURCE, 20)] == [20]


def test_leaderboard_curves_fit_80_columns_and_name_the_best_step(scripted, tmp_path):
    db = str(tmp_path / "r.db")
    store = served_store(db, scripted.url)
    store.add_curve_point(SOURCE, "bfs", "maze_2d/simple", 10, "reward/mean", 0.25)  # other metrics stay raw rows
    out = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["--db", db, "leaderboard", "--curves"]).output
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80, out
    assert f"served curve of {SOURCE}" in out and "reward/mean=0.250" in out and "served/pass_at_1=" not in out
    starred = [line for line in out.splitlines() if line.startswith("│") and "*" in line.split("│")[1]]
    assert len(starred) == 1 and "*30 " in starred[0] and "100.0%" in starred[0] and "+12.5" in starred[0], out
    assert any(" 10 │" in line and "-50.0" in line for line in out.splitlines()), out
    assert f"\n  maze-serve adapters promote agent@{30:012x}\n" in out
    data = json.loads(CliRunner().invoke(main, ["--db", db, "leaderboard", "--curves", "--json"]).stdout)
    assert data["served"][0]["best_step"] == 30 and len(data["served"][0]["points"]) == 4


def test_the_curve_report_highlights_the_best_step_and_run_reports_link_to_it(scripted, tmp_path):
    db = str(tmp_path / "r.db")
    store = served_store(db, scripted.url)
    out = tmp_path / "curve.html"
    done = CliRunner().invoke(main, ["--db", db, "report", "--curve", SOURCE, "--out", str(out)])
    assert done.exit_code == 0, done.output
    text = out.read_text()
    best = served_curves(store)[0].best
    assert "Best served step: 30" in text and f"maze-serve adapters promote agent@{best.version}" in text
    assert text.count('<tr class="top">') == 1 and "data:image/png;base64," in text
    assert f"maze-eval report {best.run_id}" in text
    run_html = tmp_path / "run.html"
    assert CliRunner().invoke(main, ["--db", db, "report", best.run_id, "--out", str(run_html)]).exit_code == 0
    assert f"maze-eval report --curve {SOURCE}" in run_html.read_text()


def test_report_needs_a_run_or_a_curve(tmp_path):
    db = str(tmp_path / "r.db")
    assert CliRunner().invoke(main, ["--db", db, "report"]).exit_code == 2
    missing = CliRunner().invoke(main, ["--db", db, "report", "--curve", "nope"])
    assert missing.exit_code == 2 and "no served curve for 'nope'" in missing.output
