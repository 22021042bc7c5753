"""The skyrl-gym env, driven through skyrl-gym's own API, replays the runner's episodes exactly."""

from __future__ import annotations

import base64
import copy

import numpy as np
import pytest
import skyrl_gym

from agent.maze import MOVES, generate_from_seed, shortest_path
from agent.protocol import get_protocol
from agent.runner import RunnerConfig, run_episode
from training.skyrl.env import ENV_CLASS, VISGYM_ENV_CLASS, MazeTextEnv, register_skyrl_envs

PLACEHOLDER = [{"role": "user", "content": "placeholder"}]


@pytest.fixture(autouse=True)
def _registered():
    register_skyrl_envs()
    yield
    register_skyrl_envs()  # back to the defaults for other tests


def _wall_direction(layout) -> int:
    r, c = layout.start
    return next(d for d, (dr, dc) in enumerate(MOVES) if layout.grid[r + dr, c + dc] == 1)


def _solving_replies(seed: int, protocol: str = "tuple") -> list[str]:
    """Noise first (every feedback kind), then a shortest path and a stop."""
    proto = get_protocol(protocol)
    layout = generate_from_seed(7, 7, seed)
    path = shortest_path(layout.grid, layout.start, layout.goal)
    noise = ["I am not sure.", proto.format_action(("move", _wall_direction(layout)))]
    if protocol == "tuple":
        noise += ["('move', 7)", "('jump', 1)", "(move, 9.5)"]
    moves = [proto.format_action(("move", d)) for d in path]
    return [*noise, *moves, proto.format_action(("stop", "stop"))]


def _runner_episode(seed: int, replies: list[str], protocol: str = "tuple", max_turns: int | None = None):
    """Play with the runner; return its record and the last user message of every call."""
    seen: list[dict] = []
    queue = list(replies)

    def replay(messages):
        seen.append(copy.deepcopy(messages[-1]))
        return queue.pop(0) if queue else "no more replies"

    cfg = RunnerConfig(protocol=protocol, max_turns=max_turns)
    return run_episode(replay, seed, cfg), seen


def _skyrl_episode(env_class: str, extras: dict, replies: list[str]):
    env = skyrl_gym.make(env_class, env_config={}, extras=dict(extras))
    observations, _ = env.init(copy.deepcopy(PLACEHOLDER))
    rewards, dones = [], []
    for reply in replies:
        out = env.step(reply)
        rewards.append(out["reward"])
        dones.append(out["done"])
        observations += out["observations"]
        if out["done"]:
            break
    env.close()
    return env, observations, rewards, dones


def _parts(message: dict) -> tuple[str, str, bytes]:
    text, image = message["content"]
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    return message["role"], text["text"], base64.b64decode(url.split(",", 1)[1])


CASES = [
    pytest.param(0, "tuple", None, "solve", "goal", id="solved-with-noise"),
    pytest.param(3, "tuple", None, "wrong-stop", "wrong_stop", id="wrong-stop"),
    pytest.param(5, "tuple", None, "bump", "turn_limit", id="turn-limit"),
    pytest.param(7, "tuple", 4, "solve", "turn_limit", id="max-turns-4"),
    pytest.param(1, "keyword", None, "solve", "goal", id="keyword-protocol"),
]


@pytest.mark.parametrize(("seed", "protocol", "max_turns", "script", "outcome"), CASES)
@pytest.mark.parametrize("env_class", [ENV_CLASS, VISGYM_ENV_CLASS])
def test_same_episode_as_runner(seed, protocol, max_turns, script, outcome, env_class):
    register_skyrl_envs(protocol=protocol)
    proto = get_protocol(protocol)
    layout = generate_from_seed(7, 7, seed)
    replies = {
        "solve": _solving_replies(seed, protocol),
        "wrong-stop": [proto.format_action(("stop", "stop"))],
        "bump": [proto.format_action(("move", _wall_direction(layout)))] * 20,
    }[script]
    record, seen = _runner_episode(seed, replies, protocol, max_turns)
    assert record.stop_reason.value == outcome
    replies_used = [t.reply for t in record.turns]

    extras = {"visgym_env_id": "maze_2d/simple", "seed": seed, "max_turns": record.max_turns}
    env, observations, rewards, dones = _skyrl_episode(env_class, extras, replies_used)

    assert [_parts(m) for m in observations] == [_parts(m) for m in seen]
    assert rewards == [t.reward for t in record.turns]
    assert dones == [False] * (len(record.turns) - 1) + [True]
    assert env.success == record.success
    assert env.get_metrics()["parse_failures"] == record.parse_failures


def test_task_plus_parsed_reward():
    register_skyrl_envs(reward="task+parsed")
    replies = _solving_replies(0)  # 1 unparseable reply ("I am not sure."), the rest parse
    _, _, rewards, dones = _skyrl_episode(ENV_CLASS, {"seed": 0, "max_turns": 30}, replies)
    assert dones[-1] and not any(dones[:-1])
    assert rewards[:-1] == [0.0] * (len(rewards) - 1)
    assert rewards[-1] == pytest.approx(0.8 * 1.0 + 0.2 * (len(rewards) - 1) / len(rewards))

    # A well-formed failure still scores > 0: SkyRL's logged pass@1 would overstate.
    _, _, rewards, _ = _skyrl_episode(ENV_CLASS, {"seed": 3}, ["('stop', 'stop')"])
    assert rewards == [pytest.approx(0.2)]


def test_extras_from_parquet_rows():
    # pandas hands rows over with numpy ints and NaN for a missing seed.
    seeded = MazeTextEnv(extras={"visgym_env_id": "maze_2d/easy", "seed": np.int64(4)})
    assert (seeded.seed, seeded.max_turns, seeded.env_id) == (4, 20, "maze_2d/easy")
    obs, meta = seeded.init(PLACEHOLDER)
    assert "9x9 maze" in obs[0]["content"][0]["text"] and meta["seed"] == 4

    unseeded = [MazeTextEnv(extras={"seed": float("nan")}) for _ in range(4)]
    assert len({e.seed for e in unseeded}) > 1  # random mazes, each replayable from its seed


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="reward must be one of"):
        MazeTextEnv(extras={}, reward="format")
    with pytest.raises(ValueError, match="unknown env id"):
        MazeTextEnv(extras={"visgym_env_id": "maze_2d/giant"})
    with pytest.raises(ValueError, match="unknown protocol"):
        register_skyrl_envs(protocol="json")
