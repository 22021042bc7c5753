"""``maze-train watch --gate``: each step after the first published as a candidate, scored, and put
through the offline gate against the version the name serves; the alias moves only on a pass, the
served curve marks each decision, and a restarted watcher neither plays nor decides anything again.

Against the gate's gateway stand-in (tests/support/gate_server.py: the gateway's management routes
over the serving config's adapter store, here a local folder, and scripted chat routes that fail the
mazes a test chooses for each version). The parity check measures first-token logprobs through a
real gateway, which the stand-in has not: here it records a passing check, as it would."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import yaml

from evaluation import Store
from evaluation.served import served_curves
from serving.adapters import AdapterStore
from serving.adapters.files import content_version
from serving.config import ServingConfig
from tests.support.gate_server import GateServer, serving
from training.watch import WatchConfig, Watcher

MODELS = Path(__file__).resolve().parents[2] / "models"
PASSED = {"ok": True, "frames": 4, "max_abs_diff": 0.004, "reference": "hf+peft"}


def export_with_steps(root: Path, steps: list[int]) -> dict[int, str]:
    """An export path holding ``steps``, each a copy of the shipped adapter made a version of its own;
    step -> its content version."""
    versions = {}
    for step in steps:
        folder = root / f"global_step_{step}" / "policy"
        shutil.copytree(MODELS / "maze-grpo", folder)
        cfg = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**cfg, "maze_step": step}))
        versions[step] = content_version(folder)
    return versions


def test_watch_gate_moves_the_alias_only_on_a_pass_and_marks_the_curve(tmp_path, monkeypatch):
    data = ServingConfig.shipped("embedded").model_dump(mode="json")
    data["adapters"] = {"prefix": f"file://{tmp_path / 'store'}/lora"}
    config = tmp_path / "serving.yaml"
    config.write_text(yaml.safe_dump(data))
    store = AdapterStore(ServingConfig.from_file(config).adapters)
    store.ensure_bucket()
    versions = export_with_steps(tmp_path / "export", [0, 3, 6])
    server = GateServer(store, base="maze-tiny")
    server.fail(versions[0], range(0, 64, 3))  # step 3 beats step 0
    server.fail(versions[6], range(0, 64, 2))  # step 6 is worse than step 3

    async def parity_passes(self, step: int, version: str) -> bool:
        await asyncio.to_thread(store.record_parity, self.cfg.adapter, version, PASSED)
        return True

    monkeypatch.setattr(Watcher, "_parity_ok", parity_passes)
    db = str(tmp_path / "results.db")
    said: list[str] = []
    with serving(server.app()) as url:
        cfg = WatchConfig(source="job-1", export_path=str(tmp_path / "export"), adapter="agent",
                          serving_config=str(config), endpoint=url, db=db, ledger=str(tmp_path / "ledger.json"),
                          gate=True)
        outcomes = asyncio.run(Watcher(cfg, on_event=said.append).run_pass())
        assert {s: o.gate for s, o in outcomes.items()} == {0: None, 3: "promoted", 6: "worse"}
        assert store.resolve("agent").version == versions[3]
        actions = [(m.action, m.version) for m in store.history("agent")]
        assert actions[:4] == [("gate", versions[6]), ("candidate", versions[6]), ("promote", versions[3]),
                               ("candidate", versions[3])]
        assert actions[-1] == ("push", versions[0])  # the first step of the new name, served as published
        assert any(line.startswith("step 3: gate better") and "promoted: agent ->" in line for line in said)

        (curve,) = served_curves(Store(db), "job-1")
        assert [(p.step, p.version, p.gate) for p in curve.points] == [
            (0, versions[0], None), (3, versions[3], "promoted"), (6, versions[6], "worse")]

        runs, decisions = len(Store(db).list_runs()), len(Store(db).gate_decisions())
        again = asyncio.run(Watcher(cfg, on_event=said.append).run_pass())  # a restart: everything is done
        assert {s: o.gate for s, o in again.items()} == {0: None, 3: "promoted", 6: "worse"}
        assert (len(Store(db).list_runs()), len(Store(db).gate_decisions())) == (runs, decisions)
        assert store.resolve("agent").version == versions[3]
