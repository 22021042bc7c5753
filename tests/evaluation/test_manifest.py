"""The run manifest: typed runner settings, stored as JSON, and manifests stored before them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agent.protocol import HistoryPolicy
from agent.runner import RetryPolicy
from evaluation import Store
from evaluation.manifest import RunManifest, RunnerSettings
from evaluation.store import runs

V1 = {  # a manifest as version 1 stored it: the runner's settings at the top level, as strings
    "manifest_version": 1, "run_id": "old-run", "run_name": None, "endpoint": "http://127.0.0.1:8000/v1",
    "base": "maze-tiny", "adapter": "maze-grpo", "adapter_version": "b6e4ab3a3a67", "env_id": "maze_2d/simple",
    "env_spec_version": "1", "protocol": "tuple/v1", "history": "window:2",
    "sampling": {"temperature": 0.0, "max_tokens": 32}, "max_turns": 15, "seeds": [0, 1, 2], "samples": 1,
    "code_version": "0.1.0+gabc", "created_at": "2026-12-01T00:00:00+00:00",
}


def test_a_version_1_manifest_loads_with_typed_runner_settings():
    m = RunManifest.model_validate(V1)
    assert m.runner.history == HistoryPolicy(kind="window", turns=2) and m.runner.sampling.max_tokens == 32
    assert (m.env_id, m.protocol, m.history, m.max_turns) == ("maze_2d/simple", "tuple/v1", "window:2", 15)
    assert m.sampling == {"temperature": 0.0, "max_tokens": 32} and m.manifest_version == 1
    runner = m.runner.runner_config(retry=RetryPolicy(max_attempts=2), concurrency=3)
    assert (runner.protocol, str(runner.history), runner.turn_limit, runner.concurrency) == ("tuple", "window:2", 15, 3)
    assert runner.retry.max_attempts == 2 and runner.sampling == m.runner.sampling


def test_a_manifest_round_trips_through_json_with_its_history_as_text():
    runner = RunnerSettings(env_id="maze_2d/simple", max_turns=20, protocol="keyword", history="full",
                            sampling={"temperature": 0.7, "max_tokens": 16})
    m = RunManifest(run_id="r", endpoint="http://127.0.0.1:1/v1", base="b", env_spec_version="1", runner=runner,
                    seeds=[0])
    stored = json.loads(json.dumps(m.model_dump(mode="json")))
    assert stored["manifest_version"] == 2 and stored["runner"]["history"] == "full"
    assert stored["runner"]["protocol"] == "keyword/v1"  # the id with its version: what the results were made with
    assert RunManifest.model_validate(stored) == m


@pytest.mark.parametrize("field, value", [("history", "sometimes"), ("protocol", "prose"), ("env_id", "maze_2d/giant")])
def test_runner_settings_are_checked(field, value):
    data = {**V1, field: value}
    with pytest.raises(ValidationError, match=field):
        RunManifest.model_validate(data)


def test_the_store_reads_a_version_1_run(tmp_path):
    """A results database written before the runner settings were typed still reads and resumes."""
    store = Store(str(tmp_path / "old.sqlite"))
    store.create_run(RunManifest.model_validate(V1))
    with store.engine.begin() as conn:  # exactly what version 1 stored
        conn.execute(runs.update().where(runs.c.run_id == "old-run").values(manifest=V1))
    m = RunManifest.model_validate(store.get_run("old-run")["manifest"])
    assert m.runner.max_turns == 15 and m.served_model == "maze-tiny:maze-grpo@b6e4ab3a3a67"
    store.close()
