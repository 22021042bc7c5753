"""The launcher's and the lab's public names resolve, and the launcher does not load the lab."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import training


def test_every_public_name_of_the_launcher_resolves():
    assert all(getattr(training, name) is not None for name in training.__all__)
    assert {"TrainSpec", "render_entrypoint", "render_manifests", "JobClient", "follow_metrics", "publish"} <= set(
        training.__all__)


LAB_ROOMS = ("model", "fastpath", "data", "policies", "trainers", "diagnostics", "gpu")


def test_every_public_name_of_the_lab_resolves():
    from training import tiny

    assert all(getattr(tiny, name) is not None for name in tiny.__all__)
    named = {name for names in tiny._LAZY.values() for name in names}
    assert sorted(tiny.__all__) == sorted(named | {"lazy_exports"})  # each public name has its module
    for room in LAB_ROOMS:
        face = importlib.import_module(f"training.tiny.{room}")
        assert all(getattr(face, name) is not None for name in face.__all__), room


def test_the_labs_faces_import_none_of_their_modules():
    """Importing a lab face loads no torch and none of the room's modules, so ``python -m`` runs a
    room module once (runpy warns when the package already imported it)."""
    faces = ", ".join(f"training.tiny.{room}" for room in LAB_ROOMS)
    code = (f"import sys, {faces}; "
            "loaded = [m for m in sys.modules if m == 'torch' or m.count('.') > 2 and m.startswith('training.tiny.')]; "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_launcher_and_its_cli_load_neither_the_lab_nor_torch():
    code = ("import sys, training, training.cli; "
            "assert not [m for m in sys.modules if m.startswith('training.tiny') or m == 'torch'], 'loaded'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_submission_waits_for_a_new_heads_job_agent(monkeypatch):
    """Ray refuses submissions until a fresh head's job agent has registered: the client retries that
    refusal (and only that one) instead of failing the first submission to a new cluster."""
    from training import jobs

    calls = []

    class FakeSDK:
        def submit_job(self, **kwargs):
            calls.append(kwargs["submission_id"])
            if len(calls) < 3:
                raise RuntimeError("Request failed with status code 500: No available agent to submit job, please try again later..")
            return kwargs["submission_id"]

    client = object.__new__(jobs.JobClient)
    client.address, client._client = "http://127.0.0.1:8265", FakeSDK()
    monkeypatch.setattr(jobs.time, "sleep", lambda s: None)
    assert client.submit("python -c pass", submission_id="maze-local-0001") == "maze-local-0001"
    assert calls == ["maze-local-0001"] * 3

    class Refusing:
        def submit_job(self, **kwargs):
            raise RuntimeError("Request failed with status code 400: bad runtime_env")

    client._client = Refusing()
    with pytest.raises(jobs.JobError, match="submission refused: .*bad runtime_env"):
        client.submit("python -c pass", submission_id="maze-local-0002")
