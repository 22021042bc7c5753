"""The frameworks' venvs and processes run in them (shared by tests/maze_gateway and the gateway tests).

openenv-core, verifiers and inspect-ai each pin versions that the serving stack's venv cannot take
(pillow, openai, botocore), and verifiers' openai<3 excludes inspect-ai's openai>=3.4, so
scripts/setup.sh installs each extra, with this package, into a venv of its own: ``.venv-openenv``,
``.venv-verifiers``, ``.venv-inspect`` (or ``$MAZE_VENV_OPENENV`` and so on).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def venv_bin(framework: str, program: str = "python") -> Path:
    """A program of the framework's venv; the test fails (naming the fix) when the venv is missing."""
    venv = Path(os.environ.get(f"MAZE_VENV_{framework.upper()}", ROOT / f".venv-{framework}"))
    path = venv / "bin" / program
    if not path.exists():
        pytest.fail(f"{path} is missing: scripts/setup.sh installs the {framework} venv (.[{framework}])")
    return path


def venv_env(**extra: str) -> dict[str, str]:
    """The environment of a process in a framework venv (its editable install is this checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}
