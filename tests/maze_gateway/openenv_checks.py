"""Client side of the OpenEnv tests, run in the ecosystem venv: OpenEnv's own clients against
``maze-env serve``. Prints one JSON object; tests/maze_gateway/test_openenv_server.py reads it.

    python openenv_checks.py bfs URL       # 64 sessions at once, BFS on the image, frames vs the local env
    python openenv_checks.py errors URL    # bad input over the session: clear errors, the env's feedback
    python openenv_checks.py reaper URL    # an idle session is closed and its slot freed (server: 1 session)

The ``bfs`` check imports only openenv-core and the project's core (agent); it reports what else
got imported, so the test can hold it to that.
"""

from __future__ import annotations

import asyncio
import json
import sys

import gymnasium as gym
from openenv.core.generic_client import GenericEnvClient

from agent.env import get_variant, read_env, register_envs
from agent.maze import decode_data_url, png_data_url
from agent.protocol import TUPLE, user_message
from agent.runner import solver_reply

VARIANT = "maze_2d/simple"
MAX_STEPS = 100


def local_env():
    register_envs()
    return gym.make(VARIANT, disable_env_checker=True).unwrapped


async def play(url: str, seed: int, all_reset: asyncio.Barrier) -> dict:
    """One episode through the server and the same moves on a local env, frame by frame."""
    env = local_env()
    async with GenericEnvClient(base_url=url) as client:
        result = await client.reset(seed=seed, variant=VARIANT)
        frame, info = env.reset(seed=seed)
        await all_reset.wait()  # every session is open and reset before anyone moves
        obs = result.observation
        mismatches = []
        same = [obs["image"] == png_data_url(frame), obs["text"] == TUPLE.initial_text(*read_env(env)),
                obs["info"]["maze_map"] == info["maze_map"].tolist()]
        frames = 1
        # The server never truncates (the turn limit is the runner's): play to the stop, within a bound.
        for _turn in range(MAX_STEPS):
            # The BFS policy reads the maze off the image the server sent, as a model would.
            reply = solver_reply([user_message(obs["text"], image_url=obs["image"])])
            result = await client.step({"action": reply})
            frame, reward, terminated, _, info = env.step(reply)
            obs, frames = result.observation, frames + 1
            same += [obs["image"] == png_data_url(frame), (decode_data_url(obs["image"]) == frame).all(),
                     result.reward == reward, result.done == terminated,
                     obs["info"]["agent"] == [int(v) for v in info["agent"]],
                     obs["info"]["env_feedback"] == info["env_feedback"], obs["text"] == info["env_feedback"]]
            if result.done:
                break
        if not all(same):
            mismatches.append(seed)
        return {"seed": seed, "solved": bool(result.done and result.reward == 1.0), "frames": frames,
                "mismatch": bool(mismatches), "within_turn_limit": frames - 1 <= get_variant(VARIANT).max_turns}


async def capacity_error(url: str) -> str:
    """What a session past the server's limit is told: OpenEnv's server accepts the socket, sends
    the error and closes it before reading anything, so the message is read off the socket (a
    client that sends first may only see the close). A session that is let in hears nothing."""
    from websockets.asyncio.client import connect

    async with connect(url.replace("http://", "ws://") + "/ws") as ws:
        try:
            reply = json.loads(await asyncio.wait_for(ws.recv(), timeout=2))
        except TimeoutError:
            return ""
    return f"{reply['data']['code']}: {reply['data']['message']}"


async def bfs(url: str, sessions: int = 64) -> dict:
    barrier = asyncio.Barrier(sessions + 1)
    episodes = [asyncio.create_task(play(url, seed, barrier)) for seed in range(sessions)]
    await barrier.wait()  # all 64 sessions are open now: one more must be refused
    refused = await capacity_error(url)
    results = await asyncio.gather(*episodes)
    loaded = sorted({m.split(".")[0] for m in sys.modules} & {"verifiers", "inspect_ai", "serving", "evaluation",
                                                                "training", "maze_gateway", "ray", "vllm", "torch"})
    return {"solved": sum(r["solved"] for r in results), "episodes": len(results),
            "solved_within_turn_limit": sum(r["solved"] and r["within_turn_limit"] for r in results),
            "frames": sum(r["frames"] for r in results),
            "mismatched_seeds": [r["seed"] for r in results if r["mismatch"]],
            "capacity_error": refused, "other_packages_loaded": loaded}


async def errors(url: str) -> dict:
    from maze_gateway.openenv_client import MazeEnvClient

    out: dict = {}
    async with GenericEnvClient(base_url=url) as client:
        out["step_before_reset"] = await _error_of(client.step({"action": "('move', 0)"}))
        out["unknown_variant"] = await _error_of(client.reset(seed=0, variant="maze_2d/huge"))
        out["negative_seed"] = await _error_of(client.reset(seed=-1))
        out["unknown_argument"] = await _error_of(client.reset(seed=0, size=9))
        out["missing_field"] = await _error_of(client.step({"move": 0}))
        await client.reset(seed=3, variant=VARIANT)
        bad = {}
        for text in ("['move', 1]", "(move, 0", "('jump', 1)", "('move', 7)", "9" * 5000):
            try:
                result = await client.step({"action": text})
                bad[text[:20]] = {"text": result.observation["text"], "done": result.done}
            except RuntimeError as exc:
                bad[text[:20]] = {"error": str(exc)}
        out["bad_actions"] = bad
        await client.step({"action": "('stop', 'stop')"})
        out["step_after_stop"] = await _error_of(client.step({"action": "('move', 0)"}))
    async with MazeEnvClient(base_url=url) as typed:
        result = await typed.reset(seed=5, variant="maze_2d/hard")
        state = await typed.state()
        step = await typed.step("('move', 3)")
        out["typed"] = {"image_px": decode_data_url(result.observation.image).shape[0], "state": state.model_dump(),
                        "step_text": step.observation.text, "distance": step.observation.info["distance"]}
    return out


async def _error_of(call) -> str:
    try:
        await call
    except RuntimeError as exc:
        return str(exc)
    return ""


async def reaper(url: str) -> dict:
    """With one session allowed: the first goes idle, is reaped, and the slot is free again."""
    first = GenericEnvClient(base_url=url)
    await first.connect()
    await first.reset(seed=0, variant=VARIANT)
    refused_while_active = await capacity_error(url)
    # OpenEnv's reaper passes every max(timeout / 4, 5 s): the slot frees within a pass or two.
    deadline = asyncio.get_running_loop().time() + 30
    while (refused := await capacity_error(url)) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(1)
    second_ok = refused == ""
    after = await _error_of(first.step({"action": "('move', 0)"}))
    await first.close()
    return {"refused_while_active": refused_while_active, "second_after_idle": second_ok, "idle_session_step": after}


if __name__ == "__main__":
    check, url = sys.argv[1], sys.argv[2]
    print(json.dumps(asyncio.run({"bfs": bfs, "errors": errors, "reaper": reaper}[check](url))))
