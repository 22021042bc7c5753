"""``maze-env serve`` started in the openenv venv (see :mod:`tests.maze_gateway.venvs`)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from .venvs import venv_bin, venv_env


@pytest.fixture(scope="session")
def eco_python() -> Path:
    """The openenv venv's interpreter: openenv-core and the project's core, nothing else."""
    return venv_bin("openenv")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def maze_env_server(python: Path, log: Path, *args: str) -> Iterator[str]:
    """``maze-env serve --port 0 ARGS`` in the ecosystem venv, logging to ``log``; yields its base URL
    once /health answers."""
    with log.open("w") as out:
        proc = subprocess.Popen([str(python), "-m", "maze_gateway.cli", "serve", "--port", "0", *args], env=venv_env(),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while (match := re.search(r"on (http://\S+) ", log.read_text())) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"maze-env serve did not start: {log.read_text()}")
            time.sleep(0.2)
        url = match.group(1)
        while not _healthy(url):  # the line is printed as the server starts, not once it accepts
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"maze-env serve never became healthy: {log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
