"""The ecosystem venv (openenv-core, verifiers, inspect-ai beside the project's core) and servers run in it.

The three frameworks pin versions of openai, pillow and botocore that the serving stack's venv
cannot take, so scripts/setup.sh installs them, with this package, into a venv of their own
(``.venv-eco``, or ``$MAZE_ECO_VENV``); these tests run their processes with its interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def eco_venv() -> Path:
    return Path(os.environ.get("MAZE_ECO_VENV", ROOT / ".venv-eco"))


@pytest.fixture(scope="session")
def eco_python() -> Path:
    python = eco_venv() / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: scripts/setup.sh installs the ecosystem venv (.[ecosystem])")
    return python


def eco_env(**extra: str) -> dict[str, str]:
    """The environment of a process in the ecosystem venv: this checkout first on the path."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **extra}


@contextmanager
def maze_env_server(python: Path, log: Path, *args: str) -> Iterator[str]:
    """``maze-env serve --port 0 ARGS`` in the ecosystem venv, logging to ``log``; yields its base URL
    once /health answers."""
    with log.open("w") as out:
        proc = subprocess.Popen([str(python), "-m", "maze_gateway.cli", "serve", "--port", "0", *args], env=eco_env(),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while (match := re.search(r"on (http://\S+) ", log.read_text())) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"maze-env serve did not start: {log.read_text()}")
            time.sleep(0.2)
        url = match.group(1)
        while httpx.get(f"{url}/health", timeout=5).status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("maze-env serve never became healthy")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
