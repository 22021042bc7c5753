"""Evaluation runs against the real scripted server, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from agent.cli.demo import scripted_server, scripted_server_process
from evaluation import EvalConfig, Store, compare, evaluate, leaderboard
from evaluation.cli import main as cli
from evaluation.errors import EndpointUnavailable
from tests.support.waiting import wait_for


def cfg(url: str, db: str, **kw) -> EvalConfig:
    kw.setdefault("concurrency", 8)
    return EvalConfig(endpoint=url, db=db, **kw)


def test_run_scores_and_leaderboard(scripted, db_url):
    base = evaluate(cfg(scripted.url, db_url, run_name="base"))
    noisy = evaluate(cfg(scripted.url, db_url, adapter="noisy", seeds="0-31"))
    assert base.status == "complete" and base.summary.n == 64 and base.summary.solved == 63
    assert base.manifest.protocol == "tuple/v1" and base.manifest.max_turns == 15 and base.manifest.base == "bfs"
    assert noisy.summary.solved < 63 and noisy.summary.invalid_action_rate > 0.1
    store = Store(db_url)
    rows = leaderboard(store)
    assert [(r.model, r.seeds) for r in rows] == [("bfs", "0-63"), ("bfs:noisy", "0-31")]
    # A later run on fewer mazes gets its own row; it does not replace the full-set score.
    quick = evaluate(cfg(scripted.url, db_url, seeds="0-7"))
    rows = leaderboard(store)
    assert quick.summary.solve_rate > noisy.summary.solve_rate  # rows off the fixed set rank after it, among themselves
    assert [(r.model, r.seeds, r.run_id) for r in rows] == [("bfs", "0-63", base.run_id), ("bfs", "0-7", quick.run_id),
                                                            ("bfs:noisy", "0-31", noisy.run_id)]
    assert rows[0].summary.ci_low < 63 / 64 < rows[0].summary.ci_high
    c = compare(store, noisy.run_id, base.run_id)
    assert c.paired == 32 and c.only_b > c.only_a and c.p_value < 0.05 and c.verdict == "b_better"
    records = store.episode_records(base.run_id)
    assert len(records) == 64 and records[5].turns and records[5].seed == 5


def test_endpoint_failing_part_way_records_errors_then_resume_completes(db_url):
    with scripted_server_process() as (url, server):
        seen = []

        def kill_after_some(rec, done, total):
            seen.append(rec)
            if len(seen) == 10:
                # Take the endpoint down mid-run: in-flight and later episodes must be errors.
                server.kill()

        cfg_ = cfg(url, db_url, adapter="slow", concurrency=4)
        # An endpoint that stays down: its requests wait out wait_budget_s, then their episodes error.
        cfg_.retry.max_attempts, cfg_.retry.backoff_initial_s, cfg_.retry.wait_budget_s = 2, 0.01, 0.2
        result = evaluate(cfg_, on_episode=kill_after_some)
    assert result.status == "incomplete"
    s = result.summary
    assert s.errors > 0 and s.n + s.errors == 64
    assert s.solved == s.n - (1 if 20 in _scored_seeds(db_url, result.run_id) else 0)  # errors never count as failures
    with scripted_server() as url2:
        again = evaluate(EvalConfig(endpoint=url2, db=db_url), resume=result.run_id)
    assert again.status == "complete" and again.ran == s.errors
    assert again.summary.n == 64 and again.summary.solved == 63 and again.summary.errors == 0
    rows = Store(db_url).episode_rows(result.run_id)
    assert len(rows) == 64 and len({(r["seed"], r["sample"]) for r in rows}) == 64


def _scored_seeds(db_url, run_id):
    return {r["seed"] for r in Store(db_url).episode_rows(run_id) if r["stop_reason"] != "error"}


@pytest.mark.slow
def test_resume_after_kill_9(scripted, db_url):
    env = {**os.environ, "MAZE_DB": db_url}
    args = [sys.executable, "-m", "evaluation.cli", "--endpoint", scripted.url, "--adapter", "slow",
            "--concurrency", "2", "--run-name", "killme", "--json"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    store = Store(db_url)
    run_id = wait_for(lambda: next((r["run_id"] for r in store.list_runs()), None), interval=0.1)
    assert run_id, "the run never appeared in the store"
    assert wait_for(lambda: len(store.episode_rows(run_id)) >= 12, timeout=120, interval=0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = len(store.episode_rows(run_id))
    assert 12 <= partial < 64 and store.get_run(run_id)["status"] == "running"
    result = CliRunner().invoke(cli, ["--endpoint", scripted.url, "--resume", run_id, "--json"], env={"MAZE_DB": db_url})
    assert result.exit_code == 0, result.output
    rows = store.episode_rows(run_id)
    assert len(rows) == 64 and len({(r["seed"], r["sample"]) for r in rows}) == 64
    assert sum(r["success"] for r in rows) == 63 and store.get_run(run_id)["status"] == "complete"


def test_pass_at_k_with_samples(scripted, tmp_path):
    r = evaluate(cfg(scripted.url, str(tmp_path / "db.sqlite"), adapter="noisy", seeds="0-7", samples=3, temperature=0.7))
    assert r.summary.n == 24 and r.summary.k == 3 and r.summary.pass_at_k >= r.summary.solve_rate


def test_unknown_models_and_unreachable_endpoints_are_clear_errors(scripted, tmp_path):
    db = str(tmp_path / "db.sqlite")
    with pytest.raises(EndpointUnavailable, match="adapter 'nope' is not available.*noisy"):
        evaluate(cfg(scripted.url, db, adapter="nope"))
    with pytest.raises(EndpointUnavailable, match="base model 'gpt' is not served"):
        evaluate(cfg(scripted.url, db, base="gpt"))
    with pytest.raises(EndpointUnavailable, match="cannot reach"):
        evaluate(cfg("http://127.0.0.1:9/v1", db))
    assert Store(db).list_runs() == []  # nothing half-created


def test_retried_requests_are_reported(scripted, db_url):
    # "flaky": every distinct request fails once with 503 (what a lost replica answers), then succeeds.
    result = evaluate(cfg(scripted.url, db_url, adapter="flaky", seeds="0-7"))
    assert result.status == "complete" and result.summary.solved == 8
    turns = sum(r["turns"] for r in Store(db_url).episode_rows(result.run_id))
    rr = result.retries
    assert rr.retries == rr.retried_requests == turns and rr.episodes == 8 and rr.errored == 0
    assert rr.recovery_s is not None and rr.recovery_s > 0
    assert rr.outages >= 1 and rr.waited_s > 0 and rr.rate_limited == 0  # 503s are waited out, and reported
