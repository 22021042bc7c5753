"""SkyRL's VisGym recipes (sft, instruct) played by the skyrl-gym env: parsing, rewards, done flags, feedback."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
import skyrl_gym

from agent.maze import MOVES, Feedback, generate_from_seed, shortest_path
from agent.protocol import KEYWORD
from training.skyrl.env import MazeTextEnv, register_skyrl_envs
from training.skyrl.recipes import (
    extract_keyword_action,
    extract_tuple_action,
    has_tag_format,
    sft_parse_failure_text,
)

PLACEHOLDER = [{"role": "user", "content": "placeholder"}]
STOP = "('stop', 'stop')"


@pytest.fixture(autouse=True)
def _registered():
    yield
    register_skyrl_envs()  # back to the defaults for other tests


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("('move', 0)", "('move', 0)"),
        ("<action>('move', 3)</action>", "('move', 3)"),
        ("I go (right) now: (\"move\", 2)", "(\"move\", 2)"),
        ("(move, 1)", "('move', 1)"),  # a bare name is quoted
        ("('stop', 'stop') then ('move', 0)", STOP),  # the first one wins
        ("('mark', (0.5, [1, ')']))", "('mark', (0.5, [1, ')']))"),  # brackets inside strings
        ("(3, 1)", "('3', 1)"),  # any word: the env then says the name is unknown
        ("('move', 0, 1)", None),
        ("['move', 1]", None),
        ("('move', 0", None),
        ("move right", None),
    ],
)
def test_tuple_extraction(reply, action):
    assert extract_tuple_action(reply) == action


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("<action>left</action>", "('move', 2)"),
        ("think <action>UP</action> no, <action> down </action>", "('move', 3)"),  # the last tag
        ("<action>left</action> ... <action>jump</action>", None),  # the last tag must be a word
        ("<action>stop</action>", STOP),
        ("left", None),
    ],
)
def test_keyword_extraction(reply, action):
    assert extract_keyword_action(reply) == action


def test_tag_format():
    assert has_tag_format("<observation>a</observation><justification>b</justification><action>c</action>")
    assert not has_tag_format("<observation> </observation><justification>b</justification><action>c</action>")
    assert not has_tag_format("('move', 0)")


def tagged(action: str) -> str:
    return f"<observation>a maze</observation>\n<justification>closer</justification>\n<action>{action}</action>"


def optimal(seed: int, recipe: str, size: int = 7) -> list[str]:
    layout = generate_from_seed(size, size, seed)
    moves = [f"('move', {d})" for d in shortest_path(layout.grid, layout.start, layout.goal)]
    if recipe == "instruct":
        return [KEYWORD.format_action(("move", int(m[-2]))) for m in moves] + ["<action>stop</action>"]
    return [tagged(m) for m in moves] + [tagged(STOP)]


def play(recipe: str, seed: int, replies: list[str], max_turns: int = 15, env_id: str = "maze_2d/simple"):
    register_skyrl_envs(reward=recipe)
    env = skyrl_gym.make("visgym", env_config={}, extras={"visgym_env_id": env_id, "seed": seed, "max_turns": max_turns})
    conversation, _ = env.init(copy.deepcopy(PLACEHOLDER))
    outs = []
    for reply in replies:
        out = env.step(reply)
        outs.append(out)
        conversation += out["observations"]
        if out["done"]:
            break
    return env, conversation, outs


def test_sft_rewards():
    _, _, outs = play("sft", 0, optimal(0, "sft"))
    assert [o["reward"] for o in outs] == [0.0] * 8 + [1.0] and outs[-1]["done"] and outs[-1]["observations"] == []
    bare = [tagged_text.split("<action>")[1].split("</action>")[0] for tagged_text in optimal(0, "sft")]
    assert play("sft", 0, bare)[2][-1]["reward"] == pytest.approx(0.8)  # no tags: no format credit
    assert play("sft", 3, [tagged(STOP)])[2][-1]["reward"] == pytest.approx(0.2)  # a tagged failure
    assert play("sft", 3, [STOP])[2][-1]["reward"] == 0.0


def test_sft_parse_failure_before_each_move():
    replies = [r for move in optimal(0, "sft") for r in ("<observation>x</observation> I am thinking.", move)]
    env, conversation, outs = play("sft", 0, replies, max_turns=30)
    assert len(outs) == 18 and outs[-1]["done"]
    assert outs[-1]["reward"] == pytest.approx(0.8 + 0.2 * 9 / 18)
    failure = conversation[1]["content"][0]["text"]
    # built from the env's action space, as upstream's wrapper builds it
    assert failure == sft_parse_failure_text(env.env.action_space.get_function_names())
    assert "'move', 'stop'" in failure and outs[0]["metadata"]["env_feedback"] == "parse_failure"
    assert conversation[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_never_stopping_ends_at_max_turns_without_truncation_from_the_env():
    wall = next(d for d, (dr, dc) in enumerate(MOVES) if generate_from_seed(7, 7, 5).grid[5 + dr, 1 + dc] == 1)
    env, conversation, outs = play("sft", 5, [tagged(f"('move', {wall})")] * 40)
    assert len(outs) == 15 and [o["done"] for o in outs] == [False] * 14 + [True]
    assert all(not o["metadata"]["truncated"] for o in outs)  # the wrapper ended it, not the env
    assert outs[-1]["reward"] == pytest.approx(0.2)
    assert conversation[1]["content"][0]["text"] == Feedback.HIT_WALL.value  # env_feedback shown
    assert env.get_metrics()["wall_bumps"] == 15


def test_instruct_recipe_no_truncation_at_15_with_max_turns_18():
    env, conversation, outs = play("instruct", 20, optimal(20, "instruct"), max_turns=18)
    assert len(outs) == 17 and outs[-1]["reward"] == 1.0 and outs[-1]["done"]  # 16 moves and a stop
    assert [o["done"] for o in outs[:15]] == [False] * 15
    assert "<action>left</action>" in conversation[0]["content"][0]["text"]  # relaxed prompt
    assert env.env.relaxed
    assert [o["metadata"]["env_feedback"] for o in outs[:3]] == [Feedback.EXECUTED.value] * 3


def test_instruct_rewards_are_task_only():
    assert play("instruct", 3, ["<action>stop</action>"])[2][-1]["reward"] == 0.0
    _, conv, outs = play("instruct", 0, ["('move', 0)"] * 15)  # tuples are not this recipe's actions
    assert outs[-1]["done"] and outs[-1]["reward"] == 0.0 and len(outs) == 15
    assert "<action>ACTION</action>" in conv[1]["content"][0]["text"]


@pytest.mark.parametrize("recipe", ["sft", "instruct"])
def test_recipes_on_visgyms_own_env(recipe):
    """With VisGym installed as gymnasium, maze_2d/easy is its env (here a stand-in)."""
    saved = gym.registry.pop("maze_2d/easy")
    gym.register(id="maze_2d/easy", entry_point="tests.agent.visgym_standin:VisGymStandIn",
                 kwargs={"maze_width": 9, "maze_height": 9}, disable_env_checker=True)
    try:
        env, conversation, outs = play(recipe, 4, optimal(4, recipe, size=9), max_turns=20, env_id="maze_2d/easy")
        assert outs[-1]["reward"] == 1.0 and env.success
        assert "9x9" in conversation[0]["content"][0]["text"]
        task = MazeTextEnv(extras={"visgym_env_id": "maze_2d/easy", "seed": 4}, reward="task")
        obs, _ = task.init(PLACEHOLDER)
        assert "9x9 maze" in obs[0]["content"][0]["text"]
        assert task.step("('move', 1)")["metadata"]["feedback_code"] in ("HIT_WALL", "EXECUTED")
    finally:
        gym.registry["maze_2d/easy"] = saved


def test_recipe_protocols_are_fixed():
    with pytest.raises(ValueError, match="keyword protocol"):
        register_skyrl_envs(reward="instruct", protocol="tuple")
    assert MazeTextEnv(extras={"seed": 1}, reward="instruct").protocol.name == "keyword"
