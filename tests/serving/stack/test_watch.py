"""maze-train watch end to end: a local GRPO job on a real local Ray cluster, every exported step
published to the embedded gateway's store (moto S3 over HTTP), scored through the gateway (vLLM on
CPU) pinned to its version, and shown as a served curve; the watcher killed with -9 part-way and
restarted repeats and loses nothing. A step published by hand under a name of its own
(``maze-train publish``) is served at once too.

The watcher scores 8 seeds per step here (``--seeds 0-7``, its documented flag) to bound the test's
time; its default is the fixed 64-maze set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evaluation.cli import main as maze_eval
from evaluation.served import served_run_name
from evaluation.store import Store
from serving.adapters.files import content_version
from tests.support.gateway_stack import KEY
from tests.support.ray_cluster import local_ray_cluster
from training.cli import main as maze_train

ROOT = Path(__file__).resolve().parents[3]
SEEDS = "0-7"
pytestmark = [pytest.mark.slow, pytest.mark.needs_ray]


def tiny_spec(tmp: Path, steps: int) -> str:
    """A small local GRPO run that exports (and evaluates) every step. Enough turns to solve mazes,
    four hot samples per maze: groups with unequal rewards, so step 2 updates the LoRA and exports
    other weights than step 1 (a step that learned nothing would export its version again)."""
    spec = {
        "name": "tiny-watch",
        "env": {"max_turns": 12, "reward": "task"},
        "data": {"dir": str(tmp / "data"), "train_rows": 2, "eval_rows": 2},
        "model": {"path": "models/maze-tiny", "lora": {"rank": 8, "alpha": 8}},
        "generation": {"temperature": 1.5},
        "placement": {"num_nodes": 1, "gpus_per_node": 1},
        "inference": {"num_engines": 1},
        "optim": {"epochs": steps, "train_batch_size": 2, "policy_mini_batch_size": 2, "n_samples_per_prompt": 4,
                  "lr": 1e-2},
        "output": {"ckpt_path": str(tmp / "ckpt"), "export_path": str(tmp / "export"), "ckpt_interval": 1,
                   "hf_save_interval": 1, "eval_interval": 1, "eval_before_train": False},
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def watcher(job: str, address: str, tmp: Path, serving_yaml: Path, base_url: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "training.cli", "watch", job, "--adapter", "watched", "--address", address,
           "--serving-config", str(serving_yaml), "--endpoint", base_url, "--api-key", KEY, "--seeds", SEEDS,
           "--concurrency", "1", "--db", str(tmp / "results.db"), "--ledger", str(tmp / "ledger.json"),
           "--interval", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def scoring_in_flight(db: Path) -> tuple[str, list[tuple[int, int]]] | None:
    """A scoring run that has committed episodes but is not complete, with its (episode id, seed)s."""
    from sqlalchemy.exc import OperationalError

    if not db.exists():
        return None
    try:
        store = Store(str(db))
    except OperationalError:  # the watcher is creating the tables right now
        return None
    try:
        for run in store.list_runs():
            rows = store.episode_rows(run["run_id"])
            if run["status"] == "running" and rows:
                return run["run_id"], sorted((r["id"], r["seed"]) for r in rows)
    finally:
        store.close()
    return None


def test_every_exported_step_is_published_scored_and_curved_across_a_kill(stack, tmp_path):
    serving_yaml = tmp_path / "serving.yaml"
    serving_yaml.write_text(yaml.safe_dump(stack.cfg.model_dump(mode="json")))
    db = tmp_path / "results.db"
    with local_ray_cluster(num_cpus=2) as address:
        sub = CliRunner().invoke(maze_train, ["submit", "--address", address, "--trainer", "local",
                                              tiny_spec(tmp_path, steps=2)])
        assert sub.exit_code == 0, sub.output
        job = sub.stdout.strip()

        # First watcher: killed with -9 while a step's scoring run is half played.
        first = watcher(job, address, tmp_path, serving_yaml, stack.base_url)
        deadline, seen = time.monotonic() + 300, None
        while seen is None and first.poll() is None and time.monotonic() < deadline:
            seen = scoring_in_flight(db)
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        before = first.communicate()[0]
        assert seen is not None, before[-3000:]
        killed_run, kept = seen

        # Second watcher: runs until the job has ended and every export is scored.
        second = watcher(job, address, tmp_path, serving_yaml, stack.base_url)
        after = second.communicate(timeout=420)[0]
        assert second.returncode == 0, after[-3000:]
        assert f"resuming run {killed_run}" in after and f"job {job} SUCCEEDED" in after, after

    versions = assert_each_step_published_scored_and_served(stack, tmp_path, job, killed_run, kept)
    assert_a_rerun_does_nothing(stack, tmp_path, job, serving_yaml)
    assert_the_served_curve(db, tmp_path, job)
    assert_a_step_published_by_hand_serves(stack, tmp_path, serving_yaml, versions[0])


def assert_each_step_published_scored_and_served(stack, tmp_path: Path, job: str, killed_run: str,
                                                 kept: list[tuple[int, int]]) -> list[str]:
    """Each exported step pushed once as the version its files hash to, scored once pinned to it (the
    killed run resumed, not replayed), with its parity kept; returns the steps' versions."""
    db = tmp_path / "results.db"
    steps = [s["step"] for s in json.loads(CliRunner().invoke(maze_train, ["checkpoints", str(tmp_path / "export"),
                                                                           "--json"]).stdout)]
    assert steps == [1, 2], steps
    # Published: each step as the version its files hash to, each version pushed once.
    ledger = json.loads((tmp_path / "ledger.json").read_text())["steps"]
    versions = [ledger[str(s)]["version"] for s in steps]
    assert versions == [content_version(tmp_path / "export" / f"global_step_{s}" / "policy") for s in steps]
    metrics = [json.loads(line) for line in (tmp_path / "export" / "metrics.jsonl").read_text().splitlines()]
    assert len(set(versions)) == 2, (ledger, [m["policy/updates"] for m in metrics])
    pushes = [m.version for m in stack.store.history("watched") if m.action == "push"]
    assert pushes == versions[::-1], pushes  # newest first: the alias follows the newest step
    # Scored: one complete run per step, pinned to its version; the killed run was resumed, not
    # replayed (its episodes committed before the kill kept their rows).
    store = Store(str(db))
    for step, version in zip(steps, versions, strict=True):
        (run,) = store.runs_named(served_run_name(job, step))
        assert run["status"] == "complete" and run["manifest"]["adapter_version"] == version
        assert [r["seed"] for r in store.episode_rows(run["run_id"])] == list(range(8))
    # Served as trained: each step's parity against HF + peft on its files, kept with its version.
    parity = stack.store.parity("watched")
    assert all(parity[v].ok and parity[v].reference == "hf+peft" for v in versions), parity
    rows = {(r["id"], r["seed"]) for r in store.episode_rows(killed_run)}
    assert set(kept) <= rows and len(kept) < 8
    assert [(r["step"], r["version"]) for r in store.list_served_steps(job)] == list(zip(steps, versions, strict=True))
    store.close()
    return versions


