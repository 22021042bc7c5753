"""The watcher's restart logic: what a step needs next, and the ledger of published versions."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from training.cli import main
from training.watch import DEFAULT_SEEDS, Action, Ledger, LedgerError, WatchConfig, default_ledger_path, next_action


@pytest.mark.parametrize(("linked", "version", "run_status", "action"), [
    (True, "0123456789ab", "complete", Action.SKIP),  # done: linked in the results store
    (True, None, None, Action.SKIP),  # linked wins even when the ledger was lost
    (False, None, None, Action.PUBLISH),  # new step
    (False, "0123456789ab", None, Action.SCORE),  # killed after publishing, before the run existed
    (False, "0123456789ab", "running", Action.RESUME),  # killed while scoring
    (False, "0123456789ab", "incomplete", Action.RESUME),  # errored episodes: retried
    (False, "0123456789ab", "complete", Action.RECORD),  # killed after scoring, before linking
])
def test_next_action(linked, version, run_status, action):
    assert next_action(linked=linked, version=version, run_status=run_status) is action


def test_the_ledger_survives_a_restart_and_is_replaced_whole(tmp_path):
    path = tmp_path / "w" / "ledger.json"
    ledger = Ledger(path, "job-1", "agent", "/exports/run")
    assert ledger.version(1) is None
    ledger.record(2, "bbbbbbbbbbbb")
    ledger.record(1, "aaaaaaaaaaaa")
    again = Ledger(path, "job-1", "agent", "/exports/run")
    assert (again.version(1), again.version(2), again.version(3)) == ("aaaaaaaaaaaa", "bbbbbbbbbbbb", None)
    assert list(json.loads(path.read_text())["steps"]) == ["1", "2"]
    assert os.listdir(path.parent) == ["ledger.json"]  # no temporary file left behind


def test_a_failed_write_keeps_the_previous_ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    Ledger(path, "job-1", "agent", "/e").record(1, "aaaaaaaaaaaa")
    before = path.read_bytes()

    def crash(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        Ledger(path, "job-1", "agent", "/e").record(2, "bbbbbbbbbbbb")
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["ledger.json"]


def test_a_ledger_of_another_run_or_a_corrupt_one_is_refused(tmp_path):
    path = tmp_path / "ledger.json"
    Ledger(path, "job-1", "agent", "/e").record(1, "aaaaaaaaaaaa")
    with pytest.raises(LedgerError, match="belongs to source 'job-1'"):
        Ledger(path, "job-2", "agent", "/e")
    with pytest.raises(LedgerError, match="export '/e'"):
        Ledger(path, "job-1", "agent", "/other")
    path.write_text('{"source": "job-1", "steps": ')
    with pytest.raises(LedgerError, match="unreadable watch ledger"):
        Ledger(path, "job-1", "agent", "/e")


def test_defaults_score_the_fixed_maze_set(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    cfg = WatchConfig(source="maze-local-1/x", export_path="/e", adapter="agent")
    assert cfg.seeds == DEFAULT_SEEDS == "0-63"
    assert cfg.ledger_path == tmp_path / "maze-gateway" / "watch" / "maze-local-1_x.agent.json"
    assert default_ledger_path("a", "b").parent == cfg.ledger_path.parent


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    no_export = CliRunner().invoke(main, ["watch", "job-1", "--adapter", "agent"], env={"RAY_ADDRESS": None})
    assert no_export.exit_code == 2 and "--export is required" in no_export.output, no_export.output
    ledger = tmp_path / "l.json"
    ledger.write_text("not json")
    bad = CliRunner().invoke(main, ["watch", "job-1", "--adapter", "agent", "--export", str(export),
                                    "--ledger", str(ledger)], env={"RAY_ADDRESS": None})
    assert bad.exit_code == 2 and "unreadable watch ledger" in bad.output, bad.output
    seeds = CliRunner().invoke(main, ["watch", "job-1", "--adapter", "agent", "--export", str(export),
                                      "--seeds", "9-1", "--ledger", str(tmp_path / "m.json")], env={"RAY_ADDRESS": None})
    assert seeds.exit_code == 2 and "seeds" in seeds.output, seeds.output


def _run(store, run_id: str, name: str, adapter: str, version: str | None, status: str) -> None:
    from evaluation.manifest import RunManifest

    store.create_run(RunManifest(run_id=run_id, run_name=name, endpoint="http://127.0.0.1:9/v1", base="maze-tiny",
                                 adapter=adapter, adapter_version=version, env_id="maze_2d/simple", env_spec_version="1",
                                 protocol="tuple/v1", history="window:2", sampling={}, max_turns=15, seeds=[0, 1]))
    store.set_status(run_id, status)


def test_a_restart_finds_the_step_s_run_and_a_lost_ledger_is_rebuilt_from_it(tmp_path):
    """The results store is where scoring is remembered: a step's run is found by its name, pinned
    version and adapter; with the ledger lost, the version the run pinned is taken back into it."""
    from evaluation.served import served_run_name
    from evaluation.store import Store
    from training.watch import Watcher

    db = str(tmp_path / "r.db")
    store = Store(db)
    _run(store, "other-adapter", served_run_name("job-1", 2), "another", "cccccccccccc", "complete")
    _run(store, "old", served_run_name("job-1", 2), "agent", "aaaaaaaaaaaa", "complete")
    _run(store, "half", served_run_name("job-1", 2), "agent", "bbbbbbbbbbbb", "running")
    cfg = WatchConfig(source="job-1", export_path=str(tmp_path), adapter="agent", endpoint="http://127.0.0.1:9/v1",
                      db=db, ledger=str(tmp_path / "ledger.json"))
    watcher = Watcher(cfg)
    version, run = watcher._known(store, 2)
    assert (version, run["run_id"]) == ("bbbbbbbbbbbb", "half")  # the newest run of this adapter
    assert next_action(linked=False, version=version, run_status=run["status"]) is Action.RESUME
    assert Ledger(cfg.ledger_path, "job-1", "agent", str(tmp_path)).version(2) == "bbbbbbbbbbbb"
    watcher.ledger.record(2, "aaaaaaaaaaaa")  # the ledger wins over the runs: the run pinned to it
    version, run = watcher._known(store, 2)
    assert (version, run["run_id"], run["status"]) == ("aaaaaaaaaaaa", "old", "complete")
    assert watcher._known(store, 3) == (None, None)
    store.close()
