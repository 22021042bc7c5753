"""docker/Dockerfile.serve: hadolint-clean, on Ray's LLM image of the Ray version the manifest pins."""

from __future__ import annotations

import re
from pathlib import Path

from serving.k8s import RAY_VERSION
from tests.support.hadolint import assert_hadolint_clean

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile.serve"


def test_hadolint_clean():
    assert_hadolint_clean(DOCKERFILE)


def test_base_image_and_sources():
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE).group(1)
    assert base.startswith(f"rayproject/ray-llm:{RAY_VERSION}-")
    assert 'pip install --no-cache-dir "./[serve' in text
    for copied in re.findall(r"^COPY --chown=\S+ (.+) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert (ROOT / path).exists(), path
