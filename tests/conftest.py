"""Shared fixtures: the public maze test vectors (tests/data) and a real scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from agent.demo import scripted_server

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def vectors() -> list[dict]:
    return json.loads((DATA / "maze_vectors_public.json").read_text())["cases"]


@pytest.fixture(scope="session")
def scripted_url():
    """Base URL of the scripted BFS server, a real HTTP server on 127.0.0.1 (one per run)."""
    with scripted_server() as url:
        yield url


@pytest.fixture
def scripted(scripted_url):
    """The scripted server with its counters reset; yields (base_url, stats getter)."""
    root = scripted_url.removesuffix("/v1")
    httpx.post(f"{root}/stats/reset").raise_for_status()

    class Handle:
        url = scripted_url

        @staticmethod
        def stats() -> dict:
            return httpx.get(f"{root}/stats").json()

        @staticmethod
        def requests() -> list[dict]:
            return httpx.get(f"{root}/requests").json()

    return Handle