def assert_a_rerun_does_nothing(stack, tmp_path: Path, job: str, serving_yaml: Path) -> None:
    """Once more, even with the ledger gone: nothing left to do, nothing done twice."""
    db = tmp_path / "results.db"
    (tmp_path / "ledger.json").unlink()
    rerun = CliRunner().invoke(maze_train, ["watch", job, "--adapter", "watched", "--export", str(tmp_path / "export"),
                                            "--serving-config", str(serving_yaml), "--endpoint", stack.base_url,
                                            "--api-key", KEY, "--seeds", SEEDS, "--db", str(db),
                                            "--ledger", str(tmp_path / "ledger.json")])
    assert rerun.exit_code == 0 and not [line for line in rerun.output.splitlines() if line.startswith("step ")], rerun.output
    assert len(Store(str(db)).list_runs()) == 2 and len(stack.store.history("watched")) == 2


def assert_the_served_curve(db: Path, tmp_path: Path, job: str) -> None:
    """The served curve beside the trainer's pass@1, within 80 columns, best step and how to serve it."""
    board = CliRunner(env={"COLUMNS": "80"}).invoke(maze_eval, ["--db", str(db), "leaderboard", "--curves"]).output
    assert max(len(line) for line in board.splitlines()) <= 80 and "…" not in board, board
    assert f"served curve of {job}" in board and "maze-serve adapters promote watched@" in board, board
    data = json.loads(CliRunner().invoke(maze_eval, ["--db", str(db), "leaderboard", "--curves", "--json"]).stdout)
    (curve,) = data["served"]
    assert [p["step"] for p in curve["points"]] == [1, 2]
    assert all(p["trainer_pass_at_1"] is not None and p["n"] == 8 for p in curve["points"])
    report = tmp_path / "curve.html"
    out = CliRunner().invoke(maze_eval, ["--db", str(db), "report", "--curve", job, "--out", str(report)])
    assert out.exit_code == 0, out.output
    text = report.read_text()
    best = next(p for p in curve["points"] if p["step"] == curve["best_step"])
    assert f"Best served step: {best['step']}" in text and f"maze-serve adapters promote watched@{best['version']}" in text


def assert_a_step_published_by_hand_serves(stack, tmp_path: Path, serving_yaml: Path, version: str) -> None:
    """The same export's step 1 (``version``) published by hand under a name of its own: served at once."""
    pub = CliRunner().invoke(maze_train, ["publish", "--export", str(tmp_path / "export"), "--step", "1",
                                          "--name", "by-hand", "--serving-config", str(serving_yaml)])
    assert pub.exit_code == 0 and "published maze-tiny:by-hand" in pub.stdout, pub.output
    r = CliRunner().invoke(maze_eval, ["--endpoint", stack.base_url, "--api-key", KEY, "--adapter", "by-hand",
                                       "--seeds", "0-3", "--db", str(tmp_path / "by-hand.sqlite"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "complete" and out["summary"]["n"] == 4 and out["manifest"]["adapter"] == "by-hand"
    assert out["manifest"]["adapter_version"] == version
