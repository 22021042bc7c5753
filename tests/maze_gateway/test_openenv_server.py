"""``maze-env serve`` (on openenv-core) against OpenEnv's own clients, run in the ecosystem venv.

* OpenEnv's ``GenericEnvClient``, in a process that imports only openenv-core and the project's
  core: a BFS policy reading each image solves seeds 0..63 of maze_2d/simple with 64 sessions open
  at once, every frame equal to the local env's; a 65th session is refused with a clear error.
* Bad input (a step before a reset, unknown variant, bad seed, a malformed or over-long action) is
  a clear error or the env's own format feedback, never a 500; idle sessions are reaped.
* The HTTP routes (reset, step, schema, health) answer as OpenEnv documents them.
"""

from __future__ import annotations

import json
import socket
import subprocess

import gymnasium as gym
import httpx
import pytest

from agent.maze import decode_data_url
from agent.protocol import TUPLE

from .conftest import maze_env_server
from .venvs import ROOT, venv_env

CHECKS = ROOT / "tests" / "maze_gateway" / "openenv_checks.py"


def run_check(python, check: str, url: str, timeout: float = 240) -> dict:
    proc = subprocess.run([str(python), str(CHECKS), check, url], env=venv_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server(eco_python, tmp_path_factory):
    log = tmp_path_factory.mktemp("maze-env") / "serve.log"
    with maze_env_server(eco_python, log) as url:
        yield url
    # Sessions ending (normally, or refused at capacity) leave no application errors in the log.
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def test_generic_client_bfs_solves_64_sessions_at_once_with_frames_equal_to_the_local_env(eco_python, server):
    out = run_check(eco_python, "bfs", server)
    print(f"\nOpenEnv GenericEnvClient + BFS: {out['solved']}/{out['episodes']} solved, {out['frames']} frames "
          f"compared, {out['solved_within_turn_limit']} within the 15-turn limit")
    assert out["episodes"] == 64 and out["solved"] == 64 and out["mismatched_seeds"] == []
    assert out["frames"] > 64 * 5
    # Seed 20's shortest path is 16 moves: solved by playing to the stop, not within the runner's 15 turns.
    assert out["solved_within_turn_limit"] == 63
    assert out["capacity_error"] == ("CAPACITY_REACHED: Server at capacity: 64/64 sessions active. "
                                     "Cannot accept new connections.")
    assert out["other_packages_loaded"] == []  # openenv-core and agent only


def test_bad_input_is_a_clear_error_or_the_envs_feedback(eco_python, server):
    out = run_check(eco_python, "errors", server)
    assert "no episode to step: reset first" in out["step_before_reset"]
    assert "unknown variant 'maze_2d/huge'; known: ['maze_2d/easy', 'maze_2d/hard', 'maze_2d/simple']" in out[
        "unknown_variant"]
    assert "seed must be an integer >= 0, got -1" in out["negative_seed"]
    assert "unknown reset argument(s) ['size']" in out["unknown_argument"]
    assert "VALIDATION_ERROR" in out["missing_field"]
    bad = out["bad_actions"]
    assert bad["['move', 1]"] == {"text": "Action format invalid, it must be a tuple (name, payload).", "done": False}
    assert bad["(move, 0"]["text"] == "Cannot parse the action, action invalid."
    assert bad["('jump', 1)"]["text"] == "Action name not recognised."
    assert bad["('move', 7)"]["text"] == "Action not in the valid action space, nothing executed."
    assert "VALIDATION_ERROR" in bad["9" * 20]["error"]  # longer than MAX_ACTION_CHARS: refused before parsing
    assert "the episode is over" in out["step_after_stop"]
    typed = out["typed"]  # the package's typed client on maze_2d/hard
    assert typed["image_px"] == 275 and typed["state"]["variant"] == "maze_2d/hard"
    assert typed["state"]["seed"] == 5 and typed["state"]["max_turns"] == 30 and typed["state"]["step_count"] == 0
    assert typed["step_text"] in ("Action executed successfully.", "Cannot move into a wall, the agent did not move.")


def test_idle_sessions_are_reaped_and_their_slot_freed(eco_python, tmp_path):
    with maze_env_server(eco_python, tmp_path / "serve.log", "--max-sessions", "1", "--idle-timeout", "1") as url:
        out = run_check(eco_python, "reaper", url)
    assert out["refused_while_active"].startswith("CAPACITY_REACHED: Server at capacity: 1/1")
    assert out["second_after_idle"] is True
    assert "no open episode in this session: a session ends with its socket or after --idle-timeout seconds without a call; open a new session" in out["idle_session_step"]


def test_http_routes(server):
    health = httpx.get(f"{server}/health").json()
    assert health == {"status": "healthy"}
    schema = httpx.get(f"{server}/schema").json()
    assert schema["action"]["required"] == ["action"] and {"image", "text", "info"} <= set(schema["observation"][
        "properties"])
    reset = httpx.post(f"{server}/reset", json={"seed": 7, "variant": "maze_2d/easy"})
    assert reset.status_code == 200
    body = reset.json()
    env = gym.make("maze_2d/easy").unwrapped
    frame, info = env.reset(seed=7)
    assert (decode_data_url(body["observation"]["image"]) == frame).all()
    assert body["observation"]["text"] == TUPLE.initial_text(9, 9) and body["done"] is False
    assert body["observation"]["info"]["maze_map"] == info["maze_map"].tolist()
    assert body["observation"]["info"]["distance"] == info["distance"]
    bad = httpx.post(f"{server}/reset", json={"seed": 0, "variant": "maze_3d"})
    assert bad.status_code == 422 and "unknown variant 'maze_3d'" in bad.json()["detail"]
    assert httpx.post(f"{server}/reset", json={"seed": -3}).status_code == 422
    # Reset fields of the wrong type are the caller's error (422 naming the field), never a 500.
    for field, value, says in [("variant", ["maze_2d/easy"], "unknown variant"), ("variant", 3, "unknown variant"),
                               ("variant", {"id": "maze_2d/easy"}, "unknown variant"), ("episode_id", 7, "episode_id")]:
        wrong = httpx.post(f"{server}/reset", json={"seed": 0, field: value})
        assert wrong.status_code == 422, (field, value, wrong.text)
        assert says in str(wrong.json()["detail"]), wrong.text
    step = httpx.post(f"{server}/step", json={"action": {"action": "('move', 0)"}})
    assert step.status_code == 409 and "WebSocket session" in step.json()["detail"]
    assert httpx.post(f"{server}/step", json={"action": {"act": 1}}).status_code == 422


def test_cli_failures_are_one_line_with_their_exit_code(eco_python):
    def maze_env(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(eco_python), "-m", "maze_gateway.cli", "serve", *args], env=venv_env(),
                              capture_output=True, text=True, timeout=60, check=False)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = maze_env("--port", str(taken.getsockname()[1]))
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "in use" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = maze_env("--max-sessions", "0")
    assert r.returncode == 2 and "max_sessions" in r.stderr and "Traceback" not in r.stderr, r.stderr
