"""The gymnasium environment: registration, checker, actions, feedback, reward, episode end."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agent  # noqa: F401  (registers the ids)
from agent.env import VARIANTS, MazeEnv
from agent.maze import Feedback, shortest_path, validate_action

MAZE0 = ["#######", "#...#.#", "#.###.#", "#.....#", "###.###", "#.....#", "#######"]


@pytest.mark.parametrize("env_id", sorted(VARIANTS))
def test_registered_and_checked(env_id):
    env = gym.make(env_id)
    variant = VARIANTS[env_id]
    # The bare env, as VisGym's registration gives it: no time limit, nothing in front of get_prompt.
    assert type(env) is MazeEnv and env.spec.max_episode_steps is None
    assert (env.maze_height, env.maze_width) == (variant.size, variant.size)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (variant.size * 25, variant.size * 25, 3) and obs.dtype == np.uint8
    check_env(env, skip_render_check=False)


@pytest.mark.parametrize("env_id", sorted(VARIANTS))
def test_same_seed_same_rollout(env_id):
    def rollout():
        env = gym.make(env_id)
        obs, _ = env.reset(seed=42)
        frames = [obs]
        for a in ["('move', 0)", "('move', 3)", "('move', 1)", "('move', 2)"]:
            frames.append(env.step(a)[0])
        return np.stack(frames)

    np.testing.assert_array_equal(rollout(), rollout())


@pytest.mark.parametrize(
    "action, feedback",
    [
        ("('move', 0)", Feedback.EXECUTED),
        ("move right", Feedback.CANNOT_PARSE),
        ("('move', 0", Feedback.CANNOT_PARSE),
        ("('move', 0, 1)", Feedback.BAD_FORMAT),
        ("'move'", Feedback.BAD_FORMAT),
        ("[1, 2, 3]", Feedback.BAD_FORMAT),
        ("('jump', 0)", Feedback.UNKNOWN_ACTION),
        ("(3, 0)", Feedback.UNKNOWN_ACTION),
        ("('move', 4)", Feedback.OUT_OF_SPACE),
        ("('move', -1)", Feedback.OUT_OF_SPACE),
        ("('move', 1.0)", Feedback.OUT_OF_SPACE),
        ("('move', '0')", Feedback.OUT_OF_SPACE),
        ("('stop', '')", Feedback.OUT_OF_SPACE),
        ("('stop', 'stops')", Feedback.OUT_OF_SPACE),
        ("('stop', 'st p')", Feedback.OUT_OF_SPACE),
        ("('stop', 'é')", Feedback.OUT_OF_SPACE),
        ("('stop', 3)", Feedback.OUT_OF_SPACE),
        ("('stop', 'stop')", Feedback.EXECUTED),
        ("('stop', 'a1')", Feedback.EXECUTED),
        (("move", np.int64(2)), Feedback.EXECUTED),
        (("move", True), Feedback.EXECUTED),
        (["move", 3], Feedback.BAD_FORMAT),  # a list is not an action, as in VisGym
        ("['move', 1]", Feedback.BAD_FORMAT),
        ("('move', 12345678901234567890)", Feedback.OUT_OF_SPACE),  # VisGym raises OverflowError here
    ],
)
def test_validation_order(action, feedback):
    assert validate_action(action)[0] is feedback


def explicit_env(start=(5, 1), goal=(1, 5)) -> MazeEnv:
    env = MazeEnv(size=7)
    env.reset(options={"maze": MAZE0, "agent": start, "goal": goal})
    return env


def test_wall_bump_keeps_agent_and_reports():
    env = explicit_env()
    _, reward, term, trunc, info = env.step("('move', 1)")  # wall above (5,1)
    assert info["feedback_code"] == "HIT_WALL" and info["agent"].tolist() == [5, 1] and info["bumped"]
    assert info["env_feedback"] == Feedback.HIT_WALL.value
    assert (reward, term, trunc) == (0.0, False, False)


def test_invalid_action_changes_nothing():
    env = explicit_env()
    before = env.render_text()
    _, reward, term, _, info = env.step("('move', 7)")
    assert info["feedback"] == Feedback.OUT_OF_SPACE.value and not info["valid"]
    assert env.render_text() == before and reward == 0.0 and not term


def test_reaching_goal_without_stop_does_not_end_or_reward():
    env = explicit_env(start=(3, 5), goal=(1, 5))
    env.step("('move', 1)")
    _, reward, term, _, info = env.step("('move', 1)")
    assert info["agent"].tolist() == [1, 5] and info["distance"] == 0.0
    assert reward == 0.0 and not term
    _, reward, term, _, _ = env.step("('stop', 'stop')")
    assert reward == 1.0 and term


def test_wrong_stop_terminates_with_zero():
    env = explicit_env()
    _, reward, term, _, _ = env.step("('stop', 'stop')")
    assert reward == 0.0 and term


def test_no_truncation_unless_asked():
    env = gym.make("maze_2d/simple")
    env.reset(seed=0)
    for _ in range(40):
        _, _, term, trunc, _ = env.step("('move', 1)")
        assert not term and not trunc
    limited = gym.make("maze_2d/simple", max_episode_steps=15)  # gymnasium's TimeLimit, on request
    limited.reset(seed=0)
    truncs = [limited.step("('move', 1)")[3] for _ in range(15)]
    assert truncs == [False] * 14 + [True]


def test_info_and_text_render():
    env = explicit_env()
    _, _, _, _, info = env.step("('move', 0)")
    assert info["distance"] == 4.0 + 3.0 and isinstance(info["distance"], float)
    assert info["goal"] == (1, 5) and info["maze"] == MAZE0 and info["target"].tolist() == [1, 5]
    assert info["maze_map"].tolist() == [[1 if ch == "#" else 0 for ch in row] for row in MAZE0]
    assert env.render_text().splitlines()[5] == "#.A...#"
    assert env.render_text().splitlines()[1] == "#...#G#"


def test_solver_path_solves_every_variant():
    for env_id in VARIANTS:
        env = gym.make(env_id)
        env.reset(seed=3)
        raw = env.unwrapped
        for d in shortest_path(raw.grid, raw.agent, raw.goal):
            env.step(("move", d))
        assert env.step(("stop", "stop"))[1] == 1.0


@pytest.mark.parametrize(
    "options, match",
    [
        ({"maze": MAZE0, "agent": (5, 1)}, "missing"),
        ({"maze": MAZE0[:5], "agent": (5, 1), "goal": (1, 5)}, "does not match"),
        ({"maze": MAZE0, "agent": (0, 0), "goal": (1, 5)}, "on a wall"),
        ({"maze": MAZE0, "agent": (9, 1), "goal": (1, 5)}, "outside"),
        ({"maze": [*MAZE0[:5], "#......", MAZE0[6]], "agent": (5, 1), "goal": (1, 5)}, "border"),  # (5, 6) open
    ],
)
def test_bad_initial_state_is_a_clear_error(options, match):
    with pytest.raises(ValueError, match=match):
        MazeEnv(size=7).reset(options=options)


def test_bad_render_mode_and_size():
    with pytest.raises(ValueError, match="render_mode"):
        MazeEnv(render_mode="human")
    with pytest.raises(ValueError, match="odd"):
        gym.make("maze_2d/simple", maze_width=8)
    with pytest.raises(ValueError, match="disagree"):
        MazeEnv(size=7, maze_height=9)
