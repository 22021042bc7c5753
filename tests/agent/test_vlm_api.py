"""The env driven as VisGym's Interactor and SkyRL's VisGym wrappers drive it: same calls, kwargs, info reads."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import numpy as np
import pytest

import agent
from agent.env import MazeEnv
from agent.maze import AGENT_RGB, CELL_PX, GOAL_RGB, MOVES, Feedback, generate_from_seed, shortest_path
from agent.maze.render import FLOOR_RGB
from agent.runner import EpisodeSpec, RunnerConfig, bfs_policy, run_episode
from agent.runner.policies import read_frame
from tests.agent.visgym_standin import VisGymStandIn

SEEDS = range(64)


def interactor_episode(env, model, seed=None, init_state=None, max_steps=20, include_env_feedback=True):
    """The call sequence of VisGym's ``Interactor.run_episode`` (gymnasium/vlm/interactor.py)."""
    while hasattr(env, "env"):  # it unwraps gymnasium wrappers this way
        env = env.env
    _obs, info = env.reset(init_state=init_state, seed=seed)
    stats = {"step": 0, "reward": 0.0, "terminated": False, "truncated": False}
    feedbacks = []
    while True:
        if stats["step"] >= max_steps:
            stats["truncated"] = True
            break
        frame = env.render()
        instructions = env.get_prompt()
        prompt = instructions if stats["step"] == 0 else ""
        if stats["step"] and include_env_feedback and "env_feedback" in info:
            prompt = "Environment feedback: " + info["env_feedback"]  # a str, or this raises
        action = model(frame, prompt)
        _obs, reward, terminated, truncated, info = env.step(action)
        feedbacks.append(info["env_feedback"])
        stats["step"] += 1
        stats["reward"] += reward
        stats["terminated"], stats["truncated"] = terminated, truncated
        if terminated or truncated:
            break
    return stats, feedbacks


def bfs_model(frame, prompt):
    """A scripted model: reads the image, answers with VisGym's tuple text."""
    grid, agent_pos, goal = read_frame(frame)
    path = shortest_path(grid, agent_pos, goal)
    return f"('move', {path[0]})" if path else "('stop', 'stop')"


def test_interactor_with_a_bfs_model_solves_every_seed():
    env = gym.make("maze_2d/simple")
    results = [interactor_episode(env, bfs_model, seed=s) for s in SEEDS]
    assert sum(st["reward"] == 1.0 and st["terminated"] for st, _ in results) == 64
    # env_feedback every step, a sentence of the env's (never None: the Interactor concatenates it)
    assert all(fb == Feedback.EXECUTED.value for _, fbs in results for fb in fbs)


def test_what_gym_make_returns_serves_the_skyrl_wrappers():
    # SkyRL's wrappers call these on what gymnasium.make returns, with these kwargs.
    env = gym.make("maze_2d/easy", relaxed=True)
    env.reset(seed=3)
    prompt = env.get_prompt()
    assert "9x9" in prompt and "<action>left</action>" in prompt
    assert list(env.action_space.get_function_names()) == ["move", "stop"]
    assert env.render().shape == (225, 225, 3)
    # relaxed envs also take a bare keyword; tuple text still works
    assert env.step("left")[4]["feedback_code"] in ("EXECUTED", "HIT_WALL")
    assert env.step("('move', 0)")[4]["valid"]
    plain = gym.make("maze_2d/easy")
    plain.reset(seed=3)
    assert "('move', direction)" in plain.get_prompt() and "<action>" not in plain.get_prompt()
    assert plain.step("left")[4]["feedback_code"] == "CANNOT_PARSE"


def test_init_state_round_trip():
    env = gym.make("maze_2d/simple")
    frame, info = env.reset(seed=11)
    state = json.loads(json.dumps(env.get_init_state()))  # VisGym stores it as JSON
    other = MazeEnv(maze_width=7, maze_height=7)
    frame2, info2 = other.reset(init_state=state, seed=99)  # the Interactor passes both
    np.testing.assert_array_equal(frame, frame2)
    for key in ("agent", "target", "maze_map"):
        np.testing.assert_array_equal(info[key], info2[key])
    stats, _ = interactor_episode(other, bfs_model, seed=5, init_state=state)
    assert stats["reward"] == 1.0
    with pytest.raises(ValueError, match="missing"):
        other.reset(init_state={"maze_map": state["maze_map"]})


@pytest.mark.parametrize("env_id", ["maze_2d/simple", "maze_2d/easy", "maze_2d/hard"])
def test_solve_solves_every_seed(env_id):
    env = gym.make(env_id)
    for seed in SEEDS:
        env.reset(seed=seed)
        for action in env.solve():
            _, reward, terminated, truncated, _ = env.step(action)
        assert (reward, terminated, truncated) == (1.0, True, False), seed


def test_solve_pads_to_num_steps_and_final_goal_copy():
    env = gym.make("maze_2d/simple")
    env.reset(seed=0)
    padded = env.solve(strategy="bfs", num_steps=20)
    assert len(padded) >= 20 and padded[-1] == "('stop', 'stop')"
    # the Interactor's provide_final_goal: a deep copy solves, the original is untouched
    twin = copy.deepcopy(env)
    for action in padded:
        _, reward, terminated, _, _ = twin.step(str(action))
    assert terminated and reward == 1
    assert tuple(env.agent) == generate_from_seed(7, 7, 0).start


