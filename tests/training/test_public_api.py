"""The launcher's and the lab's public names resolve, and the launcher does not load the lab."""

from __future__ import annotations

import subprocess
import sys

import training


def test_every_public_name_of_the_launcher_resolves():
    assert all(getattr(training, name) is not None for name in training.__all__)
    assert {"TrainSpec", "render_entrypoint", "render_manifests", "JobClient", "follow_metrics", "publish"} <= set(
        training.__all__)


def test_every_public_name_of_the_lab_resolves():
    from training import tiny

    assert all(getattr(tiny, name) is not None for name in tiny.__all__)
    assert sorted(tiny.__all__) == sorted(tiny._EXPORTS)  # each public name has its module


def test_the_launcher_and_its_cli_load_neither_the_lab_nor_torch():
    code = ("import sys, training, training.cli; "
            "assert not [m for m in sys.modules if m.startswith('training.tiny') or m == 'torch'], 'loaded'")
    subprocess.run([sys.executable, "-c", code], check=True)
