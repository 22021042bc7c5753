"""Every results file says what made it: the commit and the command (benchmarks/support/provenance.py).

A figure in the docs is tied to a field of a results file (tests/test_docs_figures.py); the file's
``commit`` and ``command`` say which code measured it and how to measure it again. Files recorded
before the scripts wrote them carry the commit that recorded the file, marked by ``commit_is``.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from benchmarks.support.provenance import engine_settings, provenance
from serving.config import ServingConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# A short sha; -dirty (or fault_matrix's older +uncommitted) when the tree differed from it.
COMMIT = re.compile(r"^[0-9a-f]{7,40}(-dirty|\+uncommitted)?$")


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_results_file_records_its_commit_and_command(path):
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict), f"{path.name}: not a JSON object"
    commit, command = doc.get("commit"), doc.get("command")
    assert isinstance(commit, str) and COMMIT.match(commit), f"{path.name}: commit {commit!r}"
    assert isinstance(command, str) and command, f"{path.name}: no command"
    script = shlex.split(command)[0]
    assert (ROOT / script).is_file(), f"{path.name}: its command's script {script} does not exist"


def test_provenance_names_the_script_relative_to_the_repository():
    out = provenance([str(ROOT / "benchmarks" / "soak.py"), "--duration-s", "600", "--env", "A=b c"])
    assert out["command"] == "benchmarks/soak.py --duration-s 600 --env 'A=b c'"
    assert COMMIT.match(out["commit"]) or out["commit"] == "unknown"
    assert out["engine_env"] is None and out["cpus"] >= 1 and out["python"] and out["measured_at"].endswith("+00:00")


def test_engine_settings_are_the_fields_that_change_how_the_engine_runs():
    cfg = ServingConfig.shipped("embedded")
    settings = engine_settings(cfg, {"LD_PRELOAD": "libjemalloc.so.2"})
    assert settings["allocator"] == cfg.allocator and settings["cpu_affinity"] == cfg.cpu_affinity
    assert settings["env"] == {"LD_PRELOAD": "libjemalloc.so.2"}
    assert engine_settings(cfg)["env"] == cfg.env
    assert provenance(["benchmarks/x.py"], settings)["engine_env"] == settings


def test_a_copy_whose_git_is_not_its_commit_names_the_commit_it_holds(monkeypatch):
    """The GPU machine gets the working tree with an older .git: the run names the commit it holds."""
    from benchmarks.support.provenance import COMMIT_ENV

    monkeypatch.setenv(COMMIT_ENV, "7730d36")
    assert provenance(["benchmarks/gpu_serving.py"])["commit"] == "7730d36"