def test_list_actions_are_format_errors():
    env = gym.make("maze_2d/simple")
    _, info0 = env.reset(seed=0)
    for text in ("['move', 1]", "['move', 0]", "['stop', 'stop']"):
        _, reward, terminated, _, info = env.step(text)
        assert info["env_feedback"] == Feedback.BAD_FORMAT.value and not terminated and reward == 0.0
        np.testing.assert_array_equal(info["agent"], info0["agent"])


def _goal_cell(frame, goal):
    r, c = goal
    return frame[r * CELL_PX : (r + 1) * CELL_PX, c * CELL_PX : (c + 1) * CELL_PX].reshape(-1, 3)


def _count(cell, rgb):
    return int((cell == rgb).all(-1).sum())


def test_leaving_the_goal_leaves_a_white_disc():
    env = gym.make("maze_2d/simple")
    frame, info = env.reset(seed=0)
    goal = tuple(info["target"])
    for action in env.solve()[:-1]:
        frame, *_ = env.step(action)
    on_goal = _goal_cell(frame, goal)
    assert _count(on_goal, AGENT_RGB) == 104 and _count(on_goal, GOAL_RGB) == 625 - 104
    open_dir = next(d for d, (dr, dc) in enumerate(MOVES) if env.grid[goal[0] + dr, goal[1] + dc] == 0)
    frame, *_ = env.step(f"('move', {open_dir})")
    left = _goal_cell(frame, goal)  # VisGym painted the old disc white over the red
    assert _count(left, FLOOR_RGB) == 104 and _count(left, GOAL_RGB) == 625 - 104
    frame, *_ = env.step(f"('move', {(open_dir + 2) % 4})")
    np.testing.assert_array_equal(_goal_cell(frame, goal), on_goal)
    frame, *_ = env.step("('move', 9)")  # invalid: the agent stays on the goal, frame unchanged
    np.testing.assert_array_equal(_goal_cell(frame, goal), on_goal)
    # a new episode starts clean
    frame, _ = env.reset(seed=0)
    assert _count(_goal_cell(frame, goal), GOAL_RGB) == 625


def test_env_feedback_each_step_and_on_reset():
    env = gym.make("maze_2d/simple")
    _, info = env.reset(seed=0)
    assert info["env_feedback"] == "" and isinstance(info["distance"], float)
    for text, fb in [
        ("('move', 1)", Feedback.HIT_WALL),  # wall above the start of seed 0
        ("('move', 0)", Feedback.EXECUTED),
        ("(move, 0)", Feedback.CANNOT_PARSE),
        ("('move', 0, 1)", Feedback.BAD_FORMAT),
        ("('jump', 0)", Feedback.UNKNOWN_ACTION),
        ("('move', 12345678901234567890)", Feedback.OUT_OF_SPACE),  # VisGym raises OverflowError
    ]:
        _, _, _, _, info = env.step(text)
        assert info["env_feedback"] == fb.value == env.env_feedback
        assert set(info) >= {"agent", "distance", "env_feedback", "maze_map", "target"}


def test_text_mode_draws_visgyms_text_maze():
    env = gym.make("maze_2d/simple", render_mode="ansi")
    env.reset(seed=0)
    rows = env.render(mode="ansi").splitlines()
    assert len(rows) == 9 and rows[0] == "#" * 9 and rows[6][2] == "A" and rows[2][6] == "T"
    assert "'#' is a wall" in env.get_prompt()


@pytest.fixture
def visgym_owns_easy():
    """VisGym installed as gymnasium registers maze_2d/easy to its own env."""
    saved = gym.registry.pop("maze_2d/easy")
    gym.register(id="maze_2d/easy", entry_point="tests.agent.visgym_standin:VisGymStandIn",
                 kwargs={"maze_width": 9, "maze_height": 9}, disable_env_checker=True)
    yield
    gym.registry["maze_2d/easy"] = saved


def test_runner_plays_visgyms_own_env(visgym_owns_easy):
    agent.register_envs()  # leaves the id VisGym owns alone
    assert gym.spec("maze_2d/easy").entry_point.endswith("VisGymStandIn")
    cfg = RunnerConfig(env_id="maze_2d/easy")
    records = [run_episode(bfs_policy(), EpisodeSpec(seed=s), cfg) for s in range(8)]
    assert all(r.success for r in records)
    layout = generate_from_seed(9, 9, 3)
    assert records[3].start == list(layout.start) and records[3].optimal_moves == len(
        shortest_path(layout.grid, layout.start, layout.goal))
    # feedback codes come from VisGym's sentences when the env reports none
    moves = run_episode(lambda messages: "('move', 1)", EpisodeSpec(seed=0), RunnerConfig(env_id="maze_2d/easy", max_turns=3))
    assert {t.feedback_code for t in moves.turns} <= {"HIT_WALL", "EXECUTED"} and moves.stop_reason.value == "turn_limit"
    jump = run_episode(lambda messages: "('jump', 1)", EpisodeSpec(seed=0), RunnerConfig(env_id="maze_2d/easy", max_turns=1))
    assert jump.turns[0].feedback_code == "UNKNOWN_ACTION"
    assert isinstance(gym.make("maze_2d/easy").unwrapped, VisGymStandIn)
