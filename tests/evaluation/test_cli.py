"""maze-eval's exit codes and --json output (stable interface)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from agent.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNAVAILABLE
from evaluation.cli import main


def invoke(*args, db):
    return CliRunner().invoke(main, ["--db", db, *args])


def test_run_json_leaderboard_compare_report(scripted, tmp_path):
    db = str(tmp_path / "r.db")
    a = invoke("--endpoint", scripted.url, "--seeds", "0-15", "--json", db=db)
    assert a.exit_code == EXIT_OK, a.output
    ra = json.loads(a.stdout)
    assert ra["status"] == "complete" and ra["summary"]["n"] == 16 and ra["summary"]["solved"] == 16
    b = invoke("--endpoint", scripted.url, "--adapter", "broken", "--seeds", "0-15", "--json", db=db)
    rb = json.loads(b.stdout)
    assert rb["summary"]["solved"] == 0 and rb["summary"]["invalid_action_rate"] == 1.0

    board = json.loads(invoke("leaderboard", "--json", db=db).stdout)
    assert [r["model"] for r in board] == ["bfs", "bfs:broken"]
    assert set(board[0]["summary"]) >= {"solve_rate", "ci_low", "ci_high", "n", "mean_turns_solved", "path_efficiency"}

    cmp_ = json.loads(invoke("compare", ra["run_id"], rb["run_id"], "--json", db=db).stdout)
    assert (cmp_["both"], cmp_["only_a"], cmp_["only_b"], cmp_["neither"]) == (0, 16, 0, 0)
    assert cmp_["p_value"] < 1e-4 and cmp_["verdict"] == "a_better"
    assert (cmp_["model_a"], cmp_["model_b"]) == ("bfs", "bfs:broken")
    text = invoke("compare", ra["run_id"], rb["run_id"], db=db).stdout
    assert "A bfs (" in text and "verdict: A (bfs) is better at p < 0.05" in text
    same = invoke("compare", ra["run_id"], ra["run_id"], db=db).stdout
    assert "verdict: no significant difference at p < 0.05" in same

    out = tmp_path / "rep.html"
    rep = invoke("report", ra["run_id"], "--out", str(out), db=db)
    assert rep.exit_code == EXIT_OK and out.stat().st_size > 10_000
    assert out.read_text().count("data:image/gif;base64,") == 16


def test_bad_input_exit_codes(scripted, tmp_path):
    db = str(tmp_path / "r.db")
    r = invoke("--endpoint", scripted.url, "--seeds", "9-1", "--json", db=db)
    assert r.exit_code == EXIT_BAD_INPUT and "seeds" in json.loads(r.stdout)["error"]
    r = invoke("--endpoint", scripted.url, "--history", "recent", db=db)
    assert r.exit_code == EXIT_BAD_INPUT and "history policy" in r.output
    r = invoke("--endpoint", scripted.url, "--adapter", "a:b", db=db)
    assert r.exit_code == EXIT_BAD_INPUT
    r = invoke("--endpoint", scripted.url, "--adapter", "ghost", "--json", db=db)
    assert r.exit_code == EXIT_UNAVAILABLE and "ghost" in json.loads(r.stdout)["error"]
    r = invoke("--endpoint", "http://127.0.0.1:9/v1", db=db)
    assert r.exit_code == EXIT_UNAVAILABLE
    r = invoke("--resume", "no-such-run", "--endpoint", scripted.url, "--json", db=db)
    assert r.exit_code == EXIT_BAD_INPUT and "no run" in json.loads(r.stdout)["error"]
    assert invoke("compare", "x", "y", "--json", db=db).exit_code == EXIT_BAD_INPUT
    assert invoke("report", "x", db=db).exit_code == EXIT_BAD_INPUT


def test_leaderboard_fits_80_columns(scripted, tmp_path):
    """In an 80-column terminal every cell is shown whole (wrapped, never cut with an ellipsis)."""
    db = str(tmp_path / "r.db")
    run = invoke("--endpoint", scripted.url, "--seeds", "0-3", "--run-name", "a-rather-long-run-name", db=db)
    assert run.exit_code == 0
    out = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["--db", db, "leaderboard"]).output
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80, out
    body = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    columns = ["".join(cells[j].strip() for cells in body) for j in range(len(body[0]))]  # one data row
    run_id = json.loads(invoke("leaderboard", "--json", db=db).stdout)[0]["run_id"]
    # A run on fewer than the fixed 64 mazes is labelled with its maze set (its own row, not the full score's).
    assert columns[0] == "bfs(seeds0-3)" and columns[3] == "100.0%" and columns[-1] == run_id, columns
    wide = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--db", db, "leaderboard", "--wide"]).output
    assert "path eff." in wide and "…" not in wide
