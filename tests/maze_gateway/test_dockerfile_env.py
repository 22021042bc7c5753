"""docker/Dockerfile.env: hadolint-clean; installs the openenv extra at the tested pins and serves
maze-env on the port OpenEnv's Docker provider maps (8000)."""

from __future__ import annotations

import re

from tests.support.hadolint import assert_hadolint_clean

from .venvs import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile.env"


def test_hadolint_clean():
    assert_hadolint_clean(DOCKERFILE)


def test_installs_the_openenv_extra_and_serves_on_8000():
    text = DOCKERFILE.read_text()
    assert 'pip install --no-cache-dir -c scripts/framework-pins/openenv.txt "./[openenv]"' in text
    for copied in re.findall(r"^COPY --chown=\S+ (.+) \S+$", text, re.MULTILINE):
        for path in copied.split():
            assert (ROOT / path).exists(), path
    cmd = re.search(r"^CMD (\[.+\])$", text, re.MULTILINE).group(1)
    assert cmd.startswith('["maze-env", "serve", "--host", "0.0.0.0", "--port", "8000"')
    assert "EXPOSE 8000" in text
