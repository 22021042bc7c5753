"""Tokens per solved episode: in the run's summary, maze-eval's output, the leaderboard and the report,
and filled in for databases written before the store kept completion tokens."""

from __future__ import annotations

import json

import sqlalchemy as sa
from click.testing import CliRunner

from evaluation import EvalConfig, Store, evaluate, leaderboard
from evaluation.cli import main
from evaluation.summary import summarize


def _row(success: bool, tokens: int, completion: int) -> dict:
    return {"seed": 0, "sample": 0, "success": success, "stop_reason": "goal" if success else "turn_limit",
            "turns": 3, "path_efficiency": 1.0 if success else None, "invalid_actions": 0,
            "tokens": tokens, "completion_tokens": completion}


def test_summary_averages_over_solved_episodes_only():
    s = summarize([_row(True, 1000, 20), _row(True, 3000, 40), _row(False, 9999, 99)])
    assert (s.tokens_per_solve, s.completion_tokens_per_solve) == (2000.0, 30.0)
    # A server that reports no usage counts zero tokens: unknown, not free.
    s = summarize([_row(True, 0, 0)])
    assert s.tokens_per_solve is None and s.completion_tokens_per_solve is None
    assert summarize([_row(False, 10, 1)]).tokens_per_solve is None


def test_run_result_leaderboard_and_report_show_tokens_per_solve(scripted, tmp_path):
    db = str(tmp_path / "r.db")
    result = evaluate(EvalConfig(endpoint=scripted.url, db=db, seeds="0-7"))
    records = Store(db).episode_records(result.run_id)
    solved = [r for r in records if r.success]
    # The scripted server reports 6 completion tokens per reply and 64 prompt tokens per message sent.
    assert result.summary.completion_tokens_per_solve == sum(6 * r.num_turns for r in solved) / len(solved)
    assert result.summary.tokens_per_solve == sum(r.total_tokens for r in solved) / len(solved)
    assert result.summary.tokens_per_solve > result.summary.completion_tokens_per_solve > 0

    out = CliRunner().invoke(main, ["--db", db, "--endpoint", scripted.url, "--seeds", "0-7"]).output
    s = summarize(Store(db).episode_rows(leaderboard(Store(db))[0].run_id))
    assert (f"tokens per solved episode {s.tokens_per_solve:.0f} "
            f"(completion {s.completion_tokens_per_solve:.0f})") in out
    wide = CliRunner(env={"COLUMNS": "220"}).invoke(main, ["--db", db, "leaderboard", "--wide"]).output
    assert "tokens/solve" in wide and "compl./solve" in wide and f"│{s.tokens_per_solve:.0f} " in wide
    board = json.loads(CliRunner().invoke(main, ["--db", db, "leaderboard", "--json"]).stdout)
    assert board[0]["summary"]["completion_tokens_per_solve"] == s.completion_tokens_per_solve

    report = tmp_path / "rep.html"
    assert CliRunner().invoke(main, ["--db", db, "report", result.run_id, "--out", str(report)]).exit_code == 0
    html = report.read_text()
    assert f"tokens / solve<b>{result.summary.tokens_per_solve:.0f}</b>" in html
    assert f"completion tokens / solve<b>{result.summary.completion_tokens_per_solve:.0f}</b>" in html


def test_a_database_from_before_completion_tokens_is_filled_in(scripted, db_url):
    db = db_url
    result = evaluate(EvalConfig(endpoint=scripted.url, db=db, seeds="0-3"))
    expected = {r.seed: r.completion_tokens for r in Store(db).episode_records(result.run_id)}
    engine = sa.create_engine(db)
    with engine.begin() as conn:  # the table as it was: without the column
        conn.execute(sa.text("ALTER TABLE episodes DROP COLUMN completion_tokens"))
    engine.dispose()

    rows = Store(db).episode_rows(result.run_id)
    assert {r["seed"]: r["completion_tokens"] for r in rows} == expected and all(expected.values())
    assert Store(db).episode_rows(result.run_id) == rows  # opened again: nothing changes
