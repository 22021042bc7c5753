"""The evaluation routes, mounted on a real OpenAI-compatible app served over HTTP."""

from __future__ import annotations

import contextlib
import time

import httpx
import pytest

from agent.tools.scripted_server import create_app
from evaluation import EvalConfig, evaluate
from evaluation.api import router
from tests.support.uvicorn_thread import serving
from tests.support.net_trap import ConnectionTrap


@pytest.fixture(scope="module")
def gateway():
    """The scripted OpenAI app with the evaluation router mounted, on 127.0.0.1."""
    app = create_app()
    app.include_router(router)
    with _serve(app) as url:
        yield url


@contextlib.contextmanager
def _serve(app):
    """``app`` on uvicorn on a free 127.0.0.1 port in a thread; yields its base URL."""
    with serving(app) as url:
        yield url.removesuffix("/v1")


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


# -- episodes under a key's limits ----------------------------------------------------------------------
ONE_SLOT, CAPPED, OPS = "sk-one-slot-0123456789", "sk-capped-0123456789ab", "sk-ops-0123456789abcd"
EPISODE_KEYS = {"keys": [
    {"name": "one-slot", "models": ["*"], "secrets": [ONE_SLOT], "limits": {"concurrent": 1}},
    {"name": "capped", "models": ["*"], "secrets": [CAPPED], "limits": {"episodes": 1, "concurrent": 8}},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [OPS]},
]}


@pytest.fixture(scope="module")
def gated_gateway():
    """The same app behind the gateway's key gate (serving.auth), as the gateway mounts this router."""
    import yaml

    from serving.auth import Gate, GateMiddleware
    from serving.config import AuthSpec

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEST_EPISODE_KEYS", yaml.safe_dump(EPISODE_KEYS))
        app = create_app()
        app.include_router(router)
        app.add_middleware(GateMiddleware, gate=Gate(AuthSpec(keys_env="TEST_EPISODE_KEYS")))
        with _serve(app) as url:
            yield url


def _post_episode(url: str, key: str, model: str, seed: int = 3) -> httpx.Response:
    return httpx.post(f"{url}/v1/episodes", json={"model": model, "seed": seed}, timeout=120,
                      headers={"Authorization": f"Bearer {key}"})


@pytest.mark.parametrize(("key", "message", "plain_refused"), [
    (ONE_SLOT, "Rate limit reached for key 'one-slot' on concurrent requests: limit 1. Please try again in 1s.", True),
    (CAPPED, "Rate limit reached for key 'capped' on server-side episodes: limit 1. Please try again in 1s.", False),
])
def test_an_episode_holds_its_key_slot_for_its_life_and_plays_within_it(gated_gateway, key, message, plain_refused):
    """The episode's own model calls (in-process, through the gate with the caller's key) run in
    the slot it holds: with one slot it still plays to the goal, while a second episode and (with
    no slot left) a plain call of the key are refused with 429 and Retry-After."""
    from concurrent.futures import ThreadPoolExecutor

    ops = {"Authorization": f"Bearer {OPS}"}
    httpx.post(f"{gated_gateway}/stats/reset", headers=ops)
    with ThreadPoolExecutor(1) as pool:
        playing = pool.submit(_post_episode, gated_gateway, key, "bfs?delay=0.3")
        deadline = time.monotonic() + 30
        while httpx.get(f"{gated_gateway}/stats", headers=ops).json()["requests"] == 0:  # its first call is made
            assert time.monotonic() < deadline
            time.sleep(0.02)
        refused = _post_episode(gated_gateway, key, "bfs")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json() == {"error": {"message": message, "type": "requests", "code": "rate_limit_exceeded"}}
        plain = httpx.post(f"{gated_gateway}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                           json={"model": "bfs", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert (plain.status_code == 429) is plain_refused
        done = playing.result(timeout=120)
    assert done.status_code == 200, done.text
    assert done.json()["success"] and done.json()["stop_reason"] == "goal"  # none of its calls refused
    again = _post_episode(gated_gateway, key, "bfs")  # the slot was given back
    assert again.status_code == 200 and again.json()["success"]
