"""The evaluation routes, mounted on a real OpenAI-compatible app served over HTTP."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
import uvicorn

from agent.scripted_server import create_app
from evaluation import EvalConfig, evaluate
from evaluation.api import router
from tests.support.net_trap import ConnectionTrap


@pytest.fixture(scope="module")
def gateway():
    """The scripted OpenAI app with the evaluation router mounted, on 127.0.0.1."""
    app = create_app()
    app.include_router(router)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_post_episode_returns_the_trajectory(gateway):
    r = httpx.post(f"{gateway}/v1/episodes", json={"model": "bfs", "seed": 3}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] and body["seed"] == 3 and body["stop_reason"] == "goal"
    assert len(body["turns"]) == body["optimal_moves"] + 1 and body["turns"][-1]["action"] == ["stop", "stop"]


@pytest.mark.parametrize(
    "payload, status, text",
    [
        ({"model": "nope", "seed": 1}, 404, "nope"),
        ({"model": "bfs", "env_id": "maze_2d/giant"}, 400, "unknown env id"),
        ({"model": "bfs", "history": "recent"}, 400, "history policy"),
        ({"model": "bfs", "seed": -1}, 422, "seed"),
        ({"seed": 1}, 422, "model"),
    ],
)
def test_bad_episode_requests(gateway, payload, status, text):
    r = httpx.post(f"{gateway}/v1/episodes", json=payload, timeout=60)
    assert r.status_code == status and text in r.text


def test_leaderboard_json(gateway, tmp_path, monkeypatch):
    db = str(tmp_path / "lb.sqlite")
    monkeypatch.setenv("MAZE_DB", db)
    evaluate(EvalConfig(endpoint=f"{gateway}/v1", db=db, seeds="0-7"))
    r = httpx.get(f"{gateway}/v1/leaderboard", timeout=30)
    assert r.status_code == 200
    (row,) = r.json()["data"]
    assert row["model"] == "bfs" and row["summary"]["n"] == 8 and row["summary"]["solved"] == 8


def test_leaderboard_builds_its_store_once_per_database(gateway, tmp_path, monkeypatch):
    from evaluation.api import _store

    monkeypatch.setenv("MAZE_DB", str(tmp_path / "once.sqlite"))
    before = _store.cache_info()
    for _ in range(3):
        assert httpx.get(f"{gateway}/v1/leaderboard", timeout=30).json() == {"object": "list", "data": []}
    after = _store.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)


def test_episode_never_calls_the_host_the_client_names(gateway):
    """A hostile Host header must not make the gateway connect there (nor send the caller's key)."""
    with ConnectionTrap() as trap:
        r = httpx.post(f"{gateway}/v1/episodes", json={"model": "bfs", "seed": 5}, timeout=60,
                       headers={"Host": f"127.0.0.1:{trap.port}", "Authorization": "Bearer sk-secret-of-the-caller"})
        time.sleep(0.3)  # a connection attempt, if any, has been accepted by now
    assert r.status_code == 200, r.text
    assert r.json()["success"] and r.json()["seed"] == 5
    assert trap.received == [], trap.received
