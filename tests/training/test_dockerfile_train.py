"""docker/Dockerfile.train: hadolint-clean, pins the SkyRL and Ray versions the rest of the code assumes."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.hadolint import assert_hadolint_clean
from training.k8s import RAY_VERSION
from training.skyrl.keys import SKYRL_VERSION
from training.spec import TrainSpec

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile.train"


def test_hadolint_clean():
    assert_hadolint_clean(DOCKERFILE)


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
